"""Keep the best epoch on validation, and stop when validation stops improving.

`KeepBest` watches one validation metric (`val_loss`, `val_accuracy`, ...) at every epoch's
end. It keeps a copy of the weights of the best epoch so far and puts them back in the model
when training ends, so the model a run leaves is the one that did best on validation, not the
last one. With `patience`, training stops after that many epochs without a gain (early
stopping).

With a checkpoint directory the state survives a restart: `<checkpoint_dir>/best/` holds the
best weights (`epoch-<N>.weights.h5`, N the best epoch, 1-based) and `state.json`: the metric
and, for each of the last epochs, the training step its end is checkpointed at, the best value
and epoch, the epochs since, and whether training stopped. Each file is written to a temporary
file and renamed, so a crash leaves the previous one. The state is written before the epoch's
checkpoint; a run killed between the two resumes from an earlier checkpoint and reads the
state of that checkpoint's step (`load(steps)`), with the best weights that state names, so it
keeps the same epoch as a run never killed. A run restarted after it stopped early does not
train again; a run restarted mid-way goes on counting patience where it was. Under a
multi-worker strategy only the chief writes (every worker computes the same validation
metrics, so they all keep the same weights).
"""

import json
import math
import os

import keras

BEST_DIRECTORY = "best"
STATE_FILE = "state.json"
# The weights file of a state.json written before the state named its step.
LEGACY_WEIGHTS_FILE = "model.weights.h5"
# Epochs whose state is kept: enough for any of the checkpoints a run keeps (3, at least one
# an epoch) and the one being written.
KEPT_EPOCHS = 4
_STATE_FIELDS = ("best", "best_epoch", "wait", "stopped")
# Metrics where lower is better; any other is better higher (accuracy, F1, exact match...).
_LOWER_IS_BETTER = ("loss", "perplexity", "error")


def lower_is_better(monitor):
    """Whether a lower value of the metric `monitor` is better (losses, perplexities)."""
    return any(word in monitor for word in _LOWER_IS_BETTER)


