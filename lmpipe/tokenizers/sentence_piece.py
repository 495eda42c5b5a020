"""SentencePiece tokenization in the TensorFlow graph, as ALBERT and XLNet were trained with it.

The model file (`.model`, a serialized `ModelProto`) runs in tensorflow-text's
`SentencepieceTokenizer` op, the `sentencepiece` library itself, so ids equal the
`sentencepiece` package's for the same text. Before it, the text is prepared as ALBERT's and
XLNet's own tokenizers prepare it (`preprocess_text` of google-research/albert and zihangdai/xlnet,
and Hugging Face's `AlbertTokenizer` and `XLNetTokenizer`), in graph ops:

1. Whitespace runs become one space, leading and trailing whitespace goes.
2. "``" and "''" become '"'.
3. Unless `keep_accents`: decompose (NFKD) and drop the combining marks, the characters
   whose canonical combining class is not 0 (`unicodedata.combining(c) != 0`, as the
   originals test). Marks of class 0, such as most Devanagari, Bengali and Thai vowel signs,
   stay: "नमस्ते" becomes "नमसते" (the virama, class 9, goes), not "नमसत".
4. With `lower_case`: lower-case.

The model's own normalizer (NFKC by default) then runs inside the op. Pieces that start a word
begin with "▁" (U+2581); every other piece continues the word before it, which is what
whole-word and n-gram masking read from `continuation_mask`.
"""

import functools
import os
import pathlib
import sys
import unicodedata

import tensorflow as tf
import tensorflow_text as text

from lmpipe.arguments import check_inside
from lmpipe.tokenizers.tokenizer import CONFIG_FILE, Tokenizer, hf_tokenizer_settings
from lmpipe.tokenizers.tokenizer_json import has_tokenizer_file, sentence_piece_file

MODEL_FILE = "spiece.model"
"""The model file's name in a saved tokenizer and in ALBERT's and XLNet's checkpoint folders."""


WORD_START = "\u2581"
"""SentencePiece's mark of a piece that starts a word ("▁")."""

ROLES = {
    "pad": ("<pad>", "[PAD]"),
    "unk": ("<unk>", "[UNK]"),
    "cls": ("[CLS]", "<cls>"),
    "sep": ("[SEP]", "<sep>"),
    "mask": ("[MASK]", "<mask>"),
}
"""The special tokens a model must have, by role, under ALBERT's or XLNet's names."""

# ModelProto.SentencePiece.Type
_NORMAL, _UNKNOWN, _CONTROL, _USER_DEFINED, _UNUSED, _BYTE = 1, 2, 3, 4, 5, 6

_WHITESPACE = r"[\t\n\x0B\f\r\x1C-\x1F\x{85}\p{Z}]+"


