"""SentencePieceTokenizer: parity with Hugging Face's ALBERT and XLNet tokenizers and with the
sentencepiece package, special tokens, words, files, the graph, training."""

import io
import json
import pathlib
import sys
import unicodedata

import numpy as np
import pytest
import sentencepiece
import tensorflow as tf

from lmpipe.datasets import (
    SentencePieceTokenizer,
    TextCorpus,
    WordPieceTokenizer,
    load_tokenizer,
)
from lmpipe.tokenizers.sentence_piece import drop_combining_marks, prepare

FIXTURES = pathlib.Path(__file__).parent / "fixtures"


@pytest.fixture(scope="module")
def reference():
    return json.loads((FIXTURES / "sentence_piece_reference.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def albert():
    return SentencePieceTokenizer.from_model_file(
        FIXTURES / "sentence_piece_albert.model", lower_case=True
    )


@pytest.fixture(scope="module")
def xlnet():
    return SentencePieceTokenizer.from_model_file(FIXTURES / "sentence_piece_xlnet.model")


@pytest.fixture(scope="module")
def hamlet():
    return TextCorpus.shakespeare(plays=["hamlet"])


def albert_preprocess(text, lower_case):
    """ALBERT's and XLNet's `preprocess_text` (remove_space, keep_accents=False), in Python."""
    text = " ".join(text.strip().split()).replace("``", '"').replace("''", '"')
    text = unicodedata.normalize("NFKD", text)
    text = "".join(c for c in text if not unicodedata.combining(c))
    return text.lower() if lower_case else text


# ---------------------------------------------------------------- parity


@pytest.mark.parametrize("name", ["albert", "xlnet"])
def test_ids_equal_hugging_faces_albert_and_xlnet_tokenizers(name, reference, request):
    tokenizer = request.getfixturevalue(name)
    ids = tokenizer.tokenize(reference["texts"])
    assert ids.dtype == tf.int32
    assert len(reference["texts"]) > 300
    for text, got, expected in zip(reference["texts"], ids.to_list(), reference[name], strict=True):
        assert got == expected, (text, [tokenizer.id_to_token(i) for i in got])


@pytest.mark.parametrize("name, lower_case", [("albert", True), ("xlnet", False)])
def test_ids_equal_the_sentencepiece_packages_after_albert_preprocessing(
    name, lower_case, reference, request
):
    tokenizer = request.getfixturevalue(name)
    processor = sentencepiece.SentencePieceProcessor(
        model_file=str(FIXTURES / f"sentence_piece_{name}.model")
    )
    texts = reference["texts"]
    expected = processor.encode([albert_preprocess(t, lower_case) for t in texts])
    assert tokenizer.tokenize(texts).to_list() == expected


# Hindi, Thai, Bengali and Tamil: vowel signs of combining class 0 (category Mn or Mc) stay,
# viramas and the Thai vowels and tone marks of nonzero class go; then accented Latin.
MARKED_TEXTS = [
    "नमस्ते दुनिया, हिन्दी में किताबें",
    "สวัสดีครับ ภาษาไทย น้ำ ผู้ใหญ่",
    "নমস্কার, বাংলা ভাষা",
    "வணக்கம், தமிழ் மொழி",
    "Café naïve Ångström façade Zürich Kraków ǅemal e\u0301",
]


def test_accents_go_as_the_originals_drop_them_not_every_mark():
    texts = tf.constant(MARKED_TEXTS)
    for lower_case in (False, True):
        got = prepare(texts, lower_case=lower_case, keep_accents=False).numpy()
        expected = [albert_preprocess(t, lower_case) for t in MARKED_TEXTS]
        assert [t.decode("utf-8") for t in got] == expected
    hindi = prepare(tf.constant(["नमस्ते"]), lower_case=True, keep_accents=False)
    assert hindi.numpy()[0].decode("utf-8") == "नमसते"  # the virama goes, the vowel sign "े" stays


def test_dropped_marks_are_exactly_those_of_nonzero_combining_class():
    codes = [c for c in range(sys.maxunicode + 1) if not 0xD800 <= c <= 0xDFFF]
    chars = tf.constant([chr(c) for c in codes])
    kept = tf.strings.length(drop_combining_marks(chars)).numpy() > 0
    dropped = {c for c, k in zip(codes, kept, strict=True) if not k}
    assert dropped == {c for c in codes if unicodedata.combining(chr(c))}
    assert len(dropped) > 800 and 0x093E not in dropped and 0x094D in dropped  # ा stays, ् goes


@pytest.mark.parametrize("name, lower_case", [("albert", True), ("xlnet", False)])
def test_indic_and_thai_ids_equal_the_sentencepiece_package_after_the_originals_preprocessing(
    name, lower_case, request
):
    tokenizer = request.getfixturevalue(name)
    processor = sentencepiece.SentencePieceProcessor(
        model_file=str(FIXTURES / f"sentence_piece_{name}.model")
    )
    expected = processor.encode([albert_preprocess(t, lower_case) for t in MARKED_TEXTS])
    assert tokenizer.tokenize(MARKED_TEXTS).to_list() == expected


# ---------------------------------------------------------------- special tokens and words


def test_albert_and_xlnet_layouts_name_their_special_tokens(albert, xlnet):
    assert albert.vocabulary[:5] == ["<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"]
    assert (albert.pad_id, albert.unk_id, albert.cls_id, albert.sep_id, albert.mask_id) == (
        0, 1, 2, 3, 4
    )  # fmt: skip
    assert albert.special_token_ids == [0, 1, 2, 3, 4]
    expected = ["<unk>", "<s>", "</s>", "<cls>", "<sep>", "<pad>", "<mask>", "<eod>", "<eop>"]
    assert xlnet.vocabulary[:9] == expected
    assert (xlnet.pad_id, xlnet.unk_id, xlnet.cls_id, xlnet.sep_id, xlnet.mask_id) == (
        5, 0, 3, 4, 6
    )  # fmt: skip
    assert xlnet.special_token_ids == list(range(9))


def test_special_tokens_typed_as_text_are_text(albert, xlnet):
    for tokenizer, typed in ((albert, "[MASK] [CLS] [SEP] <pad>"), (xlnet, "<mask> <cls> <sep>")):
        ids = tokenizer.tokenize(typed).numpy().tolist()
        assert set(ids) & set(tokenizer.special_token_ids) <= {tokenizer.unk_id}


def test_words_are_a_word_start_piece_and_the_pieces_after_it(albert):
    text = "Unhand me, gentlemen: Horatio's philosophy."
    words = albert.tokenize_words(text).to_list()
    pieces = [[albert.id_to_token(i) for i in word] for word in words]
    assert all(word[0].startswith("\u2581") for word in pieces)
    assert all(not piece.startswith("\u2581") for word in pieces for piece in word[1:])
    joined = ["".join(word).lstrip("\u2581") for word in pieces]
    assert joined == ["unhand", "me,", "gentlemen:", "horatio's", "philosophy."]
    mask = albert.continuation_mask
    assert mask.shape == (albert.vocabulary_size,) and not mask[albert.special_token_ids].any()
    starts = [not mask[i] for i in albert.tokenize(text).numpy()]
    assert sum(starts) == len(words)


def test_shapes_and_detokenize(albert):
    texts = tf.constant([["To be, or not to be.", ""], ["The rest is silence.", "O!"]])
    ids = albert.tokenize(texts)
    assert ids.shape[:2] == [2, 2] and ids.ragged_rank == 2
    assert albert.tokenize("To be").shape.rank == 1
    assert albert.tokenize_words(texts).shape[:2] == [2, 2]
    text = albert.detokenize(albert.tokenize(["To be, or not to be.", "The rest is silence."]))
    assert text.numpy().tolist() == [b"to be, or not to be.", b"the rest is silence."]
    dense = albert.tokenize(["O!", "Good night, sweet prince."]).to_tensor(albert.pad_id)
    with_cls = tf.concat([tf.fill([2, 1], albert.cls_id), dense], axis=1)
    assert albert.detokenize(with_cls, skip_special_tokens=True).numpy().tolist() == [
        b"o!",
        b"good night, sweet prince.",
    ]
    assert albert.detokenize(albert.tokenize("O!")).numpy() == b"o!"
    with pytest.raises(ValueError, match="integer token ids"):
        albert.detokenize(tf.constant([0.5]))


def test_runs_in_tf_data_and_in_a_saved_model(albert, tmp_path):
    dataset = tf.data.Dataset.from_tensor_slices(["To be.", "Or not."]).map(albert.tokenize)
    assert [ids.numpy().tolist() for ids in dataset] == albert.tokenize(
        ["To be.", "Or not."]
    ).to_list()
    module = tf.Module()
    module.tokenizer = albert
    module.tokenize = tf.function(
        lambda texts: albert.tokenize(texts).to_tensor(),
        input_signature=[tf.TensorSpec([None], tf.string)],
    )
    tf.saved_model.save(module, str(tmp_path / "saved"))
    loaded = tf.saved_model.load(str(tmp_path / "saved"))
    texts = tf.constant(["Words, words, words.", "Café naïve"])
    np.testing.assert_array_equal(
        loaded.tokenize(texts).numpy(), albert.tokenize(texts).to_tensor().numpy()
    )


# ---------------------------------------------------------------- files


def test_load_refuses_a_model_file_outside_the_folder(albert, tmp_path):
    albert.save(tmp_path / "albert")
    config_path = tmp_path / "albert" / "tokenizer.json"
    config = json.loads(config_path.read_text())
    config_path.write_text(json.dumps({**config, "model_file": "../../etc/passwd"}))
    with pytest.raises(ValueError) as raised:
        SentencePieceTokenizer.load(tmp_path / "albert")
    assert str(raised.value) == (
        f"{config_path}: `model_file` names '../../etc/passwd', which is outside "
        f"{str(tmp_path / 'albert')!r}; a saved folder may only name files inside it."
    )


def test_save_and_load_and_load_tokenizer_give_the_same_tokenizer(albert, tmp_path):
    albert.save(tmp_path / "albert")
    assert sorted(p.name for p in (tmp_path / "albert").iterdir()) == [
        "spiece.model",
        "tokenizer.json",
    ]
    for loaded in (
        SentencePieceTokenizer.load(tmp_path / "albert"),
        load_tokenizer(tmp_path / "albert"),
    ):
        assert type(loaded) is SentencePieceTokenizer
        assert (loaded.lower_case, loaded.keep_accents) == (True, False)
        assert loaded.vocabulary == albert.vocabulary
        assert loaded.tokenize(["Ay, Café"]).to_list() == albert.tokenize(["Ay, Café"]).to_list()
    wordpiece = WordPieceTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "##b"])
    wordpiece.save(tmp_path / "wordpiece")
    assert type(load_tokenizer(tmp_path / "wordpiece")) is WordPieceTokenizer
    with pytest.raises(ValueError, match="is not a SentencePieceTokenizer config"):
        SentencePieceTokenizer.load(tmp_path / "wordpiece")
    with pytest.raises(ValueError, match="tokenizer.json is missing"):
        load_tokenizer(tmp_path)


