"""BytePairTokenizer: GPT-2's byte-level BPE, against Hugging Face's tokenizer on the same
files (fixture: fixtures/make_byte_pair_reference.py)."""

import json
import pathlib

import numpy as np
import pytest
import tensorflow as tf

from lmpipe.datasets import BytePairTokenizer, TextCorpus, load_tokenizer

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
FOLDER = FIXTURES / "byte_pair_gpt2"


@pytest.fixture(scope="module")
def reference():
    return json.loads((FIXTURES / "byte_pair_reference.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def gpt2():
    return BytePairTokenizer.from_pretrained(FOLDER)


def test_ids_and_text_equal_hugging_faces_gpt2_tokenizer(gpt2, reference):
    texts = reference["texts"]
    assert len(texts) > 150
    assert gpt2.tokenize(texts).to_list() == reference["ids"]
    decoded = [text.decode("utf-8") for text in gpt2.detokenize(tf.ragged.constant(
        reference["ids"], dtype=tf.int32, ragged_rank=1, row_splits_dtype=tf.int64
    )).numpy()]  # fmt: skip
    assert decoded == reference["decoded"] == texts  # byte-level BPE loses nothing


def test_end_of_text_plays_pad_unk_and_sep_and_the_other_roles_are_refused(gpt2):
    end = gpt2.token_id("<|endoftext|>")
    assert gpt2.roles == ("pad", "unk", "sep")
    assert gpt2.pad_id == gpt2.unk_id == gpt2.sep_id == end
    assert gpt2.special_token_ids == [end]
    for role in ("cls_id", "mask_id"):
        with pytest.raises(ValueError, match="BytePairTokenizer has no"):
            getattr(gpt2, role)
    # Typed in a text, the end token is text, not the id that ends a document.
    ids = gpt2.tokenize("a<|endoftext|>b").numpy().tolist()
    assert end not in ids and len(ids) > 3


def test_words_start_after_whitespace_and_documents_read_as_running_text(gpt2):
    words = gpt2.tokenize_words(["Hello, world.\nAgain"]).to_list()[0]
    texts = [gpt2.detokenize(tf.constant(word, tf.int32)).numpy().decode() for word in words]
    assert texts == ["Hello,", " world.", "\nAgain"]
    documents = tf.ragged.constant([["To be.", "Or not."], ["Ay."]])
    tokenized = gpt2.tokenize_documents(documents)
    joined = [gpt2.detokenize(tf.concat(doc, 0)).numpy().decode() for doc in tokenized.to_list()]
    assert joined == ["To be. Or not.", "Ay."]
    assert tokenized[0][1].numpy().tolist() == gpt2.tokenize(" Or not.").numpy().tolist()


def test_shapes_padding_and_utf8_output(gpt2):
    assert gpt2.tokenize("To be").shape.rank == 1
    assert gpt2.tokenize(tf.constant([["a", "b c"]])).shape.as_list()[:2] == [1, 2]
    ids = gpt2.tokenize(["To be", "x"]).to_tensor(default_value=gpt2.pad_id)
    assert gpt2.detokenize(ids).numpy().tolist() == [b"To be", b"x"]
    # Ids that end inside a character (the first byte of an emoji) give U+FFFD, never
    # invalid UTF-8 (TF Serving's REST API refuses such a string).
    emoji = gpt2.tokenize("🎭").numpy().tolist()
    assert len(emoji) > 1
    cut = gpt2.detokenize(tf.constant(emoji[:1], tf.int32)).numpy().decode("utf-8")
    assert cut == "\ufffd"


def test_runs_in_tf_data_and_in_a_saved_model(gpt2, tmp_path):
    texts = ["To be.", "Or not, to be!"]
    dataset = tf.data.Dataset.from_tensor_slices(texts).map(gpt2.tokenize)
    assert [ids.numpy().tolist() for ids in dataset] == gpt2.tokenize(texts).to_list()
    module = tf.Module()
    module.tokenizer = gpt2
    module.tokenize = tf.function(
        lambda texts: gpt2.tokenize(texts).to_tensor(),
        input_signature=[tf.TensorSpec([None], tf.string)],
    )
    module.detokenize = tf.function(
        lambda ids: gpt2.detokenize(ids), input_signature=[tf.TensorSpec([None, None], tf.int32)]
    )
    tf.saved_model.save(module, str(tmp_path / "saved"))
    loaded = tf.saved_model.load(str(tmp_path / "saved"))
    batch = tf.constant(["Words, words, words.", "Café naïve 日本"])
    expected = gpt2.tokenize(batch).to_tensor().numpy()
    np.testing.assert_array_equal(loaded.tokenize(batch).numpy(), expected)
    assert loaded.detokenize(expected[:1]).numpy().tolist() == [b"Words, words, words."]


def test_save_load_and_hugging_face_files(gpt2, tmp_path):
    gpt2.save(tmp_path / "saved")
    assert sorted(p.name for p in (tmp_path / "saved").iterdir()) == [
        "merges.txt",
        "tokenizer.json",
        "vocab.json",
    ]
    assert (tmp_path / "saved" / "merges.txt").read_text() == (FOLDER / "merges.txt").read_text()
    for loaded in (BytePairTokenizer.load(tmp_path / "saved"), load_tokenizer(tmp_path / "saved")):
        assert type(loaded) is BytePairTokenizer
        assert loaded.vocabulary == gpt2.vocabulary and loaded.merges == gpt2.merges
        assert loaded.tokenize(["Ay, Café"]).to_list() == gpt2.tokenize(["Ay, Café"]).to_list()


def test_from_pretrained_reads_prefix_space_and_the_end_token(tmp_path):
    for file in ("vocab.json", "merges.txt"):
        (tmp_path / file).write_bytes((FOLDER / file).read_bytes())
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps({"add_prefix_space": True, "eos_token": {"content": "<|endoftext|>"}})
    )
    spaced = BytePairTokenizer.from_pretrained(tmp_path)
    assert spaced.add_prefix_space
    plain = BytePairTokenizer.from_pretrained(FOLDER)
    assert spaced.tokenize("Hamlet").numpy().tolist() == plain.tokenize(" Hamlet").numpy().tolist()
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"eos_token": "</s>"}))
    with pytest.raises(ValueError, match="no end-of-text token '</s>'"):
        BytePairTokenizer.from_pretrained(tmp_path)


