"""Resuming from damaged checkpoint directories, one write per checkpoint, non-finite losses.

A linear regression trained by `train` stands in for the language models: the checkpoints
hold its weights, the optimizer's state and step, as theirs do, and it trains in milliseconds.
"""

import logging
import os

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras import ops

from lmpipe.models.trainable import FunctionalTrainableModel
from lmpipe.training.checkpointing import TrainingCheckpoint
from lmpipe.training.loop import train
from lmpipe.training.options import TrainingOptions

RUN_CONFIG = {"model": "regression", "inputs": 4}


class Regression(FunctionalTrainableModel):
    """`y = w . x + b` with the mean squared error."""

    def __init__(self, **kwargs):
        inputs = keras.Input(shape=(4,), name="x")
        outputs = keras.layers.Dense(1, name="dense")(inputs)
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        return ops.mean(ops.square(y_pred[:, 0] - y))


def regression_batches(nan_step=None):
    """`make_dataset` for `train`: batch i (0-based) is drawn from seed i, so resuming at step
    s reads on from batch s; with `nan_step`, that step's (1-based) features are NaN."""

    def make_dataset(per_replica, input_context, skip, start=None):
        assert start is None, "these batches are not a stream"

        def batch(index):
            x = tf.random.stateless_normal([per_replica, 4], seed=tf.stack([index, 0]))
            y = tf.reduce_sum(x * tf.constant([1.0, -2.0, 3.0, 0.5]), axis=1)
            if nan_step is not None:
                x = tf.where(index == nan_step - 1, x * np.nan, x)
            return x, y

        return tf.data.Dataset.range(10**6).map(batch).skip(skip)

    return make_dataset


class FirstStep(keras.callbacks.Callback):
    """Records the optimizer's step when training begins: the step a run resumed from."""

    def __init__(self):
        super().__init__()
        self.steps = None

    def on_train_begin(self, logs=None):
        if self.steps is None:
            self.steps = int(self.model.optimizer.iterations.numpy())


class SimulatedKillError(Exception):
    """Raised by `InterruptAt` to end a run as a kill would."""


class InterruptAt(keras.callbacks.Callback):
    """Ends training at the end of step `step`, before it is checkpointed (as a kill would)."""

    def __init__(self, step):
        super().__init__()
        self.step = step

    def on_train_batch_end(self, batch, logs=None):
        if int(self.model.optimizer.iterations.numpy()) == self.step:
            raise SimulatedKillError


def fit(
    directory,
    epochs=3,
    steps_per_epoch=3,
    checkpoint_every=1,
    nan_step=None,
    callbacks=(),
    batch_size=4,
    **hyperparameters,
):
    """Train the regression with checkpoints in `directory`; return (model, resumed step)."""
    first_step = FirstStep()
    model, _ = train(
        Regression,
        regression_batches(nan_step),
        run_config=RUN_CONFIG,
        batch_size=batch_size,
        epochs=epochs,
        steps_per_epoch=steps_per_epoch,
        options=TrainingOptions(
            checkpoint_dir=str(directory),
            checkpoint_every=checkpoint_every,
            callbacks=[first_step, *callbacks],
            verbose=0,
            **{"learning_rate": 0.01, **hyperparameters},
        ),
        seed=1,
    )
    return model, first_step.steps


@pytest.fixture
def checkpoints(tmp_path):
    """A run of 3 epochs x 3 steps, checkpointed every step, stopped during step 7: ckpt-4,
    ckpt-5, ckpt-6 remain."""
    directory = tmp_path / "checkpoints"
    with pytest.raises(SimulatedKillError):
        fit(directory, callbacks=[InterruptAt(7)])
    assert sorted(name for name in os.listdir(directory) if name.endswith(".index")) == [
        "ckpt-4.index",
        "ckpt-5.index",
        "ckpt-6.index",
    ]
    return directory


