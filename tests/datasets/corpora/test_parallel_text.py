import importlib.util
import logging

import numpy as np
import pytest
import tensorflow as tf

from lmpipe.datasets.corpora.parallel_text import ParallelCorpus
from lmpipe.datasets.examples.seq2seq_examples import (
    TARGET_TOKENS,
    check_lengths,
    seq2seq_examples,
    target_token_ids,
)
from lmpipe.tokenizers.wordpiece import SPECIAL_TOKENS, WordPieceTokenizer


def _bible_available():
    if importlib.util.find_spec("pysword") is None:
        return False
    try:
        ParallelCorpus.bible(books=["Obad"])
    except ValueError:
        return False
    return True


needs_bible = pytest.mark.skipif(
    not _bible_available(), reason="needs pysword and sword-text-web / sword-text-sparv"
)


@pytest.fixture(scope="module")
def ruth():
    """The book of Ruth, English -> Spanish: 85 verse pairs of real parallel text."""
    if not _bible_available():
        pytest.skip("needs pysword and sword-text-web / sword-text-sparv")
    return ParallelCorpus.bible(books=["Ruth"])


@pytest.fixture(scope="module")
def tokenizer(ruth):
    texts = list(ruth.sources) + list(ruth.targets)
    return WordPieceTokenizer.train(
        texts, vocab_size=300, lower_case=False, reserved_tokens=TARGET_TOKENS
    )


# ---------------------------------------------------------------------------- reading


@needs_bible
def test_bible_pairs_verses_by_reference_without_markup(ruth):
    assert len(ruth) == 85  # Ruth has 85 verses in both versifications
    assert ruth.skipped == 0
    assert ruth[0][0].startswith("In the days when the judges judged")
    assert ruth[0][1].startswith("Y ACONTECIÓ en los días que gobernaban los jueces")
    for source, target in ruth:
        for text in (source, text_target := target):
            assert "<" not in text and ">" not in text and "  " not in text
            assert text == text.strip() and text_target


@needs_bible
def test_bible_skips_verses_missing_on_either_side_and_says_how_many(caplog):
    with caplog.at_level(logging.WARNING):
        corpus = ParallelCorpus.bible(books=["Obad", "Tob"])  # Tobit: only in the WEB
    assert len(corpus) == 21  # Obadiah's verses
    assert corpus.skipped > 200
    assert f"skipped {corpus.skipped} verses" in caplog.text


@needs_bible
def test_bible_footnotes_do_not_glue_words():
    # Genesis 1:1 of the WEB has a footnote between "God" and "created".
    source, _ = ParallelCorpus.bible(books=["Gen"])[0]
    assert source == "In the beginning, God created the heavens and the earth."


def test_bible_names_what_to_install_when_modules_are_missing(tmp_path):
    if importlib.util.find_spec("pysword") is None:
        with pytest.raises(ValueError, match="pip install pysword"):
            ParallelCorpus.bible(sword_path=tmp_path)
    else:
        with pytest.raises(ValueError, match="sword-text-web"):
            ParallelCorpus.bible(sword_path=tmp_path)


def test_tsv_round_trip(tmp_path):
    corpus = ParallelCorpus.from_pairs([("hello", "hola"), ("good night", "buenas noches")])
    path = tmp_path / "pairs.tsv"
    corpus.to_tsv(path)
    assert list(ParallelCorpus.from_tsv(str(path))) == list(corpus)


@pytest.mark.parametrize(
    "content, message",
    [
        (b"a\tb\n\nc\td\n", "line 2: empty line"),
        (b"a\tb\nc d\n", "line 2: expected two tab-separated columns"),
        (b"a\tb\nc\td\te\n", "line 2: expected two tab-separated columns"),
        (b"a\tb\nc\td\n\tx\n", "line 3: the source column is empty"),
        (b"a\t \n", "line 1: the target column is empty"),
        (b"a\tb\nca\xf1a\tcane\n", "line 2: invalid UTF-8"),
        (b"", "is empty"),
    ],
)
def test_tsv_errors_name_file_and_line(tmp_path, content, message):
    path = tmp_path / "bad.tsv"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=message) as error:
        ParallelCorpus.from_tsv([str(path)])
    assert str(path) in str(error.value)


