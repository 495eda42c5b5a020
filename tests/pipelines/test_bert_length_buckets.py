"""BERT/ALBERT pretraining in length buckets: the stream's examples grouped by length within
their windows, each batch cut to one of a few lengths, every contract of the stream kept."""

import collections

import numpy as np
import pytest
import tensorflow as tf

from lmpipe.datasets import TextCorpus
from lmpipe.datasets.examples.length_groups import bucket_lengths
from lmpipe.datasets.examples.stream import StreamPosition
from lmpipe.models import BertConfig
from lmpipe.pipelines import AlbertPretraining, BertPretraining
from tests.pipelines.test_bert_pretraining_stream import assert_same_batches, take

SEQ_LEN = 64
BUCKETS = bucket_lengths(SEQ_LEN)


def tiny_config(tokenizer, **overrides):
    """A BERT small enough for a few steps of `fit`."""
    return BertConfig.tiny(
        vocabulary_size=tokenizer.vocabulary_size,
        hidden_dim=32,
        num_heads=2,
        intermediate_dim=64,
        max_sequence_length=SEQ_LEN,
        **overrides,
    )


@pytest.fixture(scope="module")
def scenes(comedies):
    """40 scenes: windows of 64 documents, one window an epoch."""
    return TextCorpus.from_documents(list(comedies.iter_documents())[:40])


def padded(batch):
    """A batch's `[B, L]` features padded back to `[B, SEQ_LEN]` (with 0: `[PAD]`)."""
    features, labels = batch
    width = features["token_ids"].shape[1]
    features = {
        name: np.pad(value, [(0, 0), (0, SEQ_LEN - width)])
        if name in ("token_ids", "segment_ids", "padding_mask")
        else value
        for name, value in features.items()
    }
    return features, labels


def example_rows(batches):
    """Every example of `batches` as bytes (its features and labels, padded to SEQ_LEN but
    for its position in the stream), counted."""
    rows = collections.Counter()
    for batch in batches:
        features, labels = padded(batch)
        parts = {**features, **labels}
        parts.pop("stream_position")
        for i in range(len(features["token_ids"])):
            rows[b"|".join(parts[name][i].tobytes() for name in sorted(parts))] += 1
    return rows


@pytest.mark.parametrize("pipeline", [BertPretraining, AlbertPretraining])
def test_an_epoch_has_the_same_examples_as_without_buckets_and_less_padding(
    scenes, bert_tokenizer, pipeline
):
    plain = pipeline(bert_tokenizer, seq_len=SEQ_LEN, seed=3)
    bucketed = pipeline(bert_tokenizer, seq_len=SEQ_LEN, seed=3, length_buckets=True)
    without = take(plain.dataset(scenes, 16, epochs=1, drop_remainder=False))
    within = take(bucketed.dataset(scenes, 16, epochs=1, drop_remainder=False))
    # The same examples, pairs and masks, each once: only their grouping changes. So the
    # masking statistics are those of the stream without buckets.
    assert example_rows(within) == example_rows(without)
    assert len(within) == len(without)
    # Each batch is cut to the smallest bucket that holds its longest example, and only
    # padding is cut.
    for features, _ in within:
        width = features["token_ids"].shape[1]
        longest = features["padding_mask"].sum(axis=1).max()
        assert width == min(length for length in BUCKETS if length >= longest)
    widths = {features["token_ids"].shape[1] for features, _ in within}
    assert widths <= set(BUCKETS) and len(widths) > 1

    def padding_share(batches):
        real = sum(features["padding_mask"].sum() for features, _ in batches)
        return 1 - real / sum(features["padding_mask"].size for features, _ in batches)

    assert padding_share(within) < 0.7 * padding_share(without)


