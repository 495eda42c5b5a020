"""Hugging Face `tokenizer.json` files read into what lmpipe's tokenizers are made from.

transformers 5 writes a tokenizer folder as `tokenizer.json` (the `tokenizers` library's
whole pipeline: normalizer, pre-tokenizer, model, added tokens) and `tokenizer_config.json`,
without BERT's `vocab.txt`, ALBERT's and XLNet's `spiece.model` or GPT-2's `vocab.json` and
`merges.txt`. The functions here read such a file for the three lmpipe tokenizers:

- `wordpiece_file`: a WordPiece model under `BertNormalizer` and `BertPreTokenizer`: the
  vocabulary in id order and whether text is lower-cased (and stripped of accents).
- `sentence_piece_file`: a Unigram model under ALBERT's and XLNet's normalizer (the quote
  replacements, NFKD and `StripAccents` unless accents are kept, `Lowercase`, the
  SentencePiece `Precompiled` character map) and `WhitespaceSplit` + `Metaspace`: a
  serialized SentencePiece `ModelProto` that tokenizes as the original `spiece.model` (the
  same pieces, scores and types, the same character map and whitespace rules), with the
  lower-casing and accent settings. `StripAccents` is read as the originals' accent removal,
  which drops marks of nonzero combining class only (the library drops every mark, so on
  Indic and Thai text transformers 5 differs from the model's own tokenization; lmpipe
  follows the model's).
- `byte_pair_file`: a byte-level BPE model (GPT-2's): the vocabulary, the merges as
  "a b" rules in rank order, and `add_prefix_space` from the `ByteLevel` pre-tokenizer.

What lmpipe would tokenize differently is refused with one line naming the file and the
setting: another normalizer, pre-tokenizer or model type, other WordPiece settings (unknown
token, "##", 100 characters a word), BPE dropout, byte fallback, a prefix or suffix, added
tokens outside the model's vocabulary or matched in text (non-special, but for SentencePiece,
whose user-defined pieces are matched in text too), and a `tokenizer_config.json` that says
otherwise (`do_lower_case`, `keep_accents`, `add_prefix_space`, ...): transformers 5 rebuilds
some tokenizers from those settings, so the two files must agree.
"""

import base64
import json
import os
import typing

from lmpipe.tokenizers.tokenizer import HF_TOKENIZER_CONFIG, read_json

HF_TOKENIZER_FILE = "tokenizer.json"
"""The `tokenizers` library's file in a Hugging Face folder (lmpipe's own saved tokenizers
use the same name for their settings, which have no "model")."""

_WORD_START = "\u2581"

# What WordPieceTokenizer runs (its "[UNK]", "##" and MAX_CHARS_PER_WORD), as BERT does.
_BERT_WORDPIECE = {
    "unk_token": "[UNK]",
    "continuing_subword_prefix": "##",
    "max_input_chars_per_word": 100,
}

# ModelProto.SentencePiece.Type
_NORMAL, _UNKNOWN, _CONTROL, _USER_DEFINED = 1, 2, 3, 4

# ALBERT's and XLNet's normalizer steps in order; the optional ones may be left out.
_QUOTES = (("Replace", "``", '"'), ("Replace", "''", '"'))
_SPACES = 'Replace " {2,}"'
_SENTENCE_PIECE_STEPS = (
    "ALBERT's and XLNet's normalizer: Replace ``, Replace '', [NFKD, StripAccents], "
    f"[Lowercase], [Precompiled], [{_SPACES}]"
)


class WordPieceFile(typing.NamedTuple):
    """What `WordPieceTokenizer` needs from a tokenizer.json."""

    path: str
    vocabulary: list
    lower_case: bool


class SentencePieceFile(typing.NamedTuple):
    """What `SentencePieceTokenizer` needs from a tokenizer.json."""

    path: str
    model: bytes
    lower_case: bool
    keep_accents: bool


class BytePairFile(typing.NamedTuple):
    """What `BytePairTokenizer` needs from a tokenizer.json."""

    path: str
    vocabulary: dict
    merges: list
    add_prefix_space: bool


def has_tokenizer_file(folder):
    """Whether `folder` holds a tokenizer.json (a Hugging Face one or lmpipe's own)."""
    return os.path.isfile(os.path.join(os.fspath(folder), HF_TOKENIZER_FILE))


def model_type(folder):
    """The model of `folder`'s tokenizer.json: "WordPiece", "Unigram" or "BPE" (inferred from
    the fields where an older file has no "type"); ValueError naming the file otherwise."""
    path, tokenizer = _read(folder)
    return _model_type(path, tokenizer["model"])