def test_tsv_accepts_windows_line_endings_and_a_bom(tmp_path):
    path = tmp_path / "windows.tsv"
    path.write_bytes("\ufeffsí\tyes\r\nno\tno\r\n".encode())
    assert list(ParallelCorpus.from_tsv(path)) == [("sí", "yes"), ("no", "no")]


def test_from_pairs_rejects_bad_pairs():
    with pytest.raises(ValueError, match=r"pairs\[1\]"):
        ParallelCorpus.from_pairs([("a", "b"), ("c",)])
    with pytest.raises(ValueError, match=r"pairs\[0\]`: the target is empty"):
        ParallelCorpus.from_pairs([("a", "  ")])


def test_split_is_deterministic_disjoint_and_complete():
    corpus = ParallelCorpus.from_pairs([(f"s{i}", f"t{i}") for i in range(100)])
    train, held = corpus.split(held_out=0.2, seed=3)
    again_train, again_held = corpus.split(held_out=0.2, seed=3)
    _, other_held = corpus.split(held_out=0.2, seed=4)
    assert list(held) == list(again_held) and list(train) == list(again_train)
    assert len(held) == 20 and len(train) == 80
    assert sorted(list(train) + list(held)) == sorted(corpus)
    assert list(held) != list(other_held)
    with pytest.raises(ValueError, match="held_out"):
        corpus.split(held_out=100)


def test_dataset_shards_are_disjoint_and_cover_the_corpus():
    corpus = ParallelCorpus.from_pairs([(f"s{i}", f"t{i}") for i in range(10)])
    shards = []
    for pipeline_id in range(3):
        context = tf.distribute.InputContext(3, pipeline_id, 3)
        shards.append([x["source"].numpy() for x in corpus.dataset(context)])
    flat = [s for shard in shards for s in shard]
    assert sorted(flat) == sorted(s.encode() for s in corpus.sources)
    assert len(set(flat)) == 10


# ---------------------------------------------------------------------------- examples


def _batches(corpus, tokenizer, **options):
    options = {
        "batch_size": 4,
        "max_source_len": 256,
        "max_target_len": 256,
        "epochs": 1,
        "drop_remainder": False,
        "check": False,
        **options,
    }
    return list(seq2seq_examples(corpus, tokenizer, tokenizer, **options))


@needs_bible
def test_teacher_forcing_shifts_the_target_by_one(ruth, tokenizer):
    bos, eos = target_token_ids(tokenizer)
    corpus = ruth[:12]
    batches = _batches(corpus, tokenizer, shuffle=False, bucket_boundaries=[])
    seen = {}
    for features, labels in batches:
        assert features["decoder_ids"].shape == labels["target_ids"].shape
        assert features["encoder_ids"].dtype == tf.int32 and labels["weights"].dtype == tf.float32
        for row in range(features["encoder_ids"].shape[0]):
            source_length = int(tf.reduce_sum(features["encoder_mask"][row]))
            length = int(tf.reduce_sum(features["decoder_mask"][row]))
            decoder = features["decoder_ids"][row].numpy()
            target = labels["target_ids"][row].numpy()
            weights = labels["weights"][row].numpy()
            assert decoder[0] == bos and target[length - 1] == eos
            np.testing.assert_array_equal(decoder[1:length], target[: length - 1])
            np.testing.assert_array_equal(weights, np.arange(len(weights)) < length)
            np.testing.assert_array_equal(decoder[length:], 0)
            np.testing.assert_array_equal(target[length:], 0)
            np.testing.assert_array_equal(features["encoder_ids"][row, source_length:], 0)
            source = tokenizer.detokenize(features["encoder_ids"][row, :source_length]).numpy()
            seen[source] = tokenizer.detokenize(target[: length - 1]).numpy()
    expected = tokenizer.detokenize(tokenizer.tokenize(list(corpus.targets)))
    sources = tokenizer.detokenize(tokenizer.tokenize(list(corpus.sources)))
    assert seen == dict(zip(sources.numpy(), expected.numpy(), strict=True))