class SentencePieceTokenizer(Tokenizer):
    """A SentencePiece model (unigram or BPE): text to int32 ids in the graph, and back.

    The same interface as `WordPieceTokenizer` (`tokenize`, `tokenize_words`, `detokenize`,
    the five special tokens' ids, `continuation_mask`, `save`/`load`, `train`), so every
    pipeline takes either. The model must have a padding, unknown, classification, separator
    and mask token, under ALBERT's names (`<pad> <unk> [CLS] [SEP] [MASK]`, ids 0-4 in a
    trained model) or XLNet's (`<pad> <unk> <cls> <sep> <mask>`).

    Args:
        model: the serialized model (the bytes of a `.model` file).
        lower_case: lower-case text before the model (ALBERT's `do_lower_case`).
        keep_accents: keep accents (else NFKD and combining marks dropped, as ALBERT and
            XLNet do by default).
        name: name of the `tf.Module`.

    Example:

    >>> from lmpipe.datasets import TextCorpus
    >>> hamlet = TextCorpus.shakespeare(plays=["hamlet"])
    >>> tokenizer = SentencePieceTokenizer.train(hamlet, vocab_size=1000)
    >>> tokenizer.vocabulary[:6]
    ['<pad>', '<unk>', '[CLS]', '[SEP]', '[MASK]', ',']
    >>> ids = tokenizer.tokenize(["To be, or not to be."])
    >>> [tokenizer.id_to_token(i) for i in ids[0].numpy()]
    ['▁to', '▁be', ',', '▁or', '▁not', '▁to', '▁be', '.']
    >>> tokenizer.detokenize(ids)
    <tf.Tensor: shape=(1,), dtype=string, numpy=array([b'to be, or not to be.'], dtype=object)>

    Reference: Kudo and Richardson, "SentencePiece", 2018; Kudo, "Subword regularization",
    2018 (the unigram model); Lan et al., "ALBERT", 2020, and Yang et al., "XLNet", 2019.
    """

    FORMAT = "lmpipe.SentencePieceTokenizer"

    def __init__(self, model, lower_case=False, keep_accents=False, name=None):
        for flag, value in (("lower_case", lower_case), ("keep_accents", keep_accents)):
            if not isinstance(value, bool):
                raise ValueError(f"`{flag}` must be True or False, got {flag}={value!r}.")
        if not isinstance(model, bytes):
            raise ValueError(
                "`model` must be the bytes of a SentencePiece model; to read a .model file use "
                f"SentencePieceTokenizer.from_model_file(path), got {type(model).__name__}."
            )
        pieces = _read_model(model)
        tokens = [piece.piece for piece in pieces]
        special = {}
        for role, names in ROLES.items():
            found = [name for name in names if name in tokens]
            if not found:
                raise ValueError(
                    f"The SentencePiece model has no {role} token (one of {', '.join(names)}); "
                    "lmpipe needs all of pad, unk, cls, sep and mask (SentencePieceTokenizer."
                    "train adds them)."
                )
            special[role] = found[0]
        role_ids = {tokens.index(name) for name in special.values()}
        special_ids = [
            i
            for i, piece in enumerate(pieces)
            if piece.type in (_UNKNOWN, _CONTROL, _UNUSED) or i in role_ids
            or (piece.type == _USER_DEFINED and _bracketed(piece.piece))
        ]  # fmt: skip
        continuation = [
            i not in special_ids and not piece.piece.startswith(WORD_START)
            for i, piece in enumerate(pieces)
        ]
        super().__init__(
            tokens,
            special=special,
            special_ids=special_ids,
            continuation_mask=continuation,
            lower_case=lower_case,
            name=name,
        )
        self._model = model
        self._keep_accents = keep_accents
        self._tokenizer = text.SentencepieceTokenizer(model=model, out_type=tf.int32)

    # ------------------------------------------------------------------ construction and files

    @classmethod
    def from_model_file(cls, path, lower_case=False, keep_accents=False):
        """A tokenizer for a SentencePiece `.model` file (ALBERT's or XLNet's `spiece.model`)."""
        path = os.fspath(path)
        if not os.path.isfile(path):
            raise ValueError(f"The SentencePiece model file {path!r} does not exist.")
        with open(path, "rb") as file:
            model = file.read()
        try:
            return cls(model, lower_case=lower_case, keep_accents=keep_accents)
        except ValueError as error:
            raise ValueError(f"{path}: {error}") from None

    @classmethod
    def from_pretrained(cls, directory):
        """The tokenizer of a Hugging Face ALBERT or XLNet folder: its `spiece.model`, with
        `do_lower_case` and `keep_accents` from its `tokenizer_config.json` (ALBERT's defaults,
        true and false, where absent); or, in a folder without `spiece.model` (as
        transformers 5 writes them), the model and settings of its `tokenizer.json` (see
        `lmpipe.tokenizers.tokenizer_json`)."""
        folder = os.fspath(directory)
        path = os.path.join(folder, MODEL_FILE)
        if not os.path.isfile(path) and has_tokenizer_file(folder):
            path, model, lower_case, keep_accents = sentence_piece_file(folder)
            try:
                return cls(model, lower_case=lower_case, keep_accents=keep_accents)
            except ValueError as error:
                raise ValueError(f"{path}: {error}") from None
        if not os.path.isfile(path):
            raise ValueError(
                f"{path} not found: the checkpoint folder needs its {MODEL_FILE} or a "
                "tokenizer.json."
            )
        settings = hf_tokenizer_settings(folder, {"do_lower_case": True, "keep_accents": False})
        return cls.from_model_file(
            path, lower_case=settings["do_lower_case"], keep_accents=settings["keep_accents"]
        )

    @classmethod
    def load(cls, directory):
        """Read a tokenizer written by `save`: `spiece.model` and `tokenizer.json`."""
        directory = os.fspath(directory)
        config, flags = cls.saved_config(directory, ["lower_case", "keep_accents"])
        path = check_inside(
            directory,
            config.get("model_file", MODEL_FILE),
            os.path.join(directory, CONFIG_FILE),
            "model_file",
        )
        return cls.from_model_file(path, **flags)

    def save(self, directory):
        """Write `spiece.model` and `tokenizer.json` to `directory` (created if needed)."""
        directory = pathlib.Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / MODEL_FILE).write_bytes(self._model)
        self.write_config(
            directory,
            lower_case=self.lower_case,
            keep_accents=self.keep_accents,
            model_file=MODEL_FILE,
            vocabulary_size=self.vocabulary_size,
        )

    @classmethod
    def train(
        cls,
        corpus,
        vocab_size=8000,
        model_type="unigram",
        lower_case=True,
        keep_accents=False,
        layout="albert",
        character_coverage=0.9995,
        max_sentences=2_000_000,
        batch_size=1024,
        seed=0,
    ):
        """Learn a SentencePiece model from text with the `sentencepiece` package.

        The texts are prepared exactly as `tokenize` prepares them (steps 1-4 of the module
        docstring), then handed to `SentencePieceTrainer`; the special tokens come first:
        with `layout="albert"` `<pad> <unk> [CLS] [SEP] [MASK]` (ids 0-4, ALBERT's), with
        `"xlnet"` `<unk> <s> </s> <cls> <sep> <pad> <mask> <eod> <eop>` (ids 0-8, XLNet's).
        Only `<unk>` can come from text. The vocabulary may be smaller than `vocab_size` on a
        small corpus (the trainer's `hard_vocab_limit` is off).

        Args:
            corpus: a `TextCorpus`, a `tf.data.Dataset` of strings, or an iterable of strings.
            vocab_size: the vocabulary size.
            model_type: "unigram" (ALBERT's and XLNet's) or "bpe".
            lower_case: lower-case the text (ALBERT: yes; XLNet: no).
            keep_accents: keep accents (ALBERT and XLNet: no).
            layout: the special tokens' names and ids, "albert" or "xlnet".
            character_coverage: the share of characters the model covers; the rarest others
                are `<unk>`.
            max_sentences: texts sampled for training (SentencePiece's
                `input_sentence_size`), drawn with `seed` when the corpus has more.
            batch_size: texts prepared per graph call.
            seed: the sampling seed.
        """
        # The learner (lmpipe.tokenizers.sentence_piece_trainer) imports this module, not the
        # reverse.
        model = cls.learner()(
            corpus,
            vocab_size=vocab_size,
            model_type=model_type,
            lower_case=lower_case,
            keep_accents=keep_accents,
            layout=layout,
            character_coverage=character_coverage,
            max_sentences=max_sentences,
            batch_size=batch_size,
            seed=seed,
        )
        return cls(model, lower_case=lower_case, keep_accents=keep_accents)

    # ------------------------------------------------------------------ properties

    @property
    def keep_accents(self):
        """Whether accents are kept (else NFKD and combining marks dropped before the model)."""
        return self._keep_accents

    @property
    def model(self):
        """The serialized SentencePiece model (bytes)."""
        return self._model

    # ------------------------------------------------------------------ implementation

    def piece_text(self, token, starts_word):
        """`token` without its "▁"."""
        return token.removeprefix(WORD_START)

    def _tokenize_batch(self, texts):
        return self._tokenizer.tokenize(prepare(texts, self.lower_case, self.keep_accents))

    def _join(self, ids):
        """The model's detokenization, made valid UTF-8: a model with byte pieces (`<0xE2>`)
        can end a text inside a character, and TF Serving's REST API refuses a string output
        that is not UTF-8; such bytes become U+FFFD."""
        if isinstance(ids, tf.RaggedTensor) and ids.ragged_rank > 1:
            return ids.with_values(self._join(ids.values))
        if not isinstance(ids, tf.RaggedTensor) and ids.shape.rank == 1:
            return self._join(ids[tf.newaxis])[0]
        text = self._tokenizer.detokenize(ids)
        return tf.strings.unicode_transcode(text, "UTF-8", "UTF-8", errors="replace")

    def __repr__(self):
        return (
            f"SentencePieceTokenizer(vocabulary_size={self.vocabulary_size}, "
            f"lower_case={self.lower_case}, keep_accents={self.keep_accents})"
        )