def wordpiece_file(folder):
    """The vocabulary and lower-casing of a BERT tokenizer.json in `folder`."""
    path, tokenizer = _read(folder)
    model = _model(path, tokenizer, "WordPiece", "WordPieceTokenizer")
    for key, value in _BERT_WORDPIECE.items():
        if model.get(key) != value:
            _refuse(path, f"model.{key}", model.get(key), f"BERT's {json.dumps(value)}")
    vocabulary = _tokens_in_id_order(path, model.get("vocab"))
    _check_added_tokens(path, tokenizer, vocabulary, in_text=False)
    normalizer = tokenizer.get("normalizer") or {}
    lower_case = normalizer.get("lowercase")
    bert = (
        normalizer.get("type") == "BertNormalizer"
        and normalizer.get("clean_text") is True
        and normalizer.get("handle_chinese_chars") is True
        and isinstance(lower_case, bool)
        and normalizer.get("strip_accents") in (None, lower_case)
    )
    if not bert:
        _refuse(
            path,
            "normalizer",
            normalizer,
            "BertNormalizer with clean_text, handle_chinese_chars, and strip_accents null "
            "or as lowercase",
        )
    if (tokenizer.get("pre_tokenizer") or {}).get("type") != "BertPreTokenizer":
        _refuse(path, "pre_tokenizer", tokenizer.get("pre_tokenizer"), "BertPreTokenizer")
    _check_config(
        folder,
        path,
        do_lower_case=lower_case,
        tokenize_chinese_chars=True,
        strip_accents=lower_case,
    )
    return WordPieceFile(path, vocabulary, lower_case)


def sentence_piece_file(folder):
    """An ALBERT or XLNet tokenizer.json in `folder` as a SentencePiece model and its
    lower-casing and accent settings."""
    path, tokenizer = _read(folder)
    model = _model(path, tokenizer, "Unigram", "SentencePieceTokenizer")
    if model.get("byte_fallback"):
        _refuse(path, "model.byte_fallback", True, "Unigram models without byte fallback")
    pieces = model.get("vocab")
    if not isinstance(pieces, list) or not pieces:
        raise ValueError(f"{path}: model.vocab must be a non-empty list of [piece, score].")
    for i, entry in enumerate(pieces):
        if not (
            isinstance(entry, list)
            and len(entry) == 2
            and isinstance(entry[0], str)
            and isinstance(entry[1], (int, float))
        ):
            raise ValueError(f"{path}: model.vocab[{i}] is not [piece, score]: {entry!r}.")
    unk_id = model.get("unk_id")
    if isinstance(unk_id, bool) or not isinstance(unk_id, int) or not 0 <= unk_id < len(pieces):
        _refuse(path, "model.unk_id", unk_id, "an unknown piece in model.vocab")
    tokens = [piece for piece, _ in pieces]
    added = _check_added_tokens(path, tokenizer, tokens, in_text=True)
    charsmap, lower_case, keep_accents = _sentence_piece_normalizer(path, tokenizer)
    _check_metaspace(path, tokenizer.get("pre_tokenizer"))
    _check_config(
        folder, path, do_lower_case=lower_case, keep_accents=keep_accents, add_prefix_space=True
    )

    from sentencepiece import sentencepiece_model_pb2

    proto = sentencepiece_model_pb2.ModelProto()
    spec = proto.trainer_spec
    spec.model_type = sentencepiece_model_pb2.TrainerSpec.UNIGRAM
    spec.vocab_size = len(pieces)
    spec.unk_id, spec.unk_piece = unk_id, tokens[unk_id]
    spec.bos_id = spec.eos_id = spec.pad_id = -1
    normalizer = proto.normalizer_spec
    normalizer.name = "user_defined" if charsmap else "identity"
    normalizer.precompiled_charsmap = charsmap
    # Metaspace after WhitespaceSplit: a "▁" before every word, whitespace runs cut out.
    normalizer.add_dummy_prefix = True
    normalizer.remove_extra_whitespaces = True
    normalizer.escape_whitespaces = True
    for i, (piece, score) in enumerate(pieces):
        kind = _NORMAL
        if i == unk_id:
            kind = _UNKNOWN
        elif i in added:
            kind = _CONTROL if added[i] else _USER_DEFINED
        proto.pieces.add(piece=piece, score=score, type=kind)
    return SentencePieceFile(path, proto.SerializeToString(), lower_case, keep_accents)


