"""word2vec's words and vocabulary: how sentences are split into words, and the words kept for
training with their counts (steps 1-2 of `lmpipe.datasets.examples.word2vec_examples`' recipe).

Words: each sentence is lowercased (optional, Unicode-aware), the typographic apostrophe
U+2019 becomes `'`, and the text is split on every run of characters that are neither letters,
digits nor apostrophes; apostrophes at the ends of a word are quotation marks and are removed
("'tis" -> "tis", "o'er" stays). This spells words as the evaluation sets (questions-words,
WordSim-353, SimLex-999) do once lowercased. Vocabulary: words occurring at least `min_count`
times, by count descending (ties by the word's UTF-8 bytes), with their counts.
"""

import dataclasses

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from lmpipe.datasets.corpora.corpus import TextCorpus

# Anything that is not a letter, a digit or an apostrophe separates words.
WORD_DELIMITER = r"[^\p{L}\p{N}']+"

NOISE_POWER = 0.75


def normalize_words(text, lower_case=True):
    """The text normalization applied before splitting: lowercase (Unicode) and U+2019 -> `'`.

    Args:
        text: a `tf.string` tensor of any shape.
        lower_case: lowercase the text.

    Returns:
        A `tf.string` tensor of the same shape.
    """
    text = tf.convert_to_tensor(text, tf.string)
    if lower_case:
        text = tf.strings.lower(text, encoding="utf-8")
    return tf.strings.regex_replace(text, "\u2019", "'")


def split_words(sentences, lower_case=True):
    """Split sentences into words, as word2vec training and evaluation see them.

    Args:
        sentences: a 1-D `tf.string` tensor `[S]`.
        lower_case: lowercase first.

    Returns:
        A `tf.RaggedTensor` `[S, (words)]` of `tf.string`.

    >>> split_words(tf.constant(["'Tis the King's cat, o\u2019er there!"])).to_list()
    [[b'tis', b'the', b"king's", b'cat', b"o'er", b'there']]
    """
    words = tf_text.regex_split(normalize_words(sentences, lower_case), WORD_DELIMITER)
    # Apostrophes at a word's ends are quotation marks, not part of the word.
    words = words.with_flat_values(tf.strings.regex_replace(words.flat_values, r"^'+|'+$", ""))
    return tf.ragged.boolean_mask(words, tf.strings.length(words) > 0)


def corpus_sentences(corpus, input_context=None):
    """The sentences of `corpus` (a `TextCorpus`), one `tf.string` scalar per element."""
    return corpus.documents(input_context=input_context).unbatch()


def as_corpus(corpus):
    """`corpus` as a `TextCorpus`: a `TextCorpus` as is, or an iterable of sentences (`str`)
    as a one-document in-memory corpus."""
    if isinstance(corpus, TextCorpus):
        return corpus
    if isinstance(corpus, (str, bytes)) or not hasattr(corpus, "__iter__"):
        raise ValueError(
            "`corpus` must be a lmpipe TextCorpus or an iterable of sentences (str), got "
            f"{type(corpus).__name__}."
        )
    sentences = [sentence for sentence in corpus if isinstance(sentence, str) and sentence.strip()]
    if not sentences:
        raise ValueError("`corpus` has no sentence: it needs at least one non-blank string.")
    return TextCorpus.from_documents([sentences])


