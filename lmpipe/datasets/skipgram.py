"""word2vec training data in tf.data graph code: words, vocabulary, subsampling, windows, pairs,
negatives.

The recipe is the reference implementation's (Mikolov et al.'s word2vec.c, as gensim follows
it), computed for a whole batch of sentences at once:

1. Words: each sentence is lowercased (optional, Unicode-aware), the typographic apostrophe
   U+2019 becomes `'`, and the text is split on every run of characters that are neither
   letters, digits nor apostrophes; apostrophes at the ends of a word are quotation marks and
   are removed ("'tis" -> "tis", "o'er" stays). This spells words as the evaluation sets
   (questions-words, WordSim-353, SimLex-999) do once lowercased.
2. Vocabulary: words occurring at least `min_count` times, by count descending (ties by the
   word's UTF-8 bytes), with their counts. Words outside it are removed from the sentences
   before windows are taken, as in the reference.
3. Subsampling: a word with frequency `f = count / retained words` is kept with probability
   `min(1, (sqrt(f / t) + 1) * t / f)`, `t = sample` (0 disables it).
4. Dynamic window: each center word draws its window `b` uniformly from 1..window; its
   contexts are the words at most `b` positions away in the same sentence.
5. Skip-gram: one example per (center, context) pair, the center's input vector predicting
   the context word. CBOW: one example per center with at least one context word, the mean of
   the context words' input vectors predicting the center.
6. Negative sampling: `negative` noise words per example, drawn from the unigram distribution
   raised to 0.75 (`count**0.75 / sum`). A noise word equal to the example's target gets
   weight 0, as the reference skips it.

Randomness: stateless ops keyed by `seed`, the input pipeline, the epoch and the batch index,
so the same seed gives the same examples in any process.
"""

import dataclasses

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from lmpipe.datasets.corpus import TextCorpus, pipeline_position

METHODS = ("skipgram", "cbow")

# Anything that is not a letter, a digit or an apostrophe separates words.
WORD_DELIMITER = r"[^\p{L}\p{N}']+"

NOISE_POWER = 0.75

_SUBSAMPLE, _WINDOW, _NEGATIVE = 0, 1, 2  # independent random streams of a batch


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
class Vocabulary:
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
            A `Vocabulary`.
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


# Per-batch transforms ---------------------------------------------------------------------------


def subsample(ids, keep_probabilities, seed):
    """Drop each word of `ids` (ragged `[S, (n)]` int) with probability 1 - its keep
    probability (`keep_probabilities`, float `[V]`), keyed by the `[2]` `seed`."""
    draws = tf.random.stateless_uniform(tf.shape(ids.flat_values), seed, dtype=tf.float64)
    keep = draws < tf.gather(tf.cast(keep_probabilities, tf.float64), ids.flat_values)
    return tf.ragged.boolean_mask(ids, ids.with_flat_values(keep))


def reduced_windows(num_words, window, seed):
    """int32 `[num_words]`: each center word's effective window, uniform over 1..window."""
    return tf.random.stateless_uniform(
        [num_words], seed, minval=1, maxval=window + 1, dtype=tf.int32
    )


def context_windows(ids, window, effective_windows):
    """Every center word's context positions, as a dense `[N, 2 * window]` grid.

    Args:
        ids: ragged `[S, (n)]` word ids (N words in all).
        window: the largest window.
        effective_windows: int `[N]`, each center's window b (1..window).

    Returns:
        `(positions, valid)`: int32 `[N, 2 * window]` indices into `ids.flat_values` of the
        words at offsets -window..-1, 1..window (clipped into range), and bool `[N, 2 * window]`
        that is True where the offset is within the center's b and inside its sentence.
    """
    num_words = tf.shape(ids.flat_values, out_type=tf.int32)[0]
    rows = tf.cast(ids.value_rowids(), tf.int32)
    starts = tf.gather(tf.cast(ids.row_starts(), tf.int32), rows)  # [N]
    limits = tf.gather(tf.cast(ids.row_limits(), tf.int32), rows)  # [N]
    offsets = tf.concat([tf.range(-window, 0), tf.range(1, window + 1)], 0)  # [2W]
    positions = tf.range(num_words)[:, None] + offsets[None, :]  # [N, 2W]
    valid = (
        (positions >= starts[:, None])
        & (positions < limits[:, None])
        & (tf.abs(offsets)[None, :] <= tf.cast(effective_windows, tf.int32)[:, None])
    )
    return tf.clip_by_value(positions, 0, tf.maximum(num_words - 1, 0)), valid