def test_from_pretrained_reads_the_folders_lower_casing_and_accents(tmp_path):
    (tmp_path / "spiece.model").write_bytes((FIXTURES / "sentence_piece_xlnet.model").read_bytes())
    settings = {"do_lower_case": False, "keep_accents": True}
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(settings))
    tokenizer = SentencePieceTokenizer.from_pretrained(tmp_path)
    assert (tokenizer.lower_case, tokenizer.keep_accents) == (False, True)
    (tmp_path / "tokenizer_config.json").unlink()
    assert SentencePieceTokenizer.from_pretrained(tmp_path).lower_case  # ALBERT's default
    with pytest.raises(ValueError, match="spiece.model not found"):
        SentencePieceTokenizer.from_pretrained(tmp_path / "nothing")


def test_bad_model_files_are_refused_with_their_name(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        SentencePieceTokenizer.from_model_file(tmp_path / "missing.model")
    (tmp_path / "junk.model").write_bytes(b"\x00\x01 not a model")
    with pytest.raises(ValueError, match="junk.model: not a SentencePiece model"):
        SentencePieceTokenizer.from_model_file(tmp_path / "junk.model")
    writer = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(["to be or not to be"] * 50 + ["that is the question"] * 50),
        model_writer=writer,
        vocab_size=20,
        hard_vocab_limit=False,
        minloglevel=2,
    )  # the package's default layout: <unk> <s> </s>, no pad, cls, sep or mask
    (tmp_path / "plain.model").write_bytes(writer.getvalue())
    with pytest.raises(ValueError, match="plain.model: .* no pad token"):
        SentencePieceTokenizer.from_model_file(tmp_path / "plain.model")
    with pytest.raises(ValueError, match="from_model_file"):
        SentencePieceTokenizer(str(tmp_path / "plain.model"))


