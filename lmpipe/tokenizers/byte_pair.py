"""Byte-level BPE, GPT-2's tokenizer, in the TensorFlow graph.

Text is cut into pre-tokens by GPT-2's pattern (contractions, a space and letters, a space and
digits, a space and other symbols, whitespace runs; `byte_pair_split`), each pre-token's UTF-8
bytes are written as printable characters (byte 0x20, the space, is "Ġ"; 0x0A, the newline, is
"Ċ"), and the merges of `merges.txt` join them in rank order into pieces of `vocab.json`
(`byte_pair_merging`). Every byte has a piece, so no text is unknown, and joining the pieces'
bytes gives the text back exactly.

All of it is TensorFlow's own graph ops (a regex replace and split, a hash table, one
`tf.while_loop` over a batch's distinct words), which tf.data and TF Serving run. Ids equal
openai's encoder.py, transformers' GPT2Tokenizer and AutoTokenizer on the tests' fixture of
texts chosen to break it (see tests/tokenizers/fixtures/make_byte_pair_reference.py).
"<|endoftext|>" written in a text is the end-of-text id, as Hugging Face makes it.

Learning a vocabulary (`BytePairTokenizer.train`, `lmpipe.tokenizers.byte_pair_trainer`) uses
Hugging Face's `tokenizers` library with GPT-2's byte-level pre-tokenizer.
"""

import json
import os
import pathlib
import tempfile

import tensorflow as tf

from lmpipe.tokenizers.byte_pair_merging import BytePairMerger, byte_characters, token_bytes
from lmpipe.tokenizers.byte_pair_split import split_words
from lmpipe.tokenizers.tokenizer import HF_TOKENIZER_CONFIG, Tokenizer, read_json
from lmpipe.tokenizers.tokenizer_json import byte_pair_file, has_tokenizer_file

VOCABULARY_FILE = "vocab.json"
"""Token -> id, as GPT-2's checkpoint folders hold it."""

MERGES_FILE = "merges.txt"
"""The merge rules, one "a b" per line in rank order (a "#version" first line is skipped)."""

END_OF_TEXT = "<|endoftext|>"
"""GPT-2's one special token: the end of a document, also its padding and unknown token."""

MIN_VOCABULARY = 258
"""The smallest vocabulary `train` learns: the end token, the 256 bytes and one merge."""

# The printable characters that byte-level BPE writes for the whitespace bytes (space, \t,
# \n, \v, \f, \r): a piece that begins with one of them starts a word.
_WHITESPACE_BYTES = "Ġĉ" + "ĊċČč"