def skipgram_pairs(ids, window, effective_windows):
    """`(centers, contexts)` int `[P]`: every (center, context) pair of the windows, center by
    center in sentence order, contexts from the left-most to the right-most."""
    positions, valid = context_windows(ids, window, effective_windows)
    words = ids.flat_values
    centers = tf.broadcast_to(words[:, None], tf.shape(positions))
    return tf.boolean_mask(centers, valid), tf.boolean_mask(tf.gather(words, positions), valid)


def cbow_examples(ids, window, effective_windows):
    """`(centers [P], contexts [P, 2 * window], context_mask [P, 2 * window])` for every center
    with at least one context word; masked contexts hold id 0."""
    positions, valid = context_windows(ids, window, effective_windows)
    words = ids.flat_values
    contexts = tf.where(valid, tf.gather(words, positions), tf.zeros_like(positions, words.dtype))
    has_context = tf.reduce_any(valid, axis=1)
    return (
        tf.boolean_mask(words, has_context),
        tf.boolean_mask(contexts, has_context),
        tf.boolean_mask(valid, has_context),
    )


def alias_table(probabilities):
    """Walker's alias table of a discrete distribution, for sampling with one uniform draw.

    Column `j` of `V` columns, chosen uniformly, yields `j` with probability
    `thresholds[j] / 2**32` and `aliases[j]` otherwise (Vose's construction), so each id `i`
    comes out with probability `probabilities[i]` (to 2**-32).

    Args:
        probabilities: float `[V]`, non-negative, summing to 1.

    Returns:
        `(thresholds, aliases)`: uint64 numpy `[V]` in [0, 2**32], int32 numpy `[V]`.
    """
    probabilities = np.asarray(probabilities, np.float64)
    size = len(probabilities)
    scaled = probabilities * size / probabilities.sum()
    aliases = np.arange(size, dtype=np.int32)
    small = [i for i in range(size) if scaled[i] < 1.0]
    large = [i for i in range(size) if scaled[i] >= 1.0]
    while small and large:
        low, high = small.pop(), large.pop()
        aliases[low] = high
        scaled[high] -= 1.0 - scaled[low]
        (small if scaled[high] < 1.0 else large).append(high)
    for index in small + large:  # what is left is 1 up to rounding
        scaled[index] = 1.0
    thresholds = np.round(np.clip(scaled, 0.0, 1.0) * 2.0**32).astype(np.uint64)
    return thresholds, aliases


def negative_samples(thresholds, aliases, shape, seed):
    """int32 noise word ids of `shape` from an `alias_table`, keyed by the `[2]` `seed`.

    One uint32 draw `r` per sample: `r * V` splits into the column (`>> 32`) and a uniform
    fraction (the low 32 bits) compared with the column's threshold. A binary search over the
    cumulative distribution is several times slower on CPU.
    """
    draws = tf.random.stateless_uniform(shape, seed, minval=None, maxval=None, dtype=tf.uint32)
    product = tf.cast(draws, tf.uint64) * tf.cast(tf.size(aliases), tf.uint64)
    columns = tf.cast(tf.bitwise.right_shift(product, 32), tf.int32)
    fractions = tf.bitwise.bitwise_and(product, 0xFFFFFFFF)
    own = fractions < tf.gather(tf.cast(thresholds, tf.uint64), columns)
    return tf.where(own, columns, tf.gather(tf.cast(aliases, tf.int32), columns))


