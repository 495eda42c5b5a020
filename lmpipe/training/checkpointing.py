"""Checkpoints that let a killed run continue where it stopped.

A checkpoint holds the model's and the optimizer's variables, the random states of
dropout and the state a model returns from an optional `checkpoint_state()` (a dict of
trackables, e.g. XLNet's memory of every replica) and the seekable stream's position (the
first example of the last batch trained, see `lmpipe.training.stream_state`: resuming starts
the stream one batch after it); the optimizer's step counter says how many batches were
trained (for data that is not a stream, the input pipelines are deterministic and resuming
skips that many batches). `tf.train.CheckpointManager` writes the
files first and then atomically replaces the `checkpoint` pointer file that names the latest
one, so a crash while writing leaves the previous checkpoint as the latest, intact.

Resuming survives damage to the directory: a missing or unreadable pointer file, or a latest
checkpoint that is truncated or gone, makes the run continue from the newest checkpoint that
reads back completely, with a warning naming what was damaged; it never starts again from step
0 while checkpoints are there (if none reads back, the error names them), nor while their data
files are there without an index or pointer file to read them by, nor from an empty pointer
file: those directories are damaged, and the error says what to do. Folders left by a
killed save (`ckpt-N_temp`, `.tmp-lmpipe-*`) are removed when the next run starts.

Beside the checkpoints, `run.json` records the model configuration and the training
hyperparameters (batch size, learning rate, warmup, weight decay, clipping, accumulation);
resuming with another configuration is an error that says so, not a shape mismatch deep in
TensorFlow, and resuming with other hyperparameters is an error naming each changed value (the
number of epochs and steps may change: extending a run is legitimate).

Under a multi-worker strategy every worker reads the same directory (it must be on storage all
of them share) and they check, before training, that they resume from the same step.
"""

import json
import logging
import os
import re
import shutil
import tempfile
import uuid

import keras
import tensorflow as tf

from lmpipe.training.distribution import gather_from_replicas, is_chief

RUN_FILE = "run.json"
HYPERPARAMETERS = "training"  # run.json's key for the training hyperparameters
POINTER_FILE = "checkpoint"  # the name `tf.train.CheckpointManager` gives it
CHECKPOINT_NAME = "ckpt"  # checkpoints are `ckpt-<step>.index` and `ckpt-<step>.data-*`
TEMPORARY_PREFIX = ".tmp-lmpipe-"
# How long the workers of a multi-worker run wait for each other to compare the steps they
# resume from (they get there after building the model, which may take one longer).
RESUME_CHECK_TIMEOUT = 600

logger = logging.getLogger(__name__)
_CHECKPOINT_FILE = re.compile(rf"^{CHECKPOINT_NAME}-(\d+)\.index$")
_DATA_FILE = re.compile(rf"^{CHECKPOINT_NAME}-(\d+)\.data-\d+-of-\d+$")
_LEFTOVER = re.compile(rf"^({CHECKPOINT_NAME}-\d+_temp|{re.escape(TEMPORARY_PREFIX)}.*)$")


def write_json_atomically(path, value):
    """Write `value` as JSON to `path` through a temporary file beside it, renamed over `path`:
    a reader (or a run killed meanwhile) finds the whole old file or the whole new one; a
    temporary file a kill leaves is removed as a leftover when the next run starts."""
    folder = os.path.dirname(path)
    tf.io.gfile.makedirs(folder)
    temporary = os.path.join(
        folder, f"{TEMPORARY_PREFIX}{uuid.uuid4().hex[:8]}-{os.path.basename(path)}"
    )
    with tf.io.gfile.GFile(temporary, "w") as file:
        json.dump(value, file, indent=2, sort_keys=True)
    tf.io.gfile.rename(temporary, path, overwrite=True)