# ---------------------------------------------------------------- training


def test_training_is_deterministic_and_gives_both_model_types(hamlet):
    first = SentencePieceTokenizer.train(hamlet, vocab_size=600)
    assert first.model == SentencePieceTokenizer.train(hamlet, vocab_size=600).model
    assert first.vocabulary_size == 600 and first.lower_case
    bpe = SentencePieceTokenizer.train(hamlet, vocab_size=600, model_type="bpe", lower_case=False)
    assert bpe.vocabulary != first.vocabulary and not bpe.lower_case
    assert "\u2581Hamlet" in bpe.vocabulary or "\u2581Ham" in bpe.vocabulary
    # What the model learned from is what tokenize prepares: accents dropped, lower case.
    assert first.tokenize("CAFÉ").numpy().tolist() == first.tokenize("cafe").numpy().tolist()


def test_training_takes_lists_and_datasets_and_samples_large_corpora(hamlet):
    sentences = [s for document in hamlet.iter_documents() for s in document]
    from_list = SentencePieceTokenizer.train(sentences, vocab_size=600)
    dataset = tf.data.Dataset.from_tensor_slices(sentences)
    assert SentencePieceTokenizer.train(dataset, vocab_size=600).model == from_list.model
    sampled = SentencePieceTokenizer.train(sentences, vocab_size=600, max_sentences=500)
    assert sampled.model != from_list.model
    small = SentencePieceTokenizer.train(["to be or not to be"] * 20, vocab_size=600)
    assert small.vocabulary_size < 600  # as many pieces as the text has