def test_each_checkpoint_is_written_once(tmp_path, monkeypatch):
    written = []
    save = tf.train.CheckpointManager.save

    def recording_save(manager, checkpoint_number=None, **kwargs):
        written.append(checkpoint_number)
        return save(manager, checkpoint_number=checkpoint_number, **kwargs)

    monkeypatch.setattr(tf.train.CheckpointManager, "save", recording_save)
    # Epoch ends (steps 4 and 8) are also `checkpoint_every` steps.
    fit(tmp_path, epochs=2, steps_per_epoch=4, checkpoint_every=2)
    assert written == [2, 4, 6, 8]


@pytest.mark.parametrize("damage", ["missing", "garbage"])
def test_a_missing_or_garbage_pointer_file_resumes_from_the_newest_checkpoint(
    checkpoints, damage, caplog
):
    pointer = checkpoints / "checkpoint"
    if damage == "missing":
        pointer.unlink()
    else:
        pointer.write_bytes(b"\xff\xfe model_checkpoint_path: garbage {{")
    with caplog.at_level(logging.WARNING):
        model, resumed = fit(checkpoints)
    assert resumed == 6
    assert int(model.optimizer.iterations.numpy()) == 9
    message = "is missing" if damage == "missing" else "cannot be read"
    assert f"The checkpoint pointer file {pointer} {message}" in caplog.text


def test_resuming_with_other_hyperparameters_is_refused_naming_each(checkpoints):
    with pytest.raises(ValueError) as error:
        fit(checkpoints, batch_size=8, learning_rate=0.02, warmup_steps=2, clipnorm=None)
    assert str(error.value) == (
        f"The run in {str(checkpoints)!r} was started with other training hyperparameters "
        f"(see {checkpoints / 'run.json'}): batch_size 4 -> 8, clipnorm 1.0 -> None, "
        "learning_rate 0.01 -> 0.02, warmup_steps None -> 2. A run resumes with the ones it "
        "started with (only epochs and steps_per_epoch may change): pass those, or start a new "
        "run in another `checkpoint_dir`."
    )
    with pytest.raises(ValueError, match=r": weight_decay 0.01 -> 0.0\. A run resumes"):
        fit(checkpoints, weight_decay=0.0)
    # More epochs and steps extend the run.
    model, resumed = fit(checkpoints, epochs=4, steps_per_epoch=4)
    assert resumed == 6 and int(model.optimizer.iterations.numpy()) == 16


def test_data_files_without_index_or_pointer_are_refused_not_overwritten(checkpoints):
    for step in (4, 5, 6):
        (checkpoints / f"ckpt-{step}.index").unlink()
    (checkpoints / "checkpoint").unlink()
    data = sorted(checkpoints.glob("ckpt-*.data-*"))
    before = [path.read_bytes() for path in data]
    with pytest.raises(ValueError) as error:
        fit(checkpoints)
    assert str(error.value).startswith(
        f"The checkpoint directory {str(checkpoints)!r} is damaged: it holds the data files of "
        f"checkpoints ckpt-4, ckpt-5, ckpt-6 but not their .index files nor a readable pointer "
        f"file {checkpoints / 'checkpoint'}. Restore the missing files from a copy"
    )
    assert [path.read_bytes() for path in data] == before


def test_an_empty_pointer_file_resumes_from_the_newest_checkpoint_or_is_an_error(checkpoints):
    (checkpoints / "checkpoint").write_bytes(b"")
    _, resumed = fit(checkpoints)
    assert resumed == 6
    for path in checkpoints.glob("ckpt-*"):
        path.unlink()
    (checkpoints / "checkpoint").write_bytes(b"")
    with pytest.raises(ValueError, match="that is empty or unreadable, and no checkpoint"):
        fit(checkpoints)