class RunCheckpoints:
    """The checkpoints of one run in `directory`: the trackables `tracked`, numbered by the
    run's position (`steps`), with the resuming described above (`run.json`, the newest intact
    checkpoint, leftovers, the workers' agreement). Every family's run is checkpointed by it:
    `TrainingCheckpoint` is it for a Keras model; word2vec's own loop gives its tables.

    Args:
        directory: where checkpoints go; workers other than the chief write theirs to a
            temporary directory (they must take part in saving, but only the chief's are kept;
            `close` removes it).
        tracked: `{name: trackable}`, everything a resumed run restores (variables, a model,
            an optimizer).
        strategy: the distribution strategy the variables were made in.
        run_config: a JSON-serializable dict describing the run; it must match on resume.
        steps: `() -> int`, the run's position now (steps or epochs done), which numbers the
            checkpoints and is what `restore` returns.
        max_to_keep: number of checkpoints kept.
        optional: `{name: trackable}` saved like `tracked`, which a checkpoint written by an
            earlier version of the run may lack: such a checkpoint is restored without them,
            and `lacking` names them (the caller says what stands in for them).
        hyperparameters: a JSON-serializable `{name: value}` of the training
            hyperparameters (batch size, learning rate, ...), kept in `run.json`; a resumed
            run must give the same ones (a run.json without them is not checked).
    """

    def __init__(
        self,
        directory,
        tracked,
        strategy,
        run_config,
        steps,
        max_to_keep=3,
        optional=None,
        hyperparameters=None,
    ):
        self.directory = directory
        self.strategy = strategy
        self.chief = is_chief(strategy)
        self.tracked = dict(tracked)
        self.optional = dict(optional or {})
        self.checkpoint = tf.train.Checkpoint(**self.tracked, **self.optional)
        # The optional names the restored checkpoint did not hold.
        self.lacking = ()
        self.run_config = run_config
        self.hyperparameters = hyperparameters
        self.max_to_keep = max_to_keep
        self._steps = steps
        self._write_directory = (
            directory if self.chief else tempfile.mkdtemp(prefix="lmpipe-worker-")
        )
        self._manager = None  # made by the first save, after `restore`
        self._saved_steps = None

    @property
    def steps(self):
        """The run's position now: the number the next checkpoint gets."""
        return self._steps()

    def restore(self):
        """Restore the newest intact checkpoint, if there is one; return the steps it had done.

        Under a multi-worker strategy every worker must call this (the workers compare the
        steps they restored).

        Raises:
            ValueError: when the checkpoints are of another run configuration, when
                `run.json` cannot be read, when no checkpoint reads back completely, or when
                the workers of a multi-worker run restored different steps.
        """
        if self.chief:
            self._remove_leftovers()
        candidates = self._candidates()
        if candidates:
            self._check_run_config()
            self._restore_newest_intact(candidates)
            steps = self.steps
        else:
            if self.chief:
                self._write_run_config()
            steps = 0
        self._check_workers_agree(steps)
        self._saved_steps = steps
        return steps

    def save(self):
        """Write a checkpoint numbered by the current step, unless there is one of this step
        already (an epoch end that is also a `checkpoint_every` step is saved once)."""
        steps = self.steps
        if steps == self._saved_steps:
            return
        if self._manager is None:
            self._manager = tf.train.CheckpointManager(
                self.checkpoint,
                self._write_directory,
                max_to_keep=self.max_to_keep,
                checkpoint_name=CHECKPOINT_NAME,
            )
        self._manager.save(checkpoint_number=steps)
        self._saved_steps = steps

    def close(self):
        """Remove a worker's temporary checkpoints (the chief's directory stays)."""
        if not self.chief:
            shutil.rmtree(self._write_directory, ignore_errors=True)

    # Resuming ---------------------------------------------------------------------------------

    def _pointer_path(self):
        return os.path.join(self.directory, POINTER_FILE)

    def _candidates(self):
        """`[(step, prefix)]` of the checkpoints on disk or named by the pointer file, newest
        first; warns when the pointer file is missing or unreadable while checkpoints exist.

        Raises:
            ValueError: when checkpoint data files are there but no index file and no pointer
                file that reads back names a checkpoint (resuming from step 0 would overwrite
                them), or when the pointer file is unreadable or empty and no checkpoint is
                there.
        """
        steps, data_steps = set(), set()
        if tf.io.gfile.isdir(self.directory):
            for name in tf.io.gfile.listdir(self.directory):
                match = _CHECKPOINT_FILE.match(name)
                if match:
                    steps.add(int(match.group(1)))
                match = _DATA_FILE.match(name)
                if match:
                    data_steps.add(int(match.group(1)))
        pointer = self._pointer_path()
        state = None
        if tf.io.gfile.exists(pointer):
            try:
                state = tf.train.get_checkpoint_state(self.directory)
            except (UnicodeDecodeError, ValueError):
                # TensorFlow raises ValueError for an empty file, returns None for other garbage
                state = None
        if state is None:
            if not steps and (data_steps or tf.io.gfile.exists(pointer)):
                self._refuse_damaged(pointer, data_steps)
            if tf.io.gfile.exists(pointer):
                logger.warning(
                    "The checkpoint pointer file %s cannot be read; it is ignored, and the "
                    "run resumes from the newest intact checkpoint file in the directory, if "
                    "any (the next save writes a new pointer file).",
                    pointer,
                )
                if self.chief:
                    # The checkpoint manager would stumble on it again.
                    tf.io.gfile.remove(pointer)
            elif steps:
                logger.warning(
                    "The checkpoint pointer file %s is missing; resuming from the newest intact "
                    "checkpoint in the directory instead.",
                    pointer,
                )
        else:
            for path in [*state.all_model_checkpoint_paths, state.model_checkpoint_path]:
                match = re.match(rf"^{CHECKPOINT_NAME}-(\d+)$", os.path.basename(path))
                if match:
                    steps.add(int(match.group(1)))
        without_index = sorted(data_steps - steps)
        if steps and without_index and without_index[-1] > max(steps):
            logger.warning(
                "The checkpoint data of step %s in %s has no index file: it is skipped as damaged.",
                ", ".join(str(step) for step in without_index),
                self.directory,
            )
        return [
            (step, os.path.join(self.directory, f"{CHECKPOINT_NAME}-{step}"))
            for step in sorted(steps, reverse=True)
        ]

    def _refuse_damaged(self, pointer, data_steps):
        """Raise for a directory whose checkpoints cannot be found although it holds their
        data files or a pointer file: starting from step 0 would overwrite them."""
        if data_steps:
            held = ", ".join(f"{CHECKPOINT_NAME}-{step}" for step in sorted(data_steps))
            problem = (
                f"holds the data files of checkpoints {held} but not their .index files nor a "
                f"readable pointer file {pointer}"
            )
        else:
            problem = f"has a pointer file {pointer} that is empty or unreadable, and no checkpoint"
        raise ValueError(
            f"The checkpoint directory {self.directory!r} is damaged: it {problem}. Restore the "
            "missing files from a copy, or, to train from the start, remove the checkpoint files "
            "and the pointer file (or use another `checkpoint_dir`)."
        )

    def _restore_newest_intact(self, candidates):
        """Restore the newest of `candidates` that reads back completely; return its prefix."""
        damaged = []
        for _, prefix in candidates:
            try:
                self._restore_from(prefix)
            except (ValueError, AssertionError, IndexError, tf.errors.OpError) as error:
                # A mismatch with the model, or damaged files: reading the files alone tells.
                reason = _unreadable(prefix)
                if reason is None:
                    raise ValueError(
                        f"The checkpoint {prefix!r} does not fit this model: {error}"
                    ) from None
                logger.warning("Skipping the damaged checkpoint %s: %s", prefix, reason)
                damaged.append(f"{prefix} ({reason})")
                continue
            if damaged:
                logger.warning(
                    "Resuming from %s (step %d), the newest intact checkpoint.",
                    prefix,
                    self.steps,
                )
            return prefix
        raise ValueError(
            f"None of the checkpoints in {self.directory!r} reads back completely: "
            f"{'; '.join(damaged)}. Restore them from a copy, or remove them and the pointer "
            f"file {self._pointer_path()} to train from the start."
        )

    def _restore_from(self, prefix):
        """Restore the checkpoint `prefix`; raise if it does not fit what is tracked."""
        checkpoint, lacking = self.checkpoint, ()
        if self.optional:
            held = {name.split("/")[0] for name, _ in tf.train.list_variables(prefix)}
            lacking = tuple(sorted(set(self.optional) - held))
            if lacking:
                present = {name: self.optional[name] for name in self.optional if name in held}
                checkpoint = tf.train.Checkpoint(**self.tracked, **present)
        checkpoint.restore(prefix).assert_existing_objects_matched()
        self.lacking = lacking

    def _remove_leftovers(self):
        """Remove the folders and files a killed run left half-written."""
        if not tf.io.gfile.isdir(self.directory):
            return
        for name in tf.io.gfile.listdir(self.directory):
            name = name.rstrip("/")
            if not _LEFTOVER.match(name):
                continue
            path = os.path.join(self.directory, name)
            logger.warning("Removing %s, left by an interrupted run.", path)
            if tf.io.gfile.isdir(path):
                tf.io.gfile.rmtree(path)
            else:
                tf.io.gfile.remove(path)

    def _run_path(self):
        return os.path.join(self.directory, RUN_FILE)

    def _write_run_config(self):
        record = dict(self.run_config)
        if self.hyperparameters is not None:
            record[HYPERPARAMETERS] = self.hyperparameters
        write_json_atomically(self._run_path(), record)

    def _check_run_config(self):
        run_path = self._run_path()
        if not tf.io.gfile.exists(run_path):
            return
        with tf.io.gfile.GFile(run_path) as file:
            text = file.read()
        try:
            saved = json.loads(text)
        except json.JSONDecodeError as error:
            raise ValueError(
                f"{run_path} is not valid JSON ({error}): it records the model configuration "
                "of the checkpoints beside it. Restore it from a copy, or remove it to resume "
                "without the configuration check."
            ) from None
        if not isinstance(saved, dict):
            raise ValueError(f"{run_path} must hold a JSON object, got {text[:80]!r}.")
        saved_hyperparameters = saved.pop(HYPERPARAMETERS, None)
        # Compared as JSON reads it back: tuples are lists there.
        current = json.loads(json.dumps(self.run_config))
        if saved != current:
            differences = sorted(
                key for key in set(saved) | set(current) if saved.get(key) != current.get(key)
            )
            raise ValueError(
                f"The checkpoints in {self.directory!r} are of another model configuration "
                f"(differs in: {', '.join(differences)}, see {run_path}); use another "
                "`checkpoint_dir` or the configuration that wrote them."
            )
        if saved_hyperparameters is not None and self.hyperparameters is not None:
            self._check_hyperparameters(saved_hyperparameters, run_path)

    def _check_hyperparameters(self, saved, run_path):
        current = json.loads(json.dumps(self.hyperparameters))
        changed = [
            f"{name} {saved.get(name)!r} -> {current.get(name)!r}"
            for name in sorted(set(saved) | set(current))
            if saved.get(name) != current.get(name)
        ]
        if changed:
            raise ValueError(
                f"The run in {self.directory!r} was started with other training "
                f"hyperparameters (see {run_path}): {', '.join(changed)}. A run resumes with "
                "the ones it started with (only epochs and steps_per_epoch may change): pass "
                "those, or start a new run in another `checkpoint_dir`."
            )

    def _check_workers_agree(self, steps):
        """Stop every worker of a multi-worker run when they restored different steps (their
        checkpoint directories are not the same shared storage)."""
        try:
            restored = gather_from_replicas(self.strategy, steps, RESUME_CHECK_TIMEOUT)
        except TimeoutError as error:
            raise TimeoutError(
                f"{error} (comparing the step each worker resumes from; this worker restored "
                f"step {steps} from {self.directory!r})."
            ) from None
        if len(set(restored)) > 1:
            others = sorted(set(restored) - {steps})
            raise ValueError(
                f"The workers resume from different steps: this one from step {steps} (read "
                f"from {self.directory!r}), others from step "
                f"{', '.join(str(step) for step in others)}. Every worker must read the same "
                "checkpoint directory: put `checkpoint_dir` on storage that all workers share, "
                "at the same path on each."
            )