def test_bad_files_are_refused_with_their_name_and_line(tmp_path):
    vocabulary = json.loads((FOLDER / "vocab.json").read_text(encoding="utf-8"))
    with pytest.raises(ValueError, match="vocab.json not found: a GPT-2 checkpoint folder"):
        BytePairTokenizer.from_pretrained(tmp_path)
    (tmp_path / "vocab.json").write_text(json.dumps(vocabulary))
    with pytest.raises(ValueError, match="merges.txt not found"):
        BytePairTokenizer.from_pretrained(tmp_path)
    (tmp_path / "merges.txt").write_text("#version: 0.2\nĠ t\nĠt he extra\n")
    with pytest.raises(ValueError, match=r"merges.txt, line 3: not a merge rule"):
        BytePairTokenizer.from_pretrained(tmp_path)
    (tmp_path / "merges.txt").write_text("#version: 0.2\nĠ t\nzz qq\n")
    with pytest.raises(ValueError, match=r"rule 1 'zz qq' joins 'zz', not a token"):
        BytePairTokenizer.from_pretrained(tmp_path)
    (tmp_path / "vocab.json").write_text(json.dumps({**vocabulary, "extra": 5}))
    with pytest.raises(ValueError, match="the ids must be 0 .. 2000, each once; 'extra' has id 5"):
        BytePairTokenizer.from_pretrained(tmp_path)
    (tmp_path / "vocab.json").write_text("{not json")
    with pytest.raises(ValueError, match="vocab.json is not valid JSON"):
        BytePairTokenizer.from_pretrained(tmp_path)


def test_training_learns_merges_deterministically_and_refuses_bad_arguments():
    hamlet = TextCorpus.shakespeare(plays=["hamlet"])
    first = BytePairTokenizer.train(hamlet, vocab_size=600)
    again = BytePairTokenizer.train(hamlet, vocab_size=600)
    assert first.vocabulary == again.vocabulary and first.merges == again.merges
    assert first.vocabulary_size == 600 and first.vocabulary[0] == "<|endoftext|>"
    assert first.token_id("Ġthe") > 256  # merged from Shakespeare's text
    # Fewer pieces per word than bytes: the merges compress the text.
    text = "To be, or not to be, that is the question."
    assert len(first.tokenize(text).numpy()) < len(text.encode()) / 2
    listed = BytePairTokenizer.train(["to be or not to be"] * 20, vocab_size=300)
    assert listed.token_id("Ġbe") > 256
    with pytest.raises(ValueError, match="`vocab_size`=100 is too small"):
        BytePairTokenizer.train(hamlet, vocab_size=100)
    with pytest.raises(ValueError, match="min_frequency"):
        BytePairTokenizer.train(hamlet, vocab_size=300, min_frequency=0)


def test_pipelines_that_need_cls_or_mask_refuse_it_and_gpt_takes_it(gpt2):
    from lmpipe.models import BertConfig, GptConfig
    from lmpipe.pipelines import BertPretraining, GptPretraining

    with pytest.raises(ValueError, match="BertPretraining needs a tokenizer with cls, mask"):
        BertPretraining(gpt2, BertConfig.tiny(vocabulary_size=gpt2.vocabulary_size))
    pipe = GptPretraining(gpt2, GptConfig.tiny(vocabulary_size=gpt2.vocabulary_size), seq_len=16)
    features, labels = next(iter(pipe.dataset(TextCorpus.shakespeare(plays=["hamlet"]), 2)))
    ids = features["token_ids"].numpy()
    np.testing.assert_array_equal(ids[:, 1:], labels["next_ids"].numpy()[:, :-1])
    assert (ids < gpt2.vocabulary_size).all()