@pytest.mark.parametrize("pipeline", [BertPretraining, AlbertPretraining])
def test_bucketed_batches_are_deterministic_and_resume_after_any_batch(
    comedies, bert_tokenizer, pipeline
):
    few = TextCorpus.from_documents(list(comedies.iter_documents())[:6])
    pipe = pipeline(bert_tokenizer, seq_len=SEQ_LEN, seed=2, length_buckets=True)
    from_beginning = take(pipe.dataset(few, batch_size=16), 40)
    assert_same_batches(take(pipe.dataset(few, batch_size=16), 40), from_beginning)
    # Past the first epoch's end, into the second.
    where = np.stack([features["stream_position"][0] for features, _ in from_beginning])
    crossing = int(np.flatnonzero(np.diff(where[:, 0]))[0])
    for k in (0, 5, crossing - 1, crossing, 36):
        start = StreamPosition.after(from_beginning[k])
        assert_same_batches(
            take(pipe.dataset(few, batch_size=16, start=start), 3), from_beginning[k + 1 : k + 4]
        )
        assert_same_batches(
            take(pipe.training_batches(few, 16, None, start=start), 3),
            from_beginning[k + 1 : k + 4],
        )


def test_a_global_batch_is_the_same_examples_for_one_and_two_input_pipelines(
    scenes, bert_tokenizer
):
    pipe = BertPretraining(bert_tokenizer, seq_len=SEQ_LEN, seed=5, length_buckets=True)
    one = [padded(batch) for batch in take(pipe.dataset(scenes, batch_size=16), 12)]
    shares = []
    for pipeline_id in range(2):
        context = tf.distribute.InputContext(
            num_input_pipelines=2, input_pipeline_id=pipeline_id, num_replicas_in_sync=2
        )
        shares.append(
            [padded(batch) for batch in take(pipe.training_batches(scenes, 8, context), 12)]
        )
    two = [
        tf.nest.map_structure(lambda a, b: np.concatenate([a, b]), first, second)
        for first, second in zip(*shares, strict=True)
    ]
    assert_same_batches(two, one)


def test_length_buckets_must_be_true_or_false(bert_tokenizer):
    with pytest.raises(ValueError, match="`length_buckets` must be True or False"):
        BertPretraining(bert_tokenizer, seq_len=SEQ_LEN, length_buckets="yes")


def test_a_tiny_fit_trains_on_bucketed_batches_with_one_trace(
    scenes, comedies_tokenizer, monkeypatch
):
    from lmpipe.models.pretraining import BertPretrainer

    traces = []
    train_step = BertPretrainer.train_step

    def counted(self, data):
        traces.append(data[0]["token_ids"].shape.as_list())
        return train_step(self, data)

    monkeypatch.setattr(BertPretrainer, "train_step", counted)
    config = tiny_config(comedies_tokenizer)
    pipe = BertPretraining(
        comedies_tokenizer, config=config, seq_len=SEQ_LEN, seed=1, length_buckets=True
    )
    widths = {f["token_ids"].shape[1] for f, _ in take(pipe.dataset(scenes, 8), 40)}
    assert len(widths) > 1  # the steps below see several lengths
    history = pipe.fit(scenes, batch_size=8, epochs=1, steps_per_epoch=40, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    # One trace of the training step for every bucket length (the lengths are dynamic in it).
    assert traces == [[8, None]]


class StopError(Exception):
    pass


@pytest.mark.slow
def test_a_resumed_bucketed_run_equals_the_uninterrupted_run(
    tmp_path, scenes, comedies_tokenizer, capsys
):
    import keras

    config = tiny_config(comedies_tokenizer, dropout=0.0, attention_dropout=0.0)

    def fit(directory, callbacks=(), verbose=0):
        pipe = BertPretraining(
            comedies_tokenizer, config=config, seq_len=SEQ_LEN, seed=4, length_buckets=True
        )
        pipe.fit(
            scenes,
            batch_size=8,
            epochs=1,
            steps_per_epoch=6,
            checkpoint_dir=str(directory),
            checkpoint_every=1,
            callbacks=list(callbacks),
            verbose=verbose,
        )
        return [np.asarray(w) for w in pipe.model.get_weights()]

    class StopAt(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if int(self.model.optimizer.iterations.numpy()) == 3:
                raise StopError

    whole = fit(tmp_path / "whole")
    with pytest.raises(StopError):
        fit(tmp_path / "run", [StopAt()])
    capsys.readouterr()
    resumed = fit(tmp_path / "run", verbose=1)
    # It resumed after step 2 (step 3 was stopped before its checkpoint) by seeking.
    printed = capsys.readouterr().out
    assert "Resuming from step 2 of 6" in printed
    assert "example 16 (the batch after the last one trained): no batch is rebuilt" in printed
    for got, want in zip(resumed, whole, strict=True):
        np.testing.assert_array_equal(got, want)
