"""BytePairTokenizer: GPT-2's byte-level BPE, against GPT-2's tokenizer on the same files
(fixture: fixtures/make_byte_pair_reference.py, where openai's encoder.py algorithm,
transformers' GPT2Tokenizer and AutoTokenizer agree on every text)."""

import ast
import configparser
import json
import pathlib

import numpy as np
import pytest
import tensorflow as tf

from lmpipe.datasets import BytePairTokenizer, TextCorpus, load_tokenizer
from lmpipe.tokenizers.byte_pair_merging import byte_characters

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
FOLDER = FIXTURES / "byte_pair_gpt2"
PARAGRAPHS = FIXTURES / "byte_pair_paragraphs"
GPT2_SUBSET = FIXTURES / "byte_pair_gpt2_subset"  # the part of GPT-2's vocabulary the texts use
REPOSITORY = pathlib.Path(__file__).parents[2]


@pytest.fixture(scope="module")
def reference():
    return json.loads((FIXTURES / "byte_pair_reference.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def gpt2():
    return BytePairTokenizer.from_pretrained(FOLDER)


@pytest.fixture(scope="module")
def paragraphs():
    return BytePairTokenizer.from_pretrained(PARAGRAPHS)


def ragged(ids):
    return tf.ragged.constant(ids, dtype=tf.int32, ragged_rank=1, row_splits_dtype=tf.int64)


@pytest.mark.parametrize("folder", [FOLDER, PARAGRAPHS, GPT2_SUBSET], ids=lambda f: f.name)
def test_ids_equal_gpt2s_on_every_text_of_the_fixture(folder, reference):
    texts = reference["texts"]
    assert reference["varied"] >= 200 and len(texts) > 400
    recorded = reference["vocabularies"][folder.name]
    ids = BytePairTokenizer.from_pretrained(folder).tokenize(texts).to_list()
    if "gpt2_ids" in recorded:  # a part of GPT-2's own vocabulary: ids in GPT-2's numbering
        ids = [[recorded["gpt2_ids"][i] for i in row] for row in ids]
    assert ids == recorded["ids"]


def test_paragraph_breaks_give_the_ids_gpt2_was_trained_on(reference):
    gpt2 = BytePairTokenizer.from_pretrained(GPT2_SUBSET)
    gpt2_ids = reference["vocabularies"]["byte_pair_gpt2_subset"]["gpt2_ids"]

    def ids(text):
        return [gpt2_ids[i] for i in gpt2.tokenize(text).numpy().tolist()]

    # GPT-2's own ids ("A" 32, "B" 33, "Ċ" 198, "ĊĊ" 628): a blank line before text is two
    # newlines, and "ĊĊ" only where a run keeps two (keras-hub gave "A", "ĊĊ", "B").
    assert ids("A\n\nB") == [32, 198, 198, 33]
    assert ids("A\n\n\nB") == [32, 628, 198, 33]
    assert ids("A\n\n") == [32, 628]


def test_prefix_space_ids_equal_gpt2s_with_add_prefix_space(reference):
    spaced = BytePairTokenizer.from_files(
        FOLDER / "vocab.json", FOLDER / "merges.txt", add_prefix_space=True
    )
    expected = reference["vocabularies"]["byte_pair_gpt2"]["prefix_space_ids"]
    assert spaced.tokenize(reference["texts"]).to_list() == expected


def test_detokenize_gives_every_text_back_and_cut_ids_as_hugging_face_decodes(gpt2, reference):
    recorded = reference["vocabularies"]["byte_pair_gpt2"]
    texts = gpt2.detokenize(ragged(recorded["ids"])).numpy()
    assert [text.decode("utf-8") for text in texts] == reference["texts"]
    cut = gpt2.detokenize(ragged([row[: len(row) // 2] for row in recorded["ids"]])).numpy()
    assert [text.decode("utf-8") for text in cut] == recorded["cut_decoded"]
    assert sum("\ufffd" in text for text in recorded["cut_decoded"]) >= 10  # cut characters


def test_whitespace_runs_and_markers_split_as_gpt2_splits_them(paragraphs):
    def pieces(text):
        return [paragraphs.id_to_token(i) for i in paragraphs.tokenize(text).numpy().tolist()]

    # A run before text keeps its last character apart: a space joins the word after it,
    # a newline or tab stands alone. A run that ends the text is one piece.
    assert pieces("A\n\nB") == ["A", "Ċ", "Ċ", "B"]
    assert pieces("A\n\n\nB") == ["A", "ĊĊ", "Ċ", "B"]
    assert pieces("end   ") == ["end", "ĠĠĠ"]
    assert pieces("A\n\n") == ["A", "ĊĊ"]
    assert pieces("A    B") == ["A", "ĠĠĠ", "ĠB"]
    # No character is a marker: keras-hub's "६" (U+096C) is text like any other.
    ids = paragraphs.tokenize("a\u096cb")
    assert len(ids.numpy()) == 5 and paragraphs.detokenize(ids).numpy().decode() == "a\u096cb"


def test_merges_follow_openais_encoder_every_occurrence_of_the_best_pair_at_once():
    vocabulary = {"<|endoftext|>": 0, **{c: i + 1 for i, c in enumerate(byte_characters())}}
    vocabulary.update(aa=257, aaa=258)

    def pieces(merges, text):
        tokenizer = BytePairTokenizer(vocabulary, merges)
        return [tokenizer.id_to_token(i) for i in tokenizer.tokenize(text).numpy().tolist()]

    # Left to right and without overlap: "a a a" joins its first pair.
    assert pieces(["a a"], "aaaaa") == ["aa", "aa", "a"]
    assert pieces(["a a", "aa a"], "aaaaa") == ["aa", "aaa"]
    # Every occurrence of the best pair in one step (encoder.py), so "aa a" ranked first is
    # never reached in "aaaa" (one pair at a time, Hugging Face's tokenizer gives "aaa a").
    assert pieces(["aa a", "a a"], "aaaa") == ["aa", "aa"]
    # A rule given twice keeps its last rank.
    assert pieces(["a a", "aa a", "a a"], "aaa") == ["aaa"]


def test_end_of_text_plays_pad_unk_and_sep_and_the_other_roles_are_refused(gpt2):
    end = gpt2.token_id("<|endoftext|>")
    assert gpt2.roles == ("pad", "unk", "sep")
    assert gpt2.pad_id == gpt2.unk_id == gpt2.sep_id == end
    assert gpt2.special_token_ids == [end]
    for role in ("cls_id", "mask_id"):
        with pytest.raises(ValueError, match="BytePairTokenizer has no"):
            getattr(gpt2, role)
    # Typed in a text, the end token is the end id, as Hugging Face's tokenizers make it;
    # the texts on either side are tokenized on their own.
    assert gpt2.tokenize("a<|endoftext|>b").numpy().tolist() == [
        gpt2.token_id("a"),
        end,
        gpt2.token_id("b"),
    ]
    assert gpt2.tokenize("x <|endoftext|>").numpy().tolist() == [
        gpt2.token_id("x"),
        gpt2.token_id("Ġ"),
        end,
    ]
    assert gpt2.detokenize(gpt2.tokenize("<|endoftext|>a")).numpy() == b"<|endoftext|>a"


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
    # Bytes that are not UTF-8 are read as U+FFFD (Python's errors="replace"); NUL is text.
    replaced = gpt2.tokenize(tf.constant([b"a\xffb\xe2\x82", "a\ufffdb\ufffd"])).to_list()
    assert replaced[0] == replaced[1]
    assert gpt2.detokenize(gpt2.tokenize("a\x00b")).numpy() == b"a\x00b"


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
    (tmp_path / "merges.txt").write_text("#version: 0.2\nĠ t\nĊ Ċ\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"rule 1 'Ċ Ċ' makes 'ĊĊ', not a token"):
        BytePairTokenizer.from_pretrained(tmp_path)
    with pytest.raises(ValueError, match="`vocabulary` lacks 255 of the 256 byte tokens"):
        BytePairTokenizer({"<|endoftext|>": 0, "a": 1}, [])
    (tmp_path / "vocab.json").write_text(json.dumps({**vocabulary, "extra": 5}))
    with pytest.raises(ValueError, match="the ids must be 0 .. 2000, each once; 'extra' has id 5"):
        BytePairTokenizer.from_pretrained(tmp_path)
    (tmp_path / "vocab.json").write_text("{not json")
    with pytest.raises(ValueError, match="vocab.json is not valid JSON"):
        BytePairTokenizer.from_pretrained(tmp_path)


def test_lmpipe_needs_no_keras_hub():
    importers = []
    for path in sorted((REPOSITORY / "lmpipe").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [getattr(node, "module", None) or ""]
                names += [alias.name for alias in node.names]
                if any(name.split(".")[0] == "keras_hub" for name in names):
                    importers.append(path.name)
    assert importers == []
    setup = configparser.ConfigParser()
    setup.read(REPOSITORY / "setup.cfg")
    assert "keras-hub" not in setup["options"]["install_requires"]
    assert "keras-hub" in setup["options.extras_require"]["benchmarks"]


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