@pytest.mark.parametrize(
    "arguments, message",
    [
        ({"vocab_size": 50}, "vocab_size` must be an integer >= 105"),
        ({"model_type": "word"}, "model_type"),
        ({"layout": "bert"}, "layout"),
        ({"character_coverage": 0.5}, "character_coverage"),
        ({"max_sentences": 0}, "max_sentences"),
    ],
)
def test_training_refuses_bad_arguments(hamlet, arguments, message):
    with pytest.raises(ValueError, match=message):
        SentencePieceTokenizer.train(hamlet, **arguments)


def test_training_refuses_an_empty_corpus():
    with pytest.raises(ValueError, match="The corpus is empty"):
        SentencePieceTokenizer.train(["", "   "], vocab_size=600)
    with pytest.raises(ValueError, match="text 1 is a int"):
        SentencePieceTokenizer.train(["text", 3], vocab_size=600)


def test_word_level_tasks_refuse_it_and_the_classifier_takes_it(albert):
    from lmpipe.models import BertConfig, bert
    from lmpipe.pipelines import SpanAnswerer, TextClassifier, TokenTagger

    config = BertConfig.tiny(
        vocabulary_size=albert.vocabulary_size, hidden_dim=8, num_heads=2, intermediate_dim=8
    )
    encoder = bert(config)
    for task, arguments in ((TokenTagger, {"tags": ["O", "B-PER"]}), (SpanAnswerer, {})):
        with pytest.raises(ValueError, match=f"{task.__name__} splits text into words as Word"):
            task(albert, encoder, seq_len=16, **arguments)
    classifier = TextClassifier(albert, encoder, 2, seq_len=16)
    texts, labels = ["Good night, sweet prince.", "Alas, poor Yorick!"], [0, 1]
    classifier.fit((texts, labels), batch_size=2, epochs=1, steps_per_epoch=1, verbose=0)
    assert classifier.classify(texts) in ([0, 0], [0, 1], [1, 0], [1, 1])


def test_detokenized_text_is_valid_utf8_even_from_byte_pieces(tmp_path):
    # A model with byte fallback (pieces <0x00> .. <0xFF>) can stop inside a character.
    writer = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(["to be or not to be, that is the question"] * 40),
        model_writer=writer,
        vocab_size=300,
        byte_fallback=True,
        pad_id=0,
        unk_id=1,
        bos_id=-1,
        eos_id=-1,
        control_symbols=["[CLS]", "[SEP]", "[MASK]"],
        hard_vocab_limit=False,
        minloglevel=2,
    )
    tokenizer = SentencePieceTokenizer(writer.getvalue())
    ids = tokenizer.tokenize("café → ok").numpy().tolist()
    arrow = tokenizer.token_id("<0xE2>")  # the first byte of "→" (E2 86 92)
    assert arrow in ids
    cut = ids[: ids.index(arrow) + 1]  # ends inside the arrow
    text = tokenizer.detokenize(tf.ragged.constant([cut, ids])).numpy()
    assert text[0].decode("utf-8").endswith("\ufffd")
    assert text[1].decode("utf-8") == "cafe → ok"
    words = tokenizer.detokenize(tf.ragged.constant([[[5, 6], [7]], [[8]]], ragged_rank=2))
    assert words.shape[0] == 2 and words[0].shape[0] == 2