class KeepBest(keras.callbacks.Callback):
    """Keep the weights of the epoch with the best `monitor`; optionally stop early.

    Put after the callback that adds the validation metrics to the epoch's logs.

    Args:
        monitor: the name of a metric in the epoch logs, e.g. `"val_loss"`; lower is better
            for losses and perplexities, higher for the others.
        patience: stop after this many epochs in a row without a gain; None: never stop.
        directory: where the state and the best weights are kept across restarts (the run's
            checkpoint directory); None: in memory only.
        chief: whether this process writes the files (False on other workers).
        verbose: print a line when training stops early or the best epoch is restored.
    """

    def __init__(self, monitor="val_loss", patience=None, directory=None, chief=True, verbose=1):
        super().__init__()
        if not isinstance(monitor, str) or not monitor.startswith("val_"):
            raise ValueError(
                f"`monitor` must name a validation metric (val_loss, val_accuracy, ...), got "
                f"{monitor!r}."
            )
        if patience is not None and (
            isinstance(patience, bool) or not isinstance(patience, int) or patience < 1
        ):
            raise ValueError(f"`patience` must be a positive integer or None, got {patience!r}.")
        self.monitor = monitor
        self.patience = patience
        self.lower = lower_is_better(monitor)
        self.directory = None if directory is None else os.path.join(directory, BEST_DIRECTORY)
        self.chief = chief
        self.verbose = verbose
        self.best = None  # the best value so far
        self.best_epoch = None  # 0-based
        self.wait = 0
        self.stopped = False
        self._weights = None  # in-memory copy of the best weights
        self._weights_file = None  # the best weights' file in `directory`
        self._entries = []  # the state after each of the last epochs, as state.json keeps it

    # State ------------------------------------------------------------------------------------

    def load(self, steps=None):
        """Read the state a previous run of the same directory left (nothing if none): that of
        the last epoch whose end is at most `steps` training steps in (the step the run
        resumes from; None: the last epoch's). An epoch whose state was written but whose
        checkpoint was not is trained again, so its state is dropped."""
        if self.directory is None:
            return
        path = os.path.join(self.directory, STATE_FILE)
        if not os.path.exists(path):
            return
        try:
            with open(path, encoding="utf-8") as file:
                state = json.load(file)
            previous = state["monitor"]
            entries = state["epochs"] if "epochs" in state else [_legacy_entry(state)]
            entries = [_read_entry(entry) for entry in entries]
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
            raise ValueError(f"{path} cannot be read ({error}); delete it to start over.") from None
        if previous != self.monitor:
            raise ValueError(
                f"{path} kept the best epoch by {previous}, this run asks for {self.monitor}: "
                "use the same monitor to resume, or another checkpoint directory."
            )
        if steps is not None:
            entries = [
                entry for entry in entries if entry["step"] is None or entry["step"] <= steps
            ]
        self._entries = entries
        if entries:
            latest = entries[-1]
            self.best, self.best_epoch = latest["best"], latest["best_epoch"]
            self.wait, self.stopped = latest["wait"], latest["stopped"]
            self._weights_file = latest["weights_file"]

    def _write_state(self, epoch):
        step = getattr(self.model, "optimizer", None)
        step = None if step is None else int(step.iterations.numpy())
        entry = {"epoch": epoch, "step": step, "weights_file": self._weights_file}
        entry.update({field: getattr(self, field) for field in _STATE_FIELDS})
        self._entries = [*self._entries, entry][-KEPT_EPOCHS:]
        state = {"monitor": self.monitor, "epochs": self._entries}
        _write_atomically(
            os.path.join(self.directory, STATE_FILE),
            lambda path: _write_json(path, state),
        )
        # Only after the state no longer names them: the best weights of epochs no kept
        # state refers to.
        kept = {entry["weights_file"] for entry in self._entries}
        for name in os.listdir(self.directory):
            if name.endswith(".weights.h5") and name not in kept:
                os.remove(os.path.join(self.directory, name))

    def restore_best(self, model):
        """Put the best epoch's weights into `model` (nothing when there was no epoch)."""
        if self._weights is not None:
            model.set_weights(self._weights)
        elif self.directory is not None and self.best_epoch is not None:
            path = os.path.join(self.directory, self._weights_file)
            if not os.path.exists(path):
                raise ValueError(
                    f"{path} is missing: the best epoch's weights that {STATE_FILE} names are "
                    "gone; delete the best/ folder to start over."
                )
            model.load_weights(path)
        else:
            return
        if self.verbose:
            epoch = self.best_epoch + 1
            print(f"Kept the weights of epoch {epoch}: {self.monitor} {self.best:.4f}")

    # Callback ---------------------------------------------------------------------------------

    def on_train_begin(self, logs=None):
        # The validation metrics are the model's (evaluated on the validation data): a
        # monitor that is none of them is refused now, not after the first epoch's training.
        names = [metric.name for metric in self.model.metrics]
        if names and "compile_metrics" not in names and self.monitor[4:] not in names:
            listed = ", ".join(f"val_{name}" for name in names)
            raise ValueError(
                f"`monitor`={self.monitor!r} is not among the validation metrics of this model "
                f"({listed})."
            )

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        if self.monitor not in logs:
            names = ", ".join(sorted(name for name in logs if name.startswith("val_")))
            raise ValueError(
                f"`monitor`={self.monitor!r} is not among the validation metrics "
                f"({names or 'none: give validation data'})."
            )
        value = float(logs[self.monitor])
        if math.isnan(value):
            raise FloatingPointError(f"{self.monitor} is NaN at epoch {epoch + 1}.")
        improved = self.best is None or (value < self.best if self.lower else value > self.best)
        if improved:
            self.best, self.best_epoch, self.wait = value, epoch, 0
            self._weights = self.model.get_weights()
            if self.directory is not None and self.chief:
                self._weights_file = weights_file(epoch)
                _write_atomically(
                    os.path.join(self.directory, self._weights_file), self.model.save_weights
                )
        else:
            self.wait += 1
            if self.patience is not None and self.wait >= self.patience:
                self.stopped = True
                self.model.stop_training = True
                if self.verbose:
                    print(
                        f"Stopped early after epoch {epoch + 1}: no gain in {self.monitor} for "
                        f"{self.wait} epoch{'s' if self.wait > 1 else ''} (best {self.best:.4f}"
                        f", epoch {self.best_epoch + 1})."
                    )
        if self.directory is not None and self.chief:
            self._write_state(epoch)


def weights_file(epoch):
    """The name of the best weights' file when `epoch` (0-based) is the best."""
    return f"epoch-{epoch + 1}.weights.h5"


def _legacy_entry(state):
    """An entry of the state of a state.json that kept one epoch's state and no step."""
    entry = {field: state[field] for field in _STATE_FIELDS}
    return {"epoch": None, "step": None, "weights_file": LEGACY_WEIGHTS_FILE, **entry}


def _read_entry(entry):
    """One epoch's state from state.json, with the types checked (ValueError, TypeError)."""
    step = entry["step"]
    weights = entry["weights_file"]
    if not isinstance(weights, str) or os.path.basename(weights) != weights:
        raise ValueError(f"`weights` must be a file name in best/, got {weights!r}")
    return {
        "epoch": entry["epoch"],
        "step": None if step is None else int(step),
        "weights_file": weights,
        "best": float(entry["best"]),
        "best_epoch": int(entry["best_epoch"]),
        "wait": int(entry["wait"]),
        "stopped": bool(entry["stopped"]),
    }


def _write_json(path, value):
    with open(path, "w", encoding="utf-8") as file:
        json.dump(value, file, indent=1)


def _write_atomically(path, write):
    """`write(temporary path)`, then rename it to `path` (a crash leaves the old file)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    directory, name = os.path.split(path)
    stem, extension = os.path.splitext(name)
    # Keras insists on the ".weights.h5" ending for weight files.
    temporary = os.path.join(directory, f".tmp-{stem}{extension}")
    if name.endswith(".weights.h5"):
        temporary = os.path.join(directory, f"tmp-{name}")
    write(temporary)
    os.replace(temporary, path)
