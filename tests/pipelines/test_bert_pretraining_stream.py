"""BertPretraining and AlbertPretraining on the seekable stream: the batches after any
position, the global batch for any number of input pipelines, and the windows' keyed draws."""

import numpy as np
import pytest
import tensorflow as tf

from lmpipe import kernels
from lmpipe.datasets import TextCorpus
from lmpipe.datasets.examples.bert_examples import bert_examples, bert_window_examples
from lmpipe.datasets.examples.stream import StreamPosition
from lmpipe.pipelines import AlbertPretraining, BertPretraining

SEQ_LEN = 64


def take(dataset, count=-1):
    return [tf.nest.map_structure(lambda t: t.numpy(), batch) for batch in dataset.take(count)]


def assert_same_batches(actual, expected):
    assert len(actual) == len(expected)
    for got, want in zip(actual, expected, strict=True):
        for got_part, want_part in zip(got, want, strict=True):
            assert list(got_part) == list(want_part)
            for name in want_part:
                assert got_part[name].dtype == want_part[name].dtype, name
                assert got_part[name].shape == want_part[name].shape, name
                assert got_part[name].tobytes() == want_part[name].tobytes(), name


@pytest.fixture(scope="module")
def scenes(comedies):
    """40 scenes: windows of 16 documents give 3 windows an epoch, the last of 8."""
    return TextCorpus.from_documents(list(comedies.iter_documents())[:40])


def positions(batches):
    return np.concatenate([features["stream_position"] for features, _ in batches])


@pytest.mark.parametrize("objective", ["nsp", "sop", "mlm"])
def test_the_batches_after_a_position_are_the_same_from_any_start(
    scenes, bert_tokenizer, objective
):
    pipe = BertPretraining(bert_tokenizer, seq_len=SEQ_LEN, objective=objective, seed=7)
    batch_size = 16

    def stream(start=None, count=-1):
        return bert_examples(
            scenes,
            bert_tokenizer,
            seq_len=SEQ_LEN,
            objective=objective,
            masker=pipe.masker,
            batch_size=batch_size,
            seed=7,
            window_size=16,
            start=start,
        ).take(count)

    # Past the end of the first epoch (3 windows, about 1,300 examples).
    from_beginning = take(stream(), 100)
    where = positions(from_beginning)
    epoch_ends = np.flatnonzero(np.diff(where[:, 0]))
    window_ends = np.flatnonzero(np.diff(where[:, 1]))
    assert len(epoch_ends) == 1 and len(window_ends) >= 3
    # Every example once, in order: offsets count up from 0 in each window.
    starts = np.r_[0, window_ends + 1]
    for first, last in zip(starts, np.r_[starts[1:], len(where)], strict=True):
        np.testing.assert_array_equal(where[first:last, 2], np.arange(last - first))
    # Starts mid-window, at a window's first example, and in a batch that crosses the epoch end.
    window_start_batch = (window_ends[0] + 1) // batch_size
    crossing = epoch_ends[0] // batch_size
    chosen = {2, crossing - 1, crossing}
    if (window_ends[0] + 1) % batch_size == 0:
        chosen.add(window_start_batch - 1)  # the next batch starts a window
    for k in sorted(chosen):
        start = StreamPosition.after(from_beginning[k])
        assert_same_batches(take(stream(start, 3), 3), from_beginning[k + 1 : k + 4])
    # An offset past its window's examples continues into the windows after it.
    last_of_window = StreamPosition.of(where[window_ends[0]])
    start = last_of_window.advanced(1 + batch_size)
    resumed = positions(take(stream(start, 1), 1))
    np.testing.assert_array_equal(resumed, where[window_ends[0] + 1 + batch_size :][:batch_size])


@pytest.mark.parametrize("pipeline", [BertPretraining, AlbertPretraining])
def test_the_pipelines_dataset_and_training_batches_resume_after_a_batch(
    scenes, bert_tokenizer, pipeline
):
    pipe = pipeline(bert_tokenizer, seq_len=SEQ_LEN, seed=2)
    from_beginning = take(pipe.dataset(scenes, batch_size=32), 6)
    start = StreamPosition.after(from_beginning[2])
    assert_same_batches(
        take(pipe.dataset(scenes, batch_size=32, start=start), 3), from_beginning[3:]
    )
    assert_same_batches(
        take(pipe.training_batches(scenes, 32, None, start=start), 3), from_beginning[3:]
    )
    features, _ = from_beginning[0]
    assert features["stream_position"].dtype == np.int64
    assert features["stream_position"].shape == (32, 3)


