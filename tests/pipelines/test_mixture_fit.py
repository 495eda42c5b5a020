"""`pipe.fit(CorpusMixture(...))`: a pipeline that reads the seekable stream trains on a
mixture through the base's `fit`, and says at the end each source's share of the examples
its steps trained (a resumed run's too)."""

import numpy as np

from lmpipe.contract import STREAM_POSITION
from lmpipe.datasets.examples.mixture import schedule_of
from lmpipe.datasets.examples.stream import stream_batches, stream_examples
from lmpipe.pipelines.pipeline import Pipeline
from tests.pipelines.stream_regression import Regression, mixture, window_examples


class StreamRegression(Pipeline):
    """The toy regression as a pipeline on the stream (as the families read it)."""

    def dataset(self, data, batch_size, epochs=None, input_context=None, start=None):
        examples = stream_examples(
            data, window_examples, seed=self.options.seed, window_size=5, start=start, epochs=epochs
        )
        batches = stream_batches(examples, batch_size, input_context)
        return batches.map(lambda e: ({"x": e["x"], STREAM_POSITION: e[STREAM_POSITION]}, e["y"]))

    def training_batches(self, data, per_replica, input_context, start=None):
        return self.dataset(data, per_replica, input_context=input_context, start=start)

    def build_model(self):
        return Regression()


def _fit(directory, steps, capsys):
    pipe = StreamRegression(seed=3)
    pipe.fit(
        mixture(),
        batch_size=4,
        epochs=1,
        steps_per_epoch=steps,
        checkpoint_dir=str(directory),
        learning_rate=0.05,
        warmup_steps=1,
        verbose=2,
    )
    return pipe, capsys.readouterr().out.splitlines()


def test_fit_on_a_mixture_reports_the_shares_of_the_examples_trained(tmp_path, capsys):
    pipe, lines = _fit(tmp_path / "run", 6, capsys)
    counts = schedule_of(mixture()).counts(0, 24)
    assert counts.tolist() == [18, 6]  # chunks of 3: 0 1 0 0 1 0 0 0 (the 70/30 schedule)
    at = lines.index("The mixture's sources in the 24 examples trained:")
    assert lines[at + 1 : at + 3] == [
        "  source 0 75.0% (weight 70.0%)",
        "  source 1 25.0% (weight 30.0%)",
    ]
    # The last batch trained is the mixture's examples 20 to 23.
    position = pipe.model.__dict__["_stream_mixture_position"].numpy()
    assert position[:3].tolist() == [20, 0, 0]
    # A longer run in the same folder resumes and counts every step's examples.
    _, lines = _fit(tmp_path / "run", 2000 // 4, capsys)
    at = lines.index("The mixture's sources in the 2,000 examples trained:")
    shares = schedule_of(mixture()).counts(0, 2000) / 2000
    np.testing.assert_allclose(shares, [0.7, 0.3], atol=0.01)
    assert lines[at + 1] == f"  source 0 {shares[0]:.1%} (weight 70.0%)"


def _tags(directory):
    """Every scalar tag written to the TensorBoard event files under `directory`."""
    import tensorflow as tf

    tags = set()
    for path in tf.io.gfile.glob(str(directory / "*" / "events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            tags.update(value.tag for value in event.summary.value)
    return tags


def test_each_epoch_logs_the_shares_of_the_examples_trained_so_far(tmp_path):
    pipe = StreamRegression(seed=3)
    history = pipe.fit(
        mixture(),
        batch_size=4,
        epochs=2,
        steps_per_epoch=3,
        checkpoint_dir=str(tmp_path / "run"),
        learning_rate=0.05,
        warmup_steps=1,
        verbose=0,
    )
    schedule = schedule_of(mixture())
    # After epoch 1 the first 12 examples, after epoch 2 the first 24 (chunks of 3).
    expected = np.array([schedule.counts(0, 12) / 12, schedule.counts(0, 24) / 24])
    assert expected[:, 0].tolist() != expected[:, 1].tolist()
    for source in (0, 1):
        np.testing.assert_allclose(history.history[f"share/source {source}"], expected[:, source])
    assert {"epoch_share/source 0", "epoch_share/source 1"} <= _tags(tmp_path / "run" / "logs")