class BytePairTokenizer(Tokenizer):
    """GPT-2's byte-level BPE: text to int32 ids in the graph, and back.

    The interface of every lmpipe tokenizer (`tokenize`, `tokenize_words`, `detokenize`,
    `save`/`load`, `train`, `from_pretrained`). Its special token is the end of text
    (`<|endoftext|>`), which plays the roles a causal language model needs: the separator
    between documents (`sep_id`), padding (`pad_id`, always masked out) and the unknown token
    (never produced: every byte has a piece). Typed in a text it is that id too, as in Hugging
    Face's tokenizers; `detokenize` writes it as its text, and leaves it out where it pads the
    end of a dense row (everywhere with `skip_special_tokens`). It has no `[CLS]` nor `[MASK]`,
    so it serves GPT and ELMo, not the masked-LM and classification pipelines.

    A word (for `tokenize_words` and `continuation_mask`) starts at a piece that begins with
    a whitespace byte ("Ġ", "Ċ", ...) and at the start of a text; punctuation continues the
    word before it.

    Args:
        vocabulary: `{token: id}` (vocab.json), ids exactly `0 .. len - 1`, with a token for
            each of the 256 bytes.
        merges: the merge rules, "a b" strings in rank order; both sides and what they make
            must be tokens (a rule given twice keeps its last rank, as in encoder.py).
        end_token: the end-of-text token, in `vocabulary`.
        add_prefix_space: put a space before each text (and each part between end tokens)
            that does not start with one, so its first word is tokenized as after a space
            (GPT-2: no).
        name: name of the `tf.Module`.

    Example:

    >>> from lmpipe.datasets import TextCorpus
    >>> hamlet = TextCorpus.shakespeare(plays=["hamlet"])
    >>> tokenizer = BytePairTokenizer.train(hamlet, vocab_size=1000)
    >>> ids = tokenizer.tokenize(["To be, or not to be."])
    >>> [tokenizer.id_to_token(i) for i in ids[0].numpy()]
    ['T', 'o', 'Ġbe', ',', 'Ġor', 'Ġnot', 'Ġto', 'Ġbe', '.']
    >>> tokenizer.detokenize(ids)
    <tf.Tensor: shape=(1,), dtype=string, numpy=array([b'To be, or not to be.'], dtype=object)>

    Reference: Radford et al., "Language Models are Unsupervised Multitask Learners", 2019
    (section 2.2); Sennrich et al., "Neural Machine Translation of Rare Words with Subword
    Units", 2016.
    """

    FORMAT = "lmpipe.BytePairTokenizer"

    def __init__(self, vocabulary, merges, end_token=END_OF_TEXT, add_prefix_space=False,
                 name=None):  # fmt: skip
        if not isinstance(add_prefix_space, bool):
            raise ValueError(f"`add_prefix_space` must be True or False, got {add_prefix_space!r}.")
        tokens = _tokens_in_id_order(vocabulary)
        missing = [c for c in byte_characters() if c not in vocabulary]
        if missing:
            raise ValueError(
                f"`vocabulary` lacks {len(missing)} of the 256 byte tokens, e.g. "
                f"{missing[:5]}: byte-level BPE needs one for every byte."
            )
        merges = _checked_merges(merges, vocabulary)
        if not isinstance(end_token, str) or not end_token or not end_token.isprintable():
            raise ValueError(
                f"`end_token` must be a non-empty string of printable characters: {end_token!r}."
            )
        if end_token not in vocabulary:
            raise ValueError(
                f"The vocabulary has no end-of-text token {end_token!r} (`end_token`)."
            )
        end_id = vocabulary[end_token]
        continuation = [
            i != end_id and not token.startswith(tuple(_WHITESPACE_BYTES))
            for i, token in enumerate(tokens)
        ]
        super().__init__(
            tokens,
            special={"pad": end_token, "unk": end_token, "sep": end_token},
            special_ids=[end_id],
            continuation_mask=continuation,
            lower_case=False,
            name=name,
        )
        self._merges = tuple(merges)
        self._end_token = end_token
        self._add_prefix_space = add_prefix_space
        self._merger = BytePairMerger(vocabulary, merges)
        # What each id stands for: the end token its text, any other token its bytes.
        self._token_bytes = tf.constant(
            [token_bytes(t) if i != end_id else end_token.encode() for i, t in enumerate(tokens)]
        )
        self._end_id = end_id
        # Called eagerly, one graph (one trace: the signature is fixed) runs the merge loop.
        self._tokenize_strings = tf.function(
            self._tokenize_flat,
            input_signature=[tf.TensorSpec([None], tf.string)],
            autograph=False,
        )

    # ------------------------------------------------------------------ construction and files

    @classmethod
    def from_files(cls, vocabulary_file, merges_file, end_token=END_OF_TEXT,
                   add_prefix_space=False):  # fmt: skip
        """A tokenizer for a `vocab.json` and a `merges.txt` (GPT-2's files)."""
        vocabulary = _read_vocabulary(vocabulary_file)
        merges = _read_merges(merges_file)
        try:
            return cls(vocabulary, merges, end_token, add_prefix_space)
        except ValueError as error:
            raise ValueError(f"{vocabulary_file}, {merges_file}: {error}") from None

    @classmethod
    def from_pretrained(cls, directory):
        """The tokenizer of a Hugging Face GPT-2 folder: `vocab.json` and `merges.txt`, with
        `add_prefix_space` and `eos_token` from `tokenizer_config.json` where it has them
        (GPT-2's defaults, false and `<|endoftext|>`, otherwise); without `vocab.json`, the
        vocabulary, merges and `add_prefix_space` of its `tokenizer.json` (transformers 5)."""
        folder = os.fspath(directory)
        if not os.path.isfile(os.path.join(folder, VOCABULARY_FILE)) and has_tokenizer_file(folder):
            path, vocabulary, merges, add_prefix_space = byte_pair_file(folder)
            try:
                return cls(vocabulary, merges, _hf_settings(folder)["eos_token"], add_prefix_space)
            except ValueError as error:
                raise ValueError(f"{path}: {error}") from None
        for file in (VOCABULARY_FILE, MERGES_FILE):
            if not os.path.isfile(os.path.join(folder, file)):
                raise ValueError(
                    f"{os.path.join(folder, file)} not found: a GPT-2 checkpoint folder needs "
                    f"its {VOCABULARY_FILE} and {MERGES_FILE}, or a tokenizer.json."
                )
        settings = _hf_settings(folder)
        return cls.from_files(
            os.path.join(folder, VOCABULARY_FILE),
            os.path.join(folder, MERGES_FILE),
            end_token=settings["eos_token"],
            add_prefix_space=settings["add_prefix_space"],
        )

    @classmethod
    def load(cls, directory):
        """Read a tokenizer written by `save`: vocab.json, merges.txt and tokenizer.json."""
        directory = os.fspath(directory)
        config, flags = cls.saved_config(directory, ["add_prefix_space"])
        end_token = config.get("end_token")
        if not isinstance(end_token, str):
            raise ValueError(
                f"{os.path.join(directory, 'tokenizer.json')}: `end_token` must be a string."
            )
        return cls.from_files(
            os.path.join(directory, VOCABULARY_FILE),
            os.path.join(directory, MERGES_FILE),
            end_token=end_token,
            **flags,
        )

    def save(self, directory):
        """Write vocab.json, merges.txt and tokenizer.json to `directory` (created if needed):
        the first two are GPT-2's files, which `from_files` and transformers read."""
        directory = pathlib.Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.write_files(directory)
        self.write_config(
            directory,
            end_token=self._end_token,
            add_prefix_space=self._add_prefix_space,
            vocabulary_size=self.vocabulary_size,
        )

    def write_files(self, directory):
        """Write `vocab.json` and `merges.txt` (as Hugging Face writes them) to `directory`."""
        directory = pathlib.Path(directory)
        vocabulary = {token: i for i, token in enumerate(self._tokens)}
        with open(directory / VOCABULARY_FILE, "w", encoding="utf-8") as file:
            json.dump(vocabulary, file, ensure_ascii=False)
            file.write("\n")
        with open(directory / MERGES_FILE, "w", encoding="utf-8", newline="\n") as file:
            file.write("#version: 0.2\n")
            file.writelines(merge + "\n" for merge in self._merges)

    @classmethod
    def train(cls, corpus, vocab_size=8000, min_frequency=2, add_prefix_space=False):
        """Learn a byte-level BPE vocabulary and merges from text (Hugging Face `tokenizers`,
        GPT-2's pre-tokenizer; deterministic for the same texts).

        The vocabulary is `<|endoftext|>` (id 0), the 256 byte characters, then the merged
        pieces, most frequent first, up to `vocab_size` (fewer on a small corpus). A
        `TextCorpus`'s documents are read as their sentences joined by spaces, as the GPT
        pipeline tokenizes them.

        Args:
            corpus: a `TextCorpus`, a `tf.data.Dataset` of strings, or an iterable of strings.
            vocab_size: the vocabulary size, at least 258 (the end token, the 256 bytes, one
                merge).
            min_frequency: the fewest occurrences of a pair for it to be merged.
            add_prefix_space: as the constructor's.
        """
        # The learner (lmpipe.tokenizers.byte_pair_trainer) imports this module, not the
        # reverse; it writes GPT-2's two files, which this class reads.
        with tempfile.TemporaryDirectory() as folder:
            cls.learner()(
                corpus,
                folder,
                vocab_size=vocab_size,
                min_frequency=min_frequency,
                add_prefix_space=add_prefix_space,
            )
            return cls.from_files(
                os.path.join(folder, VOCABULARY_FILE),
                os.path.join(folder, MERGES_FILE),
                add_prefix_space=add_prefix_space,
            )

    # ------------------------------------------------------------------ properties

    @property
    def merges(self):
        """The merge rules, "a b" strings in rank order (a new list)."""
        return list(self._merges)

    @property
    def end_token(self):
        """The end-of-text token (`<|endoftext|>`)."""
        return self._end_token

    @property
    def add_prefix_space(self):
        """Whether a space is put before each text."""
        return self._add_prefix_space

    # ------------------------------------------------------------------ implementation

    def piece_text(self, token, starts_word):
        """`token` without its byte-level space ("Ġ")."""
        return token.removeprefix("Ġ")

    def tokenize_documents(self, documents):
        """Token ids of documents of sentences, `[D, (sentences)]` -> `[D, (sentences),
        (pieces)]`: every sentence after a document's first is tokenized after a space, as in
        the running text (in byte-level BPE the space belongs to the next word's piece)."""
        first = tf.equal(tf.ragged.range(documents.row_lengths()), 0)
        spaced = tf.where(
            first.flat_values,
            documents.flat_values,
            tf.strings.join([" ", documents.flat_values]),
        )
        return self.tokenize(documents.with_flat_values(spaced))

    def _tokenize_batch(self, texts):
        return self._tokenize_strings(texts)

    def _tokenize_flat(self, texts):
        """`[N]` strings to int32 ids `[N, (pieces)]`: GPT-2's words, each merged."""
        words, special = split_words(texts, self._end_token, self._add_prefix_space)
        # A special word merges as a one-byte word would (to one piece), then becomes the end id.
        ids = self._merger.merge(tf.where(special.values, " ", words.values))  # [W, (pieces)]
        ids = ids.with_values(
            tf.where(tf.gather(special.values, ids.value_rowids()), self._end_id, ids.values)
        )
        return words.with_values(ids).merge_dims(1, 2)

    def _left_out(self, ids, skip_special_tokens):
        """The end token is also the padding: left out where it ends a dense (padded) row,
        kept in ragged rows (written as its text, as Hugging Face decodes it)."""
        if skip_special_tokens:
            return super()._left_out(ids, skip_special_tokens)
        if isinstance(ids, tf.RaggedTensor):
            return tf.zeros_like(ids, tf.bool)
        ending = tf.cast(tf.equal(ids, self._end_id), tf.int32)
        return tf.math.cumprod(ending, axis=-1, reverse=True) > 0  # the run of end ids at the end

    def _join(self, ids):
        """The pieces' bytes joined, made valid UTF-8 (ids may end inside a character; TF
        Serving's REST API refuses a string output that is not UTF-8): such bytes become
        U+FFFD, as in Hugging Face's decoding."""
        if not isinstance(ids, tf.RaggedTensor) and ids.shape.rank == 1:
            return self._join(ids[tf.newaxis])[0]
        text = tf.strings.reduce_join(tf.gather(self._token_bytes, ids), axis=-1)
        return tf.strings.unicode_transcode(text, "UTF-8", "UTF-8", errors="replace")

    def __repr__(self):
        return (
            f"BytePairTokenizer(vocabulary_size={self.vocabulary_size}, "
            f"merges={len(self._merges)}, add_prefix_space={self._add_prefix_space})"
        )


