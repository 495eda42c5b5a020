"""What every lmpipe tokenizer gives the pipelines: ids of text in the graph, and back.

`Tokenizer` is the base of `WordPieceTokenizer` (BERT), `SentencePieceTokenizer` (ALBERT,
XLNet) and `BytePairTokenizer` (GPT-2). A subclass tokenizes a batch of strings
(`_tokenize_batch`) and joins pieces back into text (`_join`); the base gives the rest the same
for all: shapes in and out, the special tokens' ids by role, words grouped from pieces (a piece
that does not continue a word starts one), special tokens dropped in `detokenize`; and what
every class reads the same way: its saved tokenizer.json, JSON files, a Hugging Face folder's
settings, and the table of vocabulary learners that each class's `train` runs.

Imports run one way: the tokenizer classes import this module, their learners import the
classes, and `lmpipe.tokenizers.registry` (the one module that knows every class) pairs each
class with its learner and finds the class of a folder.
"""

import json
import os

import numpy as np
import tensorflow as tf

CONFIG_FILE = "tokenizer.json"
"""Every saved tokenizer's settings; its "format" names the class."""

FORMAT_VERSION = 1
"""The version of the tokenizer.json that `save` writes and `load` reads."""

ROLES = ("pad", "unk", "cls", "sep", "mask")
"""The special-token roles, in order."""

HF_TOKENIZER_CONFIG = "tokenizer_config.json"
"""A Hugging Face checkpoint folder's tokenizer settings (`do_lower_case`, `keep_accents`)."""

# {FORMAT: learn}: what each class's `train` runs. The learners import the classes, so the
# classes find them here, where lmpipe.tokenizers.registry puts them when lmpipe.tokenizers
# is imported (before any of its modules).
_LEARNERS = {}


def register_learner(tokenizer_class, learn):
    """Make `learn` the vocabulary learner that `tokenizer_class.train` (and its subclasses')
    runs; called by `lmpipe.tokenizers.registry`."""
    _LEARNERS[tokenizer_class.FORMAT] = learn