def candidates_with_negatives(targets, negative, noise_table, seed):
    """`(candidate_ids [P, 1 + negative], candidate_weights [P, 1 + negative])`: each target
    first, then its `negative` noise words drawn from `noise_table` (`(thresholds, aliases)`
    of an `alias_table`); a noise word equal to its target weighs 0."""
    targets = tf.cast(targets, tf.int32)
    noise = negative_samples(*noise_table, tf.stack([tf.size(targets), negative]), seed)
    candidates = tf.concat([targets[:, None], noise], axis=1)
    noise_weights = tf.cast(noise != targets[:, None], tf.float32)
    weights = tf.concat([tf.ones_like(noise_weights[:, :1]), noise_weights], axis=1)
    return candidates, weights


def check_word2vec_options(method, window, negative, sample):
    """Raise a ValueError naming the first bad option."""
    if method not in METHODS:
        raise ValueError(f"`method` must be one of {METHODS}, got method={method!r}.")
    for name, value in (("window", window), ("negative", negative)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"`{name}` must be a positive integer, got {name}={value!r}.")
    if isinstance(sample, bool) or not isinstance(sample, (int, float)) or not 0 <= sample < 1:
        raise ValueError(f"`sample` must be a number in [0, 1), got sample={sample!r}.")


def sentence_word_ids(
    corpus, vocabulary, sentences_per_batch=512, lower_case=True, input_context=None
):
    """Batches of `sentences_per_batch` sentences as ragged `[S, (words)]` int32 word ids,
    words outside `vocabulary` removed, cached in memory after the first pass (word ids take
    4 bytes per word), so that later epochs skip splitting and lookup."""
    table = vocabulary.lookup_table()

    def word_ids(sentences):
        words = split_words(sentences, lower_case)
        ids = tf.ragged.map_flat_values(table.lookup, words)
        ids = tf.ragged.boolean_mask(ids, ids >= 0)  # out-of-vocabulary words are removed
        return ids.with_flat_values(tf.cast(ids.flat_values, tf.int32))

    return (
        corpus_sentences(corpus, input_context)
        .batch(sentences_per_batch)
        .map(word_ids, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        .cache()
    )


def word2vec_examples(
    corpus,
    vocabulary,
    *,
    method="skipgram",
    window=5,
    negative=5,
    sample=1e-3,
    seed=0,
    sentences_per_batch=512,
    epochs=1,
    first_epoch=0,
    lower_case=True,
    input_context=None,
    word_ids=None,
    examples_per_batch=None,
):
    """A `tf.data.Dataset` of word2vec training batches, made from `sentences_per_batch`
    sentences at a time, in corpus order (as the reference implementation reads it).

    Args:
        corpus: a `TextCorpus`.
        vocabulary: its `Vocabulary`.
        method: "skipgram" or "cbow".
        window: the largest window (the dynamic window is drawn from 1..window).
        negative: noise words per example.
        sample: the subsampling threshold t (0: no subsampling).
        seed: int seed of every random choice.
        sentences_per_batch: sentences per batch.
        epochs: passes over the corpus, numbered from `first_epoch` (their seeds differ).
        first_epoch: the number of the first pass (to resume a run).
        lower_case: lowercase the text (as the vocabulary was learned).
        input_context: a `tf.distribute.InputContext`: which shard to read.
        word_ids: the `sentence_word_ids` of this corpus and shard, to reuse (and its cache)
            across calls; made here by default.
        examples_per_batch: None: one batch per `sentences_per_batch` sentences, of varying
            size. An int: the examples are regrouped into batches of exactly this many (the
            last batch of each epoch padded with examples of weight 0), so that a training
            step compiles once (XLA) and its tensors keep one size.

    Returns:
        A dataset of dicts: `input_ids` int32 `[P]` (skip-gram: the center) or `[P, 2 * window]`
        (CBOW: the contexts) with `input_mask` float32 `[P, 2 * window]` (1 = real context);
        `candidate_ids` int32 `[P, 1 + negative]`, the word to predict then the noise words;
        `candidate_weights` float32 `[P, 1 + negative]` (0 for skipped noise words and
        padding); `words` float32 `[P]`, each example's share of the vocabulary words of its
        sentences before subsampling (its batch's words over its examples), so that summing
        it counts the words processed, the measure of progress the learning rate decays with.
    """
    check_word2vec_options(method, window, negative, sample)
    if examples_per_batch is not None and (
        isinstance(examples_per_batch, bool)
        or not isinstance(examples_per_batch, int)
        or examples_per_batch < 1
    ):
        raise ValueError(
            "`examples_per_batch` must be None or a positive integer, got "
            f"examples_per_batch={examples_per_batch!r}."
        )
    _, pipeline_id = pipeline_position(input_context)
    keep = tf.constant(vocabulary.keep_probabilities(sample), tf.float64)
    noise_table = tuple(tf.constant(x) for x in alias_table(vocabulary.noise_distribution()))
    base_seed = tf.random.experimental.stateless_fold_in(
        tf.constant([seed, 0], tf.int64), pipeline_id
    )

    if word_ids is None:
        word_ids = sentence_word_ids(
            corpus, vocabulary, sentences_per_batch, lower_case, input_context
        )

    def make_batch(epoch, index, ids):
        batch_seed = tf.random.experimental.stateless_fold_in(
            tf.random.experimental.stateless_fold_in(base_seed, epoch), index
        )
        num_words = tf.size(ids.flat_values, out_type=tf.int64)
        if sample > 0:
            subsample_seed = tf.random.experimental.stateless_fold_in(batch_seed, _SUBSAMPLE)
            ids = subsample(ids, keep, subsample_seed)
        windows = reduced_windows(
            tf.size(ids.flat_values),
            window,
            tf.random.experimental.stateless_fold_in(batch_seed, _WINDOW),
        )
        if method == "skipgram":
            centers, contexts = skipgram_pairs(ids, window, windows)
            features = {"input_ids": centers}
            targets = contexts
        else:
            centers, contexts, mask = cbow_examples(ids, window, windows)
            features = {"input_ids": contexts, "input_mask": tf.cast(mask, tf.float32)}
            targets = centers
        candidates, weights = candidates_with_negatives(
            targets,
            negative,
            noise_table,
            tf.random.experimental.stateless_fold_in(batch_seed, _NEGATIVE),
        )
        examples = tf.shape(candidates)[0]
        share = tf.cast(num_words, tf.float32) / tf.cast(tf.maximum(examples, 1), tf.float32)
        features.update(
            candidate_ids=candidates,
            candidate_weights=weights,
            words=tf.fill([examples], share),
        )
        return features

    def make_epoch(epoch):
        return word_ids.enumerate().map(
            lambda index, ids: make_batch(epoch, index, ids),
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=True,
        )

    def make_fixed_epoch(epoch):
        # Each batch of sentences is padded to whole batches of examples and split; carrying
        # remainders over (Dataset.rebatch) would waste less padding but is several times
        # slower.
        return (
            make_epoch(epoch)
            .map(
                lambda features: split_examples(features, examples_per_batch),
                num_parallel_calls=tf.data.AUTOTUNE,
                deterministic=True,
            )
            .unbatch()
        )

    epochs_dataset = tf.data.Dataset.range(first_epoch, first_epoch + epochs)
    epoch_fn = make_epoch if examples_per_batch is None else make_fixed_epoch
    return epochs_dataset.flat_map(epoch_fn).prefetch(tf.data.AUTOTUNE)


def split_examples(features, size):
    """Pad every `[P, ...]` tensor of a batch with zeros (id 0, weight 0, no context, no
    words: examples that change nothing in training) to a multiple of `size` examples and
    split it into `[P / size, size, ...]`."""
    examples = tf.shape(features["candidate_ids"])[0]
    chunks = (examples + size - 1) // size
    split = {}
    for name, tensor in features.items():
        padding = [[0, chunks * size - examples]] + [[0, 0]] * (tensor.shape.rank - 1)
        split[name] = tf.reshape(tf.pad(tensor, padding), [chunks, size, *tensor.shape[1:]])
    return split