def _tokens_in_id_order(vocabulary):
    """The tokens of `{token: id}` sorted by id; ValueError unless the ids are 0 .. len - 1."""
    if not isinstance(vocabulary, dict) or not vocabulary:
        raise ValueError("`vocabulary` must be a non-empty dict {token: id} (vocab.json).")
    tokens = [None] * len(vocabulary)
    for token, token_id in vocabulary.items():
        if not isinstance(token, str):
            raise ValueError(f"`vocabulary`: token {token!r} is not a string.")
        if isinstance(token_id, bool) or not isinstance(token_id, int):
            raise ValueError(f"`vocabulary`: the id of {token!r} is not an integer: {token_id!r}.")
        if not 0 <= token_id < len(tokens) or tokens[token_id] is not None:
            raise ValueError(
                f"`vocabulary`: the ids must be 0 .. {len(tokens) - 1}, each once; "
                f"{token!r} has id {token_id}."
            )
        tokens[token_id] = token
    return tokens


def _checked_merges(merges, vocabulary):
    """`merges` as a list of "a b" strings whose sides are tokens; ValueError naming the rule."""
    if isinstance(merges, (str, bytes)):
        raise ValueError("`merges` must be a list of 'a b' rules; for a file use from_files.")
    checked = []
    for rank, merge in enumerate(merges):
        parts = merge.split(" ") if isinstance(merge, str) else None
        if parts is None or len(parts) != 2 or not all(parts):
            raise ValueError(f"`merges`: rule {rank} is not two tokens 'a b': {merge!r}.")
        for part in parts:
            if part not in vocabulary:
                raise ValueError(f"`merges`: rule {rank} {merge!r} joins {part!r}, not a token.")
        if parts[0] + parts[1] not in vocabulary:
            raise ValueError(
                f"`merges`: rule {rank} {merge!r} makes {parts[0] + parts[1]!r}, not a token."
            )
        checked.append(merge)
    return checked