@needs_bible
def test_buckets_group_similar_lengths(ruth, tokenizer):
    boundaries = [20, 30, 40]
    batches = _batches(ruth, tokenizer, bucket_boundaries=boundaries, drop_remainder=True)
    assert batches
    edges = [0, *boundaries, 10**9]
    for features, _ in batches:
        lengths = np.maximum(
            features["encoder_mask"].numpy().sum(1), features["decoder_mask"].numpy().sum(1)
        )
        buckets = {int(np.searchsorted(edges, length, side="right")) for length in lengths}
        assert len(buckets) == 1, lengths  # every batch comes from one bucket
        # Padded to the batch's longest sequence, not to a global maximum.
        assert features["decoder_ids"].shape[1] == features["decoder_mask"].numpy().sum(1).max()


@needs_bible
def test_same_seed_same_batches_other_seed_or_epoch_other_order(ruth, tokenizer):
    def sources(seed, epochs=1):
        batches = _batches(ruth, tokenizer, seed=seed, epochs=epochs, bucket_boundaries=[])
        return [tuple(f["encoder_ids"][:, 0].numpy()) for f, _ in batches]

    first = sources(seed=5)
    assert first == sources(seed=5)
    assert first != sources(seed=6)
    two_epochs = sources(seed=5, epochs=2)
    assert two_epochs[: len(first)] == first and two_epochs[len(first) :] != first


@needs_bible
def test_shards_shuffle_their_own_pairs(ruth, tokenizer):
    seen = []
    for pipeline_id in range(2):
        context = tf.distribute.InputContext(2, pipeline_id, 2)
        for features, _ in _batches(ruth, tokenizer, input_context=context):
            seen.extend(tokenizer.detokenize(features["encoder_ids"]).numpy().tolist())
    assert len(seen) == len(ruth) == len(set(seen))


@needs_bible
def test_long_sentences_are_truncated_with_a_counted_warning(ruth, tokenizer, caplog):
    lengths = tokenizer.tokenize(list(ruth.sources)).row_lengths().numpy()
    target_lengths = tokenizer.tokenize(list(ruth.targets)).row_lengths().numpy()
    with caplog.at_level(logging.WARNING):
        batches = _batches(ruth, tokenizer, max_source_len=20, max_target_len=16, check=True)
    expected = f"{(lengths > 20).sum()} of 85 sources have more than max_source_len=20"
    assert expected in caplog.text
    assert f"{(target_lengths > 15).sum()} targets more than" in caplog.text
    for features, _ in batches:
        assert features["encoder_ids"].shape[1] <= 20 and features["decoder_ids"].shape[1] <= 16
    with pytest.raises(ValueError, match="truncate=True"):
        check_lengths(ruth, tokenizer, tokenizer, 20, 16, truncate=False)


def test_target_vocabulary_without_bos_and_eos_is_rejected():
    tokenizer = WordPieceTokenizer([*SPECIAL_TOKENS, "[BOS]", "a"])
    with pytest.raises(ValueError, match=r"lacks \[EOS\]"):
        target_token_ids(tokenizer)
    corpus = ParallelCorpus.from_pairs([("a", "a")])
    with pytest.raises(ValueError, match=r"\[EOS\]"):
        seq2seq_examples(
            corpus, tokenizer, tokenizer, batch_size=1, max_source_len=4, max_target_len=4
        )


def test_shuffled_batches_survive_a_global_seed():
    # The shuffles are stateless: tf.random.set_seed (as keras.utils.set_random_seed does in
    # training) changes nothing.
    corpus = ParallelCorpus.from_pairs([(f"w{i}", f"w{i}") for i in range(30)])
    tokenizer = WordPieceTokenizer.train(
        [f"w{i}" for i in range(30)] * 4, vocab_size=120, reserved_tokens=TARGET_TOKENS
    )

    def order():
        batches = _batches(corpus, tokenizer, seed=1, bucket_boundaries=[])
        return [tuple(f["encoder_ids"].numpy().ravel()) for f, _ in batches]

    first = order()
    tf.random.set_seed(123)
    assert order() == first