@dataclasses.dataclass(frozen=True, eq=False)
class Word2VecVocabulary:
    """The words kept for training, by count descending, and what the corpus held.

    Attributes:
        words: tuple of `str`, index = word id.
        counts: int64 numpy array `[V]`, occurrences of each word in the corpus.
        total_words: words in the corpus, those below `min_count` included.
        num_sentences: sentences in the corpus.
        min_count: the threshold the vocabulary was cut at.
    """

    words: tuple
    counts: np.ndarray
    total_words: int
    num_sentences: int
    min_count: int

    def __len__(self):
        return len(self.words)

    @property
    def retained_words(self):
        """Occurrences of vocabulary words: the words training sees, before subsampling."""
        return int(self.counts.sum())

    @classmethod
    def from_counts(cls, word_counts, min_count, num_sentences=0):
        """A vocabulary from `{word: count}` (or pairs), cut at `min_count`.

        Raises:
            ValueError: no word occurs `min_count` times.
        """
        items = list(word_counts.items() if hasattr(word_counts, "items") else word_counts)
        total = int(sum(count for _, count in items))
        kept = [(word, int(count)) for word, count in items if count >= min_count]
        if not kept:
            most = max((count for _, count in items), default=0)
            raise ValueError(
                f"No word occurs min_count={min_count} times in the corpus (its {total} words; "
                f"the most frequent occurs {most} times): lower `min_count` or use a larger "
                "corpus."
            )
        kept.sort(key=lambda item: (-item[1], item[0].encode("utf-8")))
        return cls(
            words=tuple(word for word, _ in kept),
            counts=np.array([count for _, count in kept], np.int64),
            total_words=total,
            num_sentences=int(num_sentences),
            min_count=int(min_count),
        )

    @classmethod
    def learn(cls, corpus, min_count, lower_case=True, sentences_per_batch=4096):
        """Count the words of `corpus` in graph code and keep those occurring `min_count`
        times.

        Each batch of sentences is split and counted with `tf.unique_with_counts`; the partial
        counts are merged with the same op, so no Python runs per word occurrence.

        Args:
            corpus: a `TextCorpus` (or an iterable of sentences).
            min_count: minimum number of occurrences (a positive int).
            lower_case: lowercase the text first.
            sentences_per_batch: sentences counted together.

        Returns:
            A `Word2VecVocabulary`.
        """
        corpus = as_corpus(corpus)

        def count(sentences):
            words = split_words(sentences, lower_case).flat_values
            unique, _, counts = tf.unique_with_counts(words, out_idx=tf.int64)
            return unique, counts, tf.shape(sentences, out_type=tf.int64)[0]

        # Batches are split and counted on every core, in order (the vocabulary would not
        # depend on it: it is sorted by count and word).
        batches = (
            corpus_sentences(corpus)
            .batch(sentences_per_batch)
            .map(count, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
            .prefetch(tf.data.AUTOTUNE)
        )
        words, counts, pending, num_sentences = [], [], 0, 0
        merged = (tf.zeros([0], tf.string), tf.zeros([0], tf.int64))
        for unique, batch_counts, sentences in batches:
            words.append(unique)
            counts.append(batch_counts)
            pending += int(tf.size(unique))
            num_sentences += int(sentences)
            if pending > 4_000_000:
                merged = _merge_counts([merged[0], *words], [merged[1], *counts])
                words, counts, pending = [], [], 0
        merged = _merge_counts([merged[0], *words], [merged[1], *counts])
        pairs = zip(
            (word.decode("utf-8") for word in merged[0].numpy().tolist()),
            merged[1].numpy().tolist(),
            strict=True,
        )
        return cls.from_counts(pairs, min_count, num_sentences)

    def keep_probabilities(self, sample):
        """float64 `[V]`: the probability that subsampling keeps each word,
        `min(1, (sqrt(f / t) + 1) * t / f)` with `f = count / retained_words`, `t = sample`;
        all ones for `sample == 0`."""
        if sample == 0:
            return np.ones(len(self), np.float64)
        frequency = self.counts / self.retained_words
        return np.minimum(1.0, (np.sqrt(frequency / sample) + 1.0) * sample / frequency)

    def noise_distribution(self, power=NOISE_POWER):
        """float64 `[V]`: the negative-sampling distribution `count**power / sum`."""
        weights = self.counts.astype(np.float64) ** power
        return weights / weights.sum()

    def lookup_table(self):
        """A `tf.lookup.StaticHashTable` from word to int64 id, -1 for other words."""
        return tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(
                tf.constant(self.words, tf.string), tf.range(len(self), dtype=tf.int64)
            ),
            default_value=-1,
        )

    def index(self, word):
        """The id of `word`; KeyError naming the word if it is not in the vocabulary."""
        ids = self._ids()
        if word not in ids:
            raise KeyError(f"Word {word!r} is not in the vocabulary ({len(self)} words).")
        return ids[word]

    def __contains__(self, word):
        return word in self._ids()

    def _ids(self):
        ids = self.__dict__.get("_id_cache")
        if ids is None:
            ids = {word: index for index, word in enumerate(self.words)}
            object.__setattr__(self, "_id_cache", ids)
        return ids

    def save(self, path):
        """Write `total_words`, `num_sentences`, `min_count` then one `word<TAB>count` per line."""
        with tf.io.gfile.GFile(path, "w") as file:
            file.write(f"# {self.total_words} {self.num_sentences} {self.min_count}\n")
            for word, count in zip(self.words, self.counts.tolist(), strict=True):
                file.write(f"{word}\t{count}\n")

    @classmethod
    def load(cls, path):
        """A vocabulary written by `save`."""
        with tf.io.gfile.GFile(path, "r") as file:
            header = file.readline().split()
            words, counts = [], []
            for number, line in enumerate(file, start=2):
                parts = line.rstrip("\n").split("\t")
                if len(parts) != 2 or not parts[1].isdigit():
                    raise ValueError(f"{path}:{number}: expected `word<TAB>count`, got {line!r}.")
                words.append(parts[0])
                counts.append(int(parts[1]))
        if len(header) != 4 or header[0] != "#":
            raise ValueError(f"{path}:1: expected '# total_words num_sentences min_count'.")
        return cls(
            words=tuple(words),
            counts=np.array(counts, np.int64),
            total_words=int(header[1]),
            num_sentences=int(header[2]),
            min_count=int(header[3]),
        )


def _merge_counts(words, counts):
    words, counts = tf.concat(words, 0), tf.concat(counts, 0)
    unique, index = tf.unique(words, out_idx=tf.int64)
    return unique, tf.math.unsorted_segment_sum(counts, index, tf.size(unique, tf.int64))