@pytest.mark.parametrize("damage", ["truncated", "deleted"])
def test_a_damaged_latest_checkpoint_falls_back_to_the_one_before(checkpoints, damage, caplog):
    data = checkpoints / "ckpt-6.data-00000-of-00001"
    if damage == "truncated":
        with open(data, "r+b") as file:
            file.truncate(data.stat().st_size // 2)
    else:
        data.unlink()
        (checkpoints / "ckpt-6.index").unlink()
    with caplog.at_level(logging.WARNING):
        _, resumed = fit(checkpoints)
    assert resumed == 5
    assert f"Skipping the damaged checkpoint {checkpoints / 'ckpt-6'}" in caplog.text
    assert f"Resuming from {checkpoints / 'ckpt-5'} (step 5)" in caplog.text


def test_resuming_from_the_fallback_gives_the_uninterrupted_weights(checkpoints, tmp_path):
    (checkpoints / "checkpoint").unlink()
    data = checkpoints / "ckpt-6.data-00000-of-00001"
    with open(data, "r+b") as file:
        file.truncate(10)
    resumed, step = fit(checkpoints)
    assert step == 5
    uninterrupted, _ = fit(tmp_path / "uninterrupted")
    for got, expected in zip(resumed.weights, uninterrupted.weights, strict=True):
        np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-5, atol=1e-6)


def test_no_intact_checkpoint_is_an_error_naming_each_file(checkpoints):
    for step in (4, 5, 6):
        with open(checkpoints / f"ckpt-{step}.data-00000-of-00001", "r+b") as file:
            file.truncate(3)
    with pytest.raises(ValueError, match="None of the checkpoints") as error:
        fit(checkpoints)
    for step in (4, 5, 6):
        assert f"{checkpoints / f'ckpt-{step}'} (" in str(error.value)


def test_a_garbage_run_file_is_an_error_naming_it(checkpoints):
    (checkpoints / "run.json").write_text('{"model": "regr')
    with pytest.raises(ValueError, match=f"{checkpoints / 'run.json'} is not valid JSON"):
        fit(checkpoints)


def test_folders_left_by_a_killed_save_are_removed(checkpoints, caplog):
    (checkpoints / "ckpt-7_temp").mkdir()
    (checkpoints / "ckpt-7_temp" / "part-00000-of-00001.data-00000-of-00001").write_bytes(b"x")
    (checkpoints / ".tmp-lmpipe-run.json").write_text("{")
    with caplog.at_level(logging.WARNING):
        _, resumed = fit(checkpoints)
    assert resumed == 6
    assert not (checkpoints / "ckpt-7_temp").exists()
    assert not (checkpoints / ".tmp-lmpipe-run.json").exists()
    assert f"Removing {checkpoints / 'ckpt-7_temp'}" in caplog.text


def test_a_non_finite_loss_stops_training_and_keeps_the_checkpoints_before(tmp_path):
    with pytest.raises(FloatingPointError, match=r"at step 5: the loss is not finite \(loss=nan"):
        fit(tmp_path, epochs=2, checkpoint_every=2, nan_step=5)
    assert tf.train.latest_checkpoint(str(tmp_path)).endswith("ckpt-4")
    assert not (tmp_path / "ckpt-5.index").exists() and not (tmp_path / "ckpt-6.index").exists()
    reader = tf.train.load_checkpoint(str(tmp_path / "ckpt-4"))
    for name, dtype in reader.get_variable_to_dtype_map().items():
        if dtype.is_floating:
            assert np.all(np.isfinite(reader.get_tensor(name))), name


def test_weights_that_are_not_finite_are_never_checkpointed(tmp_path):
    model, _ = fit(tmp_path, epochs=1)
    checkpoint = TrainingCheckpoint(str(tmp_path), model, tf.distribute.get_strategy(), RUN_CONFIG)
    assert checkpoint.restore() == 3
    model.optimizer.iterations.assign(4)
    kernel = model.get_layer("dense").kernel
    kernel.assign(np.full(kernel.shape, np.inf, "float32"))
    with pytest.raises(FloatingPointError, match="After step 4 the weights dense/kernel"):
        checkpoint.save()
    assert tf.train.latest_checkpoint(str(tmp_path)).endswith("ckpt-3")