def byte_pair_file(folder):
    """The vocabulary, merges and `add_prefix_space` of a GPT-2 tokenizer.json in `folder`."""
    path, tokenizer = _read(folder)
    model = _model(path, tokenizer, "BPE", "BytePairTokenizer")
    if model.get("dropout") not in (None, 0, 0.0):
        _refuse(path, "model.dropout", model.get("dropout"), "BPE without dropout")
    for key in ("unk_token", "continuing_subword_prefix", "end_of_word_suffix"):
        if model.get(key) not in (None, ""):
            _refuse(path, f"model.{key}", model.get(key), "GPT-2's null")
    for key in ("byte_fallback", "ignore_merges"):
        if model.get(key):
            _refuse(path, f"model.{key}", True, "GPT-2's false")
    vocabulary = model.get("vocab")
    if not isinstance(vocabulary, dict) or not vocabulary:
        raise ValueError(f"{path}: model.vocab must be a non-empty object {{token: id}}.")
    _check_added_tokens(path, tokenizer, _tokens_in_id_order(path, vocabulary), in_text=False)
    merges = []
    for rank, merge in enumerate(model.get("merges") or []):
        parts = merge.split(" ") if isinstance(merge, str) else merge
        if not (
            isinstance(parts, list) and len(parts) == 2 and all(isinstance(p, str) for p in parts)
        ):
            raise ValueError(f"{path}: model.merges[{rank}] is not a pair of tokens: {merge!r}.")
        if any(" " in part or not part for part in parts):
            _refuse(path, f"model.merges[{rank}]", merge, "merges of tokens without spaces")
        merges.append(" ".join(parts))
    if tokenizer.get("normalizer") is not None:
        _refuse(path, "normalizer", tokenizer["normalizer"], "GPT-2's null")
    pre_tokenizer = tokenizer.get("pre_tokenizer") or {}
    add_prefix_space = pre_tokenizer.get("add_prefix_space", False)
    byte_level = (
        pre_tokenizer.get("type") == "ByteLevel"
        and pre_tokenizer.get("use_regex", True) is True
        and isinstance(add_prefix_space, bool)
    )
    if not byte_level:
        _refuse(path, "pre_tokenizer", pre_tokenizer, "ByteLevel with use_regex")
    _check_config(folder, path, add_prefix_space=add_prefix_space)
    return BytePairFile(path, vocabulary, merges, add_prefix_space)


# ---------------------------------------------------------------------- reading


def _read(folder):
    """`(path, the JSON object)` of `folder`'s Hugging Face tokenizer.json."""
    path = os.path.join(os.fspath(folder), HF_TOKENIZER_FILE)
    if not os.path.isfile(path):
        raise ValueError(f"{path} not found.")
    tokenizer = read_json(path)
    if not isinstance(tokenizer, dict) or not isinstance(tokenizer.get("model"), dict):
        raise ValueError(
            f"{path} is not a Hugging Face tokenizer file (it has no model); a folder lmpipe "
            "saved is read by lmpipe.datasets.load_tokenizer."
        )
    return path, tokenizer


def _model_type(path, model):
    kind = model.get("type")
    if kind is None:  # older files name no type
        if isinstance(model.get("vocab"), list):
            kind = "Unigram"
        elif "merges" in model:
            kind = "BPE"
        elif "continuing_subword_prefix" in model and "max_input_chars_per_word" in model:
            kind = "WordPiece"
    if kind not in ("WordPiece", "Unigram", "BPE"):
        _refuse(path, "model.type", kind, "WordPiece, Unigram and BPE models")
    return kind


def _model(path, tokenizer, expected, reader):
    model = tokenizer["model"]
    kind = _model_type(path, model)
    if kind != expected:
        raise ValueError(f"{path} holds a {kind} model; {reader} reads {expected} models.")
    return model


def _tokens_in_id_order(path, vocabulary):
    """The tokens of `{token: id}` in id order; ValueError unless the ids are 0 .. n - 1."""
    if not isinstance(vocabulary, dict) or not vocabulary:
        raise ValueError(f"{path}: model.vocab must be a non-empty object {{token: id}}.")
    tokens = [None] * len(vocabulary)
    for token, token_id in vocabulary.items():
        valid = isinstance(token_id, int) and not isinstance(token_id, bool)
        if not valid or not 0 <= token_id < len(tokens) or tokens[token_id] is not None:
            raise ValueError(
                f"{path}: model.vocab ids must be 0 .. {len(tokens) - 1}, each once; "
                f"{token!r} has id {token_id!r}."
            )
        tokens[token_id] = token
    return tokens