@pytest.mark.parametrize("objective", ["nsp", "sop"])
def test_a_global_batch_is_the_same_for_one_and_two_input_pipelines(
    scenes, bert_tokenizer, objective
):
    pipe = BertPretraining(bert_tokenizer, seq_len=SEQ_LEN, objective=objective, seed=5)
    one = take(pipe.dataset(scenes, batch_size=16), 12)
    shares = []
    for pipeline_id in range(2):
        context = tf.distribute.InputContext(
            num_input_pipelines=2, input_pipeline_id=pipeline_id, num_replicas_in_sync=2
        )
        shares.append(take(pipe.training_batches(scenes, 8, context), 12))
    two = [
        tf.nest.map_structure(lambda a, b: np.concatenate([a, b]), first, second)
        for first, second in zip(*shares, strict=True)
    ]
    assert_same_batches(two, one)


def test_same_seed_same_batches_other_seed_or_epoch_other_draws(scenes, bert_tokenizer):
    def batches(seed, start=None):
        pipe = BertPretraining(bert_tokenizer, seq_len=SEQ_LEN, objective="nsp", seed=seed)
        return take(pipe.dataset(scenes, batch_size=16, start=start), 2)

    first = batches(1)
    assert_same_batches(batches(1), first)
    other = batches(2)
    assert not np.array_equal(other[0][0]["token_ids"], first[0][0]["token_ids"])
    # The same window of the next epoch: other documents, other pairs and masks.
    next_epoch = batches(1, StreamPosition(epoch=1))
    np.testing.assert_array_equal(next_epoch[0][0]["stream_position"][:, 0], 1)
    assert not np.array_equal(next_epoch[0][0]["token_ids"], first[0][0]["token_ids"])


def test_a_windows_examples_are_a_function_of_its_documents_and_key(scenes, bert_tokenizer):
    pipe = BertPretraining(bert_tokenizer, seq_len=SEQ_LEN, objective="nsp", seed=0)
    build = bert_window_examples(
        bert_tokenizer, seq_len=SEQ_LEN, objective="nsp", masker=pipe.masker
    )
    documents = tf.ragged.constant(list(scenes.iter_documents())[:6])
    key = tf.constant([3, 4], tf.int64)
    first = {name: value.numpy() for name, value in build(documents, key).items()}
    again = {name: value.numpy() for name, value in build(documents, key).items()}
    other = {name: value.numpy() for name, value in build(documents, key + 1).items()}
    for name in first:
        np.testing.assert_array_equal(again[name], first[name])
    assert len(first["token_ids"]) > 20
    assert not np.array_equal(other["mask_positions"], first["mask_positions"])
    labels = first["nsp_labels"]
    assert set(labels.tolist()) == {0, 1}
    # A window without a token gives no example, with the shapes of the others.
    empty = build(tf.ragged.constant([["\u200b"], ["\x01", " "]]), key)
    assert {name: tuple(value.shape) for name, value in empty.items()} == {
        name: (0, *value.shape[1:]) for name, value in first.items()
    }


def test_the_compiled_masker_and_tensorflows_ops_give_the_same_batches(scenes, bert_tokenizer):
    pipe = AlbertPretraining(bert_tokenizer, seq_len=SEQ_LEN, seed=3)
    compiled = take(pipe.dataset(scenes, batch_size=16), 3)
    with kernels.ops_only():
        ops = take(pipe.dataset(scenes, batch_size=16), 3)
    assert_same_batches(ops, compiled)


def test_a_model_called_on_a_stream_batch_as_it_is_ignores_its_positions(scenes, bert_tokenizer):
    """`model(features)` of a dataset's batch: `stream_position` is no input (a functional
    model given a key too many could otherwise take its inputs in another order)."""
    from lmpipe.models import BertConfig

    config = BertConfig.tiny(
        vocabulary_size=bert_tokenizer.vocabulary_size,
        hidden_dim=32,
        num_heads=2,
        intermediate_dim=64,
        max_sequence_length=SEQ_LEN,
    )
    pipe = BertPretraining(bert_tokenizer, seq_len=SEQ_LEN, objective="nsp", seed=7, config=config)
    model = pipe.build_model()
    features, _ = next(iter(pipe.dataset(scenes, 4)))
    without = {name: value for name, value in features.items() if name != "stream_position"}
    for got, want in zip(
        tf.nest.flatten(model(features)), tf.nest.flatten(model(without)), strict=True
    ):
        np.testing.assert_array_equal(got.numpy(), want.numpy())