def _read_vocabulary(path):
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ValueError(f"The vocabulary file {path!r} does not exist.")
    vocabulary = read_json(path)
    if not isinstance(vocabulary, dict):
        raise ValueError(f"{path} must hold a JSON object {{token: id}}.")
    return vocabulary


def _read_merges(path):
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ValueError(f"The merges file {path!r} does not exist.")
    with open(path, encoding="utf-8") as file:
        lines = [line.rstrip("\r\n") for line in file]
    merges = []
    for number, line in enumerate(lines, start=1):
        if (number == 1 and line.startswith("#version")) or not line:
            continue
        if len(line.split(" ")) != 2:
            raise ValueError(f"{path}, line {number}: not a merge rule 'a b': {line!r}.")
        merges.append(line)
    return merges


def _hf_settings(folder):
    """`add_prefix_space` and `eos_token` of a Hugging Face folder's tokenizer_config.json."""
    settings = {"add_prefix_space": False, "eos_token": END_OF_TEXT}
    path = os.path.join(folder, HF_TOKENIZER_CONFIG)
    if not os.path.isfile(path):
        return settings
    config = read_json(path)
    if not isinstance(config, dict):
        return settings
    prefix = config.get("add_prefix_space", False)
    if not isinstance(prefix, bool):
        raise ValueError(f"{path}: `add_prefix_space` must be true or false, got {prefix!r}.")
    eos = config.get("eos_token", END_OF_TEXT)
    if isinstance(eos, dict):  # an AddedToken written out
        eos = eos.get("content")
    if not isinstance(eos, str):
        raise ValueError(f"{path}: `eos_token` must be a string, got {eos!r}.")
    return {"add_prefix_space": prefix, "eos_token": eos}
