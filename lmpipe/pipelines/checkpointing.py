"""Checkpoints that let a killed run continue where it stopped.

A checkpoint holds the model's and the optimizer's variables, the random states of
dropout and the state a model returns from an optional `checkpoint_state()` (a dict of
trackables, e.g. XLNet's memory of every replica); the optimizer's step counter
says how many batches were trained, which is also the data position (the input pipelines are
deterministic, so resuming skips that many batches). `tf.train.CheckpointManager` writes the
files first and then atomically replaces the `checkpoint` index that points at the latest
one, so a crash while writing leaves the previous checkpoint as the latest, intact.

Beside the checkpoints, `run.json` records the model configuration; resuming with another
configuration is an error that says so, not a shape mismatch deep in TensorFlow.
"""

import json
import os
import tempfile

import keras
import tensorflow as tf

from lmpipe.pipelines.distribution import is_chief

RUN_FILE = "run.json"


class TrainingCheckpoint:
    """The checkpoints of one training run in `directory`.

    Args:
        directory: where checkpoints go; workers other than the chief write theirs to a
            temporary directory (they must take part in saving, but only the chief's are kept).
        model: the compiled Keras model; its optimizer is checkpointed with it.
        strategy: the distribution strategy the model was built in.
        run_config: a JSON-serializable dict describing the model; it must match on resume.
        max_to_keep: number of checkpoints kept.
    """

    def __init__(self, directory, model, strategy, run_config, max_to_keep=3):
        self.directory = directory
        self.chief = is_chief(strategy)
        self.model = model
        self.run_config = run_config
        write_directory = directory if self.chief else tempfile.mkdtemp(prefix="lmpipe-worker-")
        # The random states of dropout (Keras seed generators) are not among the model's
        # checkpointed weights; saving them too makes a resumed run draw the same dropout
        # masks as an uninterrupted one.
        random_states = {
            f"state_{index}": variable.value
            for index, variable in enumerate(model.variables)
            if variable.path.endswith("seed_generator_state")
        }
        self.checkpoint = tf.train.Checkpoint(
            model=model, optimizer=model.optimizer, random_states=random_states
        )
        # State a model keeps outside its weights (XLNet's per-replica memory), offered by
        # an optional `checkpoint_state() -> {name: trackable}`.
        model_state = model.checkpoint_state() if hasattr(model, "checkpoint_state") else {}
        if model_state:
            self.checkpoint.model_state = model_state
        self.manager = tf.train.CheckpointManager(
            self.checkpoint, write_directory, max_to_keep=max_to_keep
        )
        self._read_manager = tf.train.CheckpointManager(
            self.checkpoint, directory, max_to_keep=max_to_keep
        )

    @property
    def steps(self):
        """Training steps done so far (the optimizer's iteration counter)."""
        return int(self.model.optimizer.iterations.numpy())

    def restore(self):
        """Restore the latest checkpoint, if there is one; return the steps it had done."""
        run_path = os.path.join(self.directory, RUN_FILE)
        latest = self._read_manager.latest_checkpoint
        if latest is None:
            if self.chief:
                tf.io.gfile.makedirs(self.directory)
                with tf.io.gfile.GFile(run_path, "w") as file:
                    json.dump(self.run_config, file, indent=2, sort_keys=True)
            return 0
        if tf.io.gfile.exists(run_path):
            with tf.io.gfile.GFile(run_path) as file:
                saved = json.load(file)
            if saved != self.run_config:
                differences = sorted(
                    key
                    for key in set(saved) | set(self.run_config)
                    if saved.get(key) != self.run_config.get(key)
                )
                raise ValueError(
                    f"The checkpoints in {self.directory!r} are of another model configuration "
                    f"(differs in: {', '.join(differences)}); use another `checkpoint_dir` or "
                    "the configuration that wrote them."
                )
        try:
            self.checkpoint.restore(latest).assert_existing_objects_matched()
        except (ValueError, AssertionError) as error:
            raise ValueError(
                f"The checkpoint {latest!r} does not fit this model: {error}"
            ) from None
        return self.steps

    def save(self):
        """Write a checkpoint numbered by the current step."""
        self.manager.save(checkpoint_number=self.steps)


class CheckpointCallback(keras.callbacks.Callback):
    """Save a `TrainingCheckpoint` every `every_steps` batches and at the end of each epoch."""

    def __init__(self, training_checkpoint, every_steps=None):
        super().__init__()
        self.training_checkpoint = training_checkpoint
        self.every_steps = every_steps

    def on_train_batch_end(self, batch, logs=None):
        if self.every_steps and self.training_checkpoint.steps % self.every_steps == 0:
            self.training_checkpoint.save()

    def on_epoch_end(self, epoch, logs=None):
        self.training_checkpoint.save()