def prepare(texts, lower_case, keep_accents):
    """Steps 1-4 of the module docstring on `[N]` strings, in graph ops."""
    texts = tf.strings.regex_replace(texts, _WHITESPACE, " ")
    texts = tf.strings.regex_replace(texts, "^ | $", "")
    texts = tf.strings.regex_replace(texts, "``|''", '"')
    if not keep_accents:
        texts = drop_combining_marks(text.normalize_utf8(texts, "NFKD"))
    if lower_case:
        texts = tf.strings.lower(texts, encoding="utf-8")
    return texts


def drop_combining_marks(texts):
    """`texts` without the characters whose canonical combining class is not 0, in graph ops:
    what ALBERT's and XLNet's `preprocess_text` drop after NFKD (`unicodedata.combining`).
    Not every mark: category Mn also holds marks of class 0 (Devanagari's "े", Thai's "ั"),
    which are letters' parts in their scripts, and they stay."""
    return tf.strings.regex_replace(texts, _combining_marks(), "")


@functools.cache
def _combining_marks():
    """A regular-expression class of every code point with a nonzero combining class in this
    Python's `unicodedata` (the originals' test, so ids follow the Unicode version it knows)."""
    ranges = []
    for code in range(sys.maxunicode + 1):
        if unicodedata.combining(chr(code)):
            if ranges and ranges[-1][1] == code - 1:
                ranges[-1][1] = code
            else:
                ranges.append([code, code])
    return "[" + "".join(rf"\x{{{a:X}}}-\x{{{b:X}}}" for a, b in ranges) + "]"


def _bracketed(piece):
    return len(piece) > 2 and (piece[0], piece[-1]) in (("<", ">"), ("[", "]"))


def _read_model(model):
    """The pieces of a serialized model; ValueError if it is not one."""
    from sentencepiece import sentencepiece_model_pb2

    proto = sentencepiece_model_pb2.ModelProto()
    try:
        proto.ParseFromString(model)
    except Exception as error:  # protobuf's DecodeError
        raise ValueError(f"not a SentencePiece model ({error})") from None
    if not proto.pieces:
        raise ValueError("not a SentencePiece model (it has no pieces)")
    return list(proto.pieces)