class TrainingCheckpoint(RunCheckpoints):
    """The checkpoints of a Keras model's training run in `directory` (see `RunCheckpoints`):
    the model's and the optimizer's variables, the random states of dropout and the model's
    `checkpoint_state()`, numbered by the optimizer's step counter.

    Args:
        directory: where checkpoints go (see `RunCheckpoints`).
        model: the compiled Keras model; its optimizer is checkpointed with it.
        strategy: the distribution strategy the model was built in.
        run_config: a JSON-serializable dict describing the model; it must match on resume.
        max_to_keep: number of checkpoints kept.
        hyperparameters: the training hyperparameters, which must match on resume (see
            `RunCheckpoints`).
        stream_state: `{name: {name: variable}}`, the seekable stream's position and the
            replicas that trained it (`StreamState.checkpointed`, see
            `lmpipe.training.stream_state`), or None. A checkpoint written before lmpipe kept
            an entry restores without it (`lacking` names it).
    """

    def __init__(
        self,
        directory,
        model,
        strategy,
        run_config,
        max_to_keep=3,
        hyperparameters=None,
        stream_state=None,
    ):
        self.model = model
        # The random states of dropout (Keras seed generators) are not among the model's
        # checkpointed weights; saving them too makes a resumed run draw the same dropout
        # masks as an uninterrupted one.
        random_states = {
            f"state_{index}": variable.value
            for index, variable in enumerate(model.variables)
            if variable.path.endswith("seed_generator_state")
        }
        tracked = {"model": model, "optimizer": model.optimizer, "random_states": random_states}
        # State a model keeps outside its weights (XLNet's per-replica memory), offered by
        # an optional `checkpoint_state() -> {name: trackable}`.
        model_state = model.checkpoint_state() if hasattr(model, "checkpoint_state") else {}
        if model_state:
            tracked["model_state"] = model_state
        super().__init__(
            directory,
            tracked,
            strategy,
            run_config,
            steps=lambda: int(model.optimizer.iterations.numpy()),
            max_to_keep=max_to_keep,
            hyperparameters=hyperparameters,
            optional=stream_state,
        )

    def save(self):
        """Write a checkpoint numbered by the current step (see `RunCheckpoints.save`).

        Raises:
            FloatingPointError: when a weight is NaN or infinite (the checkpoints written
                before are kept, and none of these weights).
        """
        steps = self.steps
        if steps == self._saved_steps:
            return
        variables = self.model.trainable_variables
        finite = tf.stack([tf.reduce_all(tf.math.is_finite(v.value)) for v in variables])
        bad = [
            variable.path for variable, ok in zip(variables, finite.numpy(), strict=True) if not ok
        ]
        if bad:
            raise FloatingPointError(
                f"After step {steps} the weights {', '.join(bad[:5])}"
                f"{' and others' if len(bad) > 5 else ''} are not finite; training stopped "
                f"without checkpointing them (the checkpoints in {self.directory!r} are "
                "kept). Lower the learning rate or clip the gradients harder."
            )
        super().save()


def _unreadable(prefix):
    """Why the checkpoint `prefix` does not read back (every tensor is read, which checks the
    files' lengths and checksums), or None when it does."""
    try:
        reader = tf.train.load_checkpoint(prefix)
        for name in reader.get_variable_to_shape_map():
            reader.get_tensor(name)
    except (tf.errors.OpError, IndexError, ValueError) as error:
        message = getattr(error, "message", None) or str(error)
        return message.splitlines()[0] if message else type(error).__name__
    return None


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
