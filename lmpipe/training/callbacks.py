"""The Keras callbacks of the training loop: validation at each epoch's end, examples per
second, a mixture's shares, per-step TensorBoard scalars, the stop at a non-finite loss, and a
`History` that joins several `fit` calls. (The checkpoint's own callback is
`lmpipe.training.checkpointing.CheckpointCallback`.)"""

import contextlib
import os
import time
import warnings

import keras
import numpy as np
import tensorflow as tf

from lmpipe.backend import learning_rate_schedule


@contextlib.contextmanager
def one_pass_without_warning():
    """Keras warns "Your input ran out of data" when it evaluates a finite dataset of unknown
    length to its end, which is what a pass over the data is: not a problem to report."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Your input ran out of data")
        yield


class EvaluateEachEpoch(keras.callbacks.Callback):
    """Evaluate on `dataset` at each epoch's end; add its metrics to the logs as `val_<name>`.

    Put before Keras' `History` and progress bar (which come last), so both see the values.
    """

    def __init__(self, dataset):
        super().__init__()
        self.dataset = dataset

    def on_epoch_end(self, epoch, logs=None):
        with one_pass_without_warning():
            results = self.model.evaluate(self.dataset, return_dict=True, verbose=0)
        if logs is not None:
            logs.update({f"val_{name}": float(value) for name, value in results.items()})


class ExamplesPerSecond(keras.callbacks.Callback):
    """Add `examples_per_second` to each epoch's logs (so to the progress bar's epoch line and
    the history): the examples trained in the epoch (`batch_size` a step) over the time from
    the epoch's start to its last step's end, validation not counted."""

    def __init__(self, batch_size):
        super().__init__()
        self.batch_size = batch_size
        self.start = self.end = None
        self.steps = 0

    def on_epoch_begin(self, epoch, logs=None):
        self.start, self.end, self.steps = time.perf_counter(), None, 0

    def on_train_batch_end(self, batch, logs=None):
        self.end = time.perf_counter()
        self.steps += 1

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None and self.steps:
            seconds = max(self.end - self.start, 1e-9)
            logs["examples_per_second"] = self.steps * self.batch_size / seconds


class SourceShares(keras.callbacks.Callback):
    """Add each data source's share of the examples trained so far to each epoch's logs, as
    `share/<source>` (so to the history and TensorBoard's epoch scalars): `shares(n)` gives
    `[(source, share)]` over the first `n` examples, `examples_per_step` examples an update.
    The count is the optimizer's updates, so a resumed run's shares are the whole run's."""

    def __init__(self, shares, examples_per_step):
        super().__init__()
        self.shares = shares
        self.examples_per_step = examples_per_step

    def on_epoch_end(self, epoch, logs=None):
        if logs is None:
            return
        trained = int(self.model.optimizer.iterations.numpy()) * self.examples_per_step
        logs.update({f"share/{name}": share for name, share in self.shares(trained)})


class StepScalars(keras.callbacks.Callback):
    """Write TensorBoard scalars at every step to `<log_dir>/steps`: the step's logs (`loss`
    and the metrics, as Keras reports them: means since the epoch began), `learning_rate`
    (the one the step's update used) and `examples_per_second` (global batch over the
    time since the previous step), keyed by the optimizer's update count, so a resumed run
    goes on where the first one stopped."""

    def __init__(self, log_dir, batch_size):
        super().__init__()
        self.log_dir = os.path.join(log_dir, "steps")
        self.batch_size = batch_size
        self.writer = None
        self.last = None

    def on_train_begin(self, logs=None):
        self.writer = tf.summary.create_file_writer(self.log_dir)
        self.last = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        now = time.perf_counter()
        seconds, self.last = now - self.last, now
        optimizer = self.model.optimizer
        step = int(optimizer.iterations.numpy())
        with self.writer.as_default(step=step):
            for name, value in (logs or {}).items():
                tf.summary.scalar(name, float(value))
            tf.summary.scalar("learning_rate", _learning_rate_of_update(optimizer, step))
            tf.summary.scalar("examples_per_second", self.batch_size / max(seconds, 1e-9))

    def on_train_end(self, logs=None):
        self.writer.flush()
        self.writer.close()


def _learning_rate_of_update(optimizer, step):
    """The learning rate the optimizer's `step`-th update used (its schedule at `step - 1`:
    after the update, `optimizer.learning_rate` is already the next one's)."""
    schedule = learning_rate_schedule(optimizer)
    if schedule is not None:
        return float(schedule(step - 1))
    return float(optimizer.learning_rate)


class StopOnNonFiniteLoss(keras.callbacks.Callback):
    """Stop training with a `FloatingPointError` at the first step whose loss is NaN or
    infinite, naming the step and the losses; put it before the callbacks that checkpoint, so
    that no checkpoint of the weights that step produced is written."""

    def on_train_batch_end(self, batch, logs=None):
        bad = {
            name: value
            for name, value in (logs or {}).items()
            if name.endswith("loss") and not np.all(np.isfinite(value))
        }
        if bad:
            steps = int(self.model.optimizer.iterations.numpy())
            losses = ", ".join(f"{name}={value}" for name, value in sorted(bad.items()))
            raise FloatingPointError(
                f"Training stopped at step {steps}: the loss is not finite ({losses}). The "
                "checkpoints written before are kept; lower the learning rate or clip the "
                "gradients harder."
            )


class History(keras.callbacks.History):
    """A Keras `History` that can concatenate the histories of several `fit` calls."""

    def __init__(self):
        super().__init__()
        self.epoch = []

    def extend(self, other):
        """Append the epochs and values of the `History` `other` (of a later `fit`)."""
        for key, values in other.history.items():
            self.history.setdefault(key, []).extend(values)
        self.epoch.extend(other.epoch)
        self.params = other.params