def _check_added_tokens(path, tokenizer, tokens, in_text):
    """`{id: special}` of the added tokens, each checked to be the model's own token at its
    id; a non-special one (which Hugging Face matches in text) is refused unless `in_text`."""
    added = {}
    for i, token in enumerate(tokenizer.get("added_tokens") or []):
        token_id = token.get("id") if isinstance(token, dict) else None
        content = token.get("content") if isinstance(token, dict) else None
        if not (isinstance(token_id, int) and 0 <= token_id < len(tokens)):
            _refuse(path, f"added_tokens[{i}] {content!r}", f"id {token_id!r}", "model tokens")
        if tokens[token_id] != content:
            raise ValueError(
                f"{path}: added_tokens[{i}] {content!r} has id {token_id}, which is "
                f"{tokens[token_id]!r} in model.vocab."
            )
        special = token.get("special") is True
        if not special and not in_text:
            raise ValueError(
                f"{path}: added_tokens[{i}] {content!r} is not special, a word Hugging Face "
                "finds in text before the model; lmpipe reproduces only special added tokens."
            )
        added[token_id] = special
    return added


def _sentence_piece_normalizer(path, tokenizer):
    """`(precompiled charsmap bytes, lower_case, keep_accents)` of ALBERT's and XLNet's
    normalizer; ValueError naming the step that is not theirs."""
    steps = _flatten(tokenizer.get("normalizer"), "normalizers")
    names, charsmap = [], b""
    for i, step in enumerate(steps):
        kind = step.get("type")
        pattern = step.get("pattern") or {}
        if kind == "Replace" and ("Replace", pattern.get("String"), step.get("content")) in _QUOTES:
            names.append(f"Replace {pattern['String']}")
        elif kind == "Replace" and pattern == {"Regex": " {2,}"} and step.get("content") == " ":
            names.append(_SPACES)  # whitespace runs are one space already
        elif kind in ("NFKD", "StripAccents", "Lowercase") and set(step) == {"type"}:
            names.append(kind)
        elif kind == "Precompiled":
            names.append(kind)
            charsmap = _charsmap(path, i, step.get("precompiled_charsmap"))
        else:
            _refuse(path, f"normalizer step {i}", step, _SENTENCE_PIECE_STEPS)
    accents = names[2:4] == ["NFKD", "StripAccents"]
    rest = names[4:] if accents else names[2:]
    lower_case = rest[:1] == ["Lowercase"]
    rest = rest[1:] if lower_case else rest
    known = names[:2] == ["Replace ``", "Replace ''"]
    known = known and rest in ([], ["Precompiled"], ["Precompiled", _SPACES])
    if not known:
        _refuse(path, "normalizer", names, _SENTENCE_PIECE_STEPS)
    return charsmap, lower_case, not accents


def _charsmap(path, i, value):
    if not value:
        return b""
    try:
        return base64.b64decode(value, validate=True)
    except (TypeError, ValueError):
        raise ValueError(
            f"{path}: normalizer step {i}'s precompiled_charsmap is not base64."
        ) from None


def _check_metaspace(path, pre_tokenizer):
    steps = _flatten(pre_tokenizer, "pretokenizers")
    types = [step.get("type") for step in steps]
    metaspace = steps[-1] if types == ["WhitespaceSplit", "Metaspace"] else {}
    scheme = metaspace.get("prepend_scheme")
    always = scheme == "always" or (scheme is None and metaspace.get("add_prefix_space") is True)
    if metaspace.get("replacement") != _WORD_START or not always:
        _refuse(
            path,
            "pre_tokenizer",
            pre_tokenizer,
            'WhitespaceSplit then Metaspace("▁", prepend_scheme "always")',
        )


def _flatten(node, key):
    """A normalizer's or pre-tokenizer's steps, nested Sequences flattened."""
    if node is None:
        return []
    if not isinstance(node, dict):
        return [{"type": repr(node)}]
    if node.get("type") == "Sequence":
        return [step for child in node.get(key) or [] for step in _flatten(child, key)]
    return [node]


def _check_config(folder, path, **implied):
    """ValueError where the folder's tokenizer_config.json sets a key of `implied` to another
    value than tokenizer.json implies (null, a default, is not checked): transformers 5
    rebuilds some tokenizers from those settings, so the two files must agree."""
    config_path = os.path.join(os.fspath(folder), HF_TOKENIZER_CONFIG)
    config = read_json(config_path) if os.path.isfile(config_path) else {}
    if not isinstance(config, dict):
        raise ValueError(f"{config_path} must hold a JSON object.")
    for key, value in implied.items():
        if config.get(key) is not None and config[key] != value:
            raise ValueError(
                f"{config_path}: `{key}` is {json.dumps(config[key])}, but {path} means "
                f"{json.dumps(value)}; lmpipe reads folders whose two files agree."
            )


def _refuse(path, setting, found, reads):
    raise ValueError(f"{path}: {setting} is {_describe(found)}; lmpipe reproduces only {reads}.")


def _describe(value, limit=160):
    """A short one-line JSON of `value`, without the long fields (character maps, vocab)."""
    if isinstance(value, dict):
        value = {k: v for k, v in value.items() if k not in ("precompiled_charsmap", "vocab")}
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 3] + "..."