class Tokenizer(tf.Module):
    """Text to int32 ids in the TensorFlow graph, and back: the interface of every lmpipe
    tokenizer.

    Args:
        tokens: the pieces, in id order.
        special: `{role: token}` for the roles among "pad", "unk", "cls", "sep", "mask" that
            the vocabulary has ("pad" always; one token may play several roles).
        special_ids: the roles' ids and any other control token's, which masked LM never
            predicts nor draws (made from text only as `unk`, or where a text spells GPT-2's
            end token).
        continuation_mask: bool `[len(tokens)]`, True for a piece that continues a word.
        lower_case: whether text is lower-cased before it is split.
        name: name of the `tf.Module`.
    """

    def __init__(self, tokens, special, special_ids, continuation_mask, lower_case, name=None):
        super().__init__(name=name)
        unknown = sorted(set(special) - set(ROLES))
        if unknown or "pad" not in special:
            raise ValueError(f"`special` must name a pad token and only roles of {ROLES}.")
        self._tokens = tuple(tokens)
        self._ids = {token: i for i, token in enumerate(self._tokens)}
        self._special = dict(special)
        self._special_ids = tuple(sorted(set(special_ids)))
        self._continuation_mask = np.asarray(continuation_mask, bool)
        self._lower_case = lower_case
        self._continuation = tf.constant(self._continuation_mask)
        special_mask = np.zeros(len(self._tokens), bool)
        special_mask[list(self._special_ids)] = True
        self._special_mask = tf.constant(special_mask)
        self._padding_mask = tf.constant(np.arange(len(self._tokens)) == self.pad_id)

    # ------------------------------------------------------------------ vocabulary

    @property
    def vocabulary(self):
        """The tokens in id order (a new list)."""
        return list(self._tokens)

    @property
    def vocabulary_size(self):
        """Number of tokens; ids are in `[0, vocabulary_size)`."""
        return len(self._tokens)

    @property
    def lower_case(self):
        """Whether text is lower-cased (and stripped of accents) before it is split."""
        return self._lower_case

    def token_id(self, token):
        """The id of `token`; KeyError naming it if it is not in the vocabulary."""
        try:
            return self._ids[token]
        except KeyError:
            raise KeyError(f"Token {token!r} is not in the vocabulary.") from None

    def id_to_token(self, token_id):
        """The token of `token_id`; IndexError if it is outside `[0, vocabulary_size)`."""
        if isinstance(token_id, (bool, np.bool_)) or not isinstance(token_id, (int, np.integer)):
            raise TypeError(f"`token_id` must be an integer, got {token_id!r}.")
        if not 0 <= token_id < len(self._tokens):
            raise IndexError(
                f"Token id {token_id} is outside [0, vocabulary_size={self.vocabulary_size})."
            )
        return self._tokens[token_id]

    @property
    def roles(self):
        """The special-token roles this tokenizer has, in `ROLES` order: all five for BERT's,
        ALBERT's and XLNet's; "pad", "unk" and "sep" for GPT-2's."""
        return tuple(role for role in ROLES if role in self._special)

    def _role_id(self, role, names):
        if role not in self._special:
            raise ValueError(
                f"{type(self).__name__} has no {role} token ({names}); a pipeline that needs "
                "one takes a WordPieceTokenizer or SentencePieceTokenizer."
            )
        return self._ids[self._special[role]]

    @property
    def pad_id(self):
        """Id of the padding token (`[PAD]`, `<pad>`, GPT-2's `<|endoftext|>`)."""
        return self._ids[self._special["pad"]]

    @property
    def unk_id(self):
        """Id of the unknown token (`[UNK]`, `<unk>`)."""
        return self._role_id("unk", "[UNK], <unk>")

    @property
    def cls_id(self):
        """Id of the classification token (`[CLS]`, `<cls>`)."""
        return self._role_id("cls", "[CLS], <cls>")

    @property
    def sep_id(self):
        """Id of the separator (`[SEP]`, `<sep>`, GPT-2's `<|endoftext|>`)."""
        return self._role_id("sep", "[SEP], <sep>")

    @property
    def mask_id(self):
        """Id of the mask token (`[MASK]`, `<mask>`)."""
        return self._role_id("mask", "[MASK], <mask>")

    @property
    def special_token_ids(self):
        """Sorted ids of the special tokens: never produced from text but the unknown token
        (and GPT-2's end token where a text spells it), never predicted nor drawn as random
        replacements by masked LM."""
        return list(self._special_ids)

    @property
    def continuation_mask(self):
        """Bool numpy vector `[vocabulary_size]`: True for pieces that continue a word.

        A piece whose id is False here starts a word, so whole-word masking can find words
        from ids alone.
        """
        return self._continuation_mask.copy()

    # ------------------------------------------------------------------ graph ops

    def tokenize(self, texts):
        """Token ids of `texts`, in graph ops.

        Args:
            texts: strings: a scalar, a 1-D tensor or list `[N]`, any dense shape, or a
                `tf.RaggedTensor` (e.g. documents of sentences `[D, (sentences)]`).

        Returns:
            int32 ids with one more, ragged, dimension: `[N, (pieces)]` for `[N]` texts
            (`tf.RaggedTensor`), a dense `[pieces]` vector for a scalar.
        """
        texts = as_strings(texts)
        if isinstance(texts, tf.RaggedTensor):
            return texts.with_flat_values(self.tokenize(texts.flat_values))
        rank = texts.shape.rank
        if rank == 0:
            return self._tokenize_batch(tf.reshape(texts, [1]))[0]
        if rank == 1:
            return self._tokenize_batch(texts)
        return _unflatten(self._tokenize_batch(tf.reshape(texts, [-1])), texts)

    def tokenize_documents(self, documents):
        """Token ids of documents of sentences: strings `[D, (sentences)]` -> int32
        `[D, (sentences), (pieces)]`, each sentence read as in its document's running text
        (the same as `tokenize` but for byte-level BPE, where the space between two sentences
        belongs to the second's first piece)."""
        return self.tokenize(documents)

    def tokenize_words(self, texts):
        """Token ids grouped by word: int32 `[N, (words), (pieces)]` for `[N]` texts.

        A word is a piece that is not a continuation piece plus the continuation pieces after
        it. Takes the same inputs as `tokenize`; a scalar gives `[(words), (pieces)]`.
        """
        texts = as_strings(texts)
        if isinstance(texts, tf.RaggedTensor):
            return texts.with_flat_values(self.tokenize_words(texts.flat_values))
        if texts.shape.rank == 0:
            return self.tokenize_words(tf.reshape(texts, [1]))[0]
        if texts.shape.rank > 1:
            return _unflatten(self.tokenize_words(tf.reshape(texts, [-1])), texts)
        return self._group_words(self._tokenize_batch(texts))

    def detokenize(self, ids, skip_special_tokens=False):
        """Text of token ids, in graph ops.

        Args:
            ids: int ids, `[N, (pieces)]` ragged or `[N, S]` dense (padded), or a 1-D vector.
                Padding ids are always left out (GPT-2's, which is also its end of text, only
                where it ends a dense row).
            skip_special_tokens: also leave out every other id of `special_token_ids`.

        Returns:
            A string tensor with one dimension less than `ids` (a scalar for a vector).
        """
        if not isinstance(ids, tf.RaggedTensor):
            ids = tf.convert_to_tensor(ids)
        if not ids.dtype.is_integer:
            raise ValueError(f"`ids` must be integer token ids, got dtype {ids.dtype.name}.")
        if ids.shape.rank is not None and ids.shape.rank < 1:
            raise ValueError("`ids` must have at least one dimension (the pieces of a text).")
        ids = tf.cast(ids, tf.int32)
        left_out = self._left_out(ids, skip_special_tokens)
        return self._join(tf.ragged.boolean_mask(ids, tf.logical_not(left_out)))

    def _left_out(self, ids, skip_special_tokens):
        """Bool, the shape of `ids`: what `detokenize` leaves out (padding ids; with
        `skip_special_tokens` every special id)."""
        dropped = self._special_mask if skip_special_tokens else self._padding_mask
        return tf.gather(dropped, ids)

    def piece_text(self, token, starts_word):
        """`token`'s text without the mark by which this tokenizer tells a piece that starts a
        word from one that continues it (WordPiece's "##", SentencePiece's "▁", byte-level
        BPE's "Ġ"); `starts_word` is whether the piece starts one. The base has no mark."""
        return token

    # ------------------------------------------------------------------ for subclasses

    @classmethod
    def learner(cls):
        """The function that learns this class's vocabulary from text, which `train` runs."""
        try:
            return _LEARNERS[cls.FORMAT]
        except (AttributeError, KeyError):
            raise NotImplementedError(f"{cls.__name__} has no vocabulary learner.") from None

    def write_config(self, directory, **fields):
        """Write `directory`'s tokenizer.json: the class's format and version, and `fields`
        (what `saved_config` reads back)."""
        config = {"format": self.FORMAT, "format_version": FORMAT_VERSION, **fields}
        with open(os.path.join(directory, CONFIG_FILE), "w", encoding="utf-8") as file:
            json.dump(config, file, indent=2)
            file.write("\n")

    @classmethod
    def saved_config(cls, directory, flags):
        """What `save` wrote to `directory`'s tokenizer.json, checked to be this class's format
        and version and `flags` to be booleans: `(config, {flag: value})`."""
        directory = os.fspath(directory)
        path = os.path.join(directory, CONFIG_FILE)
        config = read_config(directory, f" (write one with {cls.__name__}.save)")
        if config.get("format") != cls.FORMAT:
            raise ValueError(f"{path} is not a {cls.__name__} config.")
        version = config.get("format_version")
        if version != FORMAT_VERSION:
            raise ValueError(
                f"{path} has format_version={version!r}; this version of lmpipe reads "
                f"format_version={FORMAT_VERSION}."
            )
        values = {flag: config.get(flag) for flag in flags}
        for flag, value in values.items():
            if not isinstance(value, bool):
                raise ValueError(f"{path}: `{flag}` must be true or false.")
        return config, values

    def _tokenize_batch(self, texts):
        """`[N]` strings to int32 ids `[N, (pieces)]`."""
        raise NotImplementedError

    def _join(self, ids):
        """int32 ids `[..., (pieces)]` (padding or special ids already left out) to strings."""
        raise NotImplementedError

    def _word_starts(self, ids):
        """Bool `[P_total]`: the pieces of ragged `[N, (P)]` ids that start a word."""
        flat_ids = ids.flat_values
        first_in_row = tf.range(tf.shape(flat_ids, out_type=tf.int64)[0]) == tf.gather(
            ids.row_splits, ids.value_rowids()
        )
        return tf.logical_or(first_in_row, tf.logical_not(tf.gather(self._continuation, flat_ids)))

    def _group_words(self, ids):
        """Ragged `[N, (P)]` ids to `[N, (words), (pieces)]`."""
        is_start = self._word_starts(ids)
        word_of_piece = tf.cumsum(tf.cast(is_start, tf.int64)) - 1
        num_words = tf.reduce_sum(tf.cast(is_start, tf.int64))
        words = tf.RaggedTensor.from_value_rowids(
            ids.flat_values, word_of_piece, nrows=num_words
        )  # [W_total, (pieces)]
        words_per_row = tf.math.unsorted_segment_sum(
            tf.cast(is_start, tf.int64), ids.value_rowids(), ids.nrows()
        )
        return tf.RaggedTensor.from_row_lengths(words, words_per_row)


def _unflatten(values, texts):
    """Ragged `[prod(shape), ...]` back to `texts`'s dense shape `[d0, d1, ..., ...]`."""
    shape = tf.shape(texts, out_type=tf.int64)
    for axis in range(texts.shape.rank - 1, 0, -1):
        values = tf.RaggedTensor.from_uniform_row_length(values, shape[axis])
    return values


def as_strings(texts):
    """`texts` as a string tensor (or ragged tensor) of known rank; ValueError otherwise."""
    if isinstance(texts, tf.RaggedTensor):
        if texts.dtype != tf.string:
            raise ValueError(f"`texts` must be strings, got dtype {texts.dtype.name}.")
        return texts
    try:
        texts = tf.convert_to_tensor(texts, dtype_hint=tf.string)
    except (TypeError, ValueError) as error:
        raise ValueError(f"`texts` must be strings: {error}") from error
    if texts.dtype != tf.string:
        raise ValueError(f"`texts` must be strings, got dtype {texts.dtype.name}.")
    if texts.shape.rank is None:
        raise ValueError("`texts` must have a known rank.")
    return texts


def read_config(directory, hint=""):
    """The dict of `directory`'s tokenizer.json; ValueError naming the file otherwise (the
    missing file's message ends with `hint`)."""
    directory = os.fspath(directory)
    path = os.path.join(directory, CONFIG_FILE)
    if not os.path.isfile(path):
        raise ValueError(f"No tokenizer in {directory!r}: {CONFIG_FILE} is missing{hint}.")
    try:
        with open(path, encoding="utf-8") as file:
            config = json.load(file)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"Cannot read the tokenizer config {path}: {error}") from error
    if not isinstance(config, dict):
        raise ValueError(f"{path} is not a tokenizer config (a JSON object).")
    return config


def read_json(path):
    """The JSON value in the file at `path`; ValueError naming the file and line if it is not
    valid JSON."""
    try:
        with open(path, encoding="utf-8") as file:
            return json.load(file)
    except json.JSONDecodeError as error:
        raise ValueError(f"{path} is not valid JSON (line {error.lineno}): {error.msg}.") from None


def hf_tokenizer_settings(folder, defaults):
    """The boolean settings `defaults` names (`do_lower_case`, ...) from a Hugging Face
    folder's tokenizer_config.json, each its default where the file or the field is absent."""
    path = os.path.join(os.fspath(folder), HF_TOKENIZER_CONFIG)
    settings = dict(defaults)
    if not os.path.isfile(path):
        return settings
    config = read_json(path)
    for key in settings:
        value = config.get(key, settings[key]) if isinstance(config, dict) else settings[key]
        if not isinstance(value, bool):
            raise ValueError(f"{path}: `{key}` must be true or false, got {value!r}.")
        settings[key] = value
    return settings
