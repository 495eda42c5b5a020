"""Keep the best epoch on validation, and stop when validation stops improving.

`KeepBest` watches one validation metric (`val_loss`, `val_accuracy`, ...) at every epoch's
end. It keeps a copy of the weights of the best epoch so far and puts them back in the model
when training ends, so the model a run leaves is the one that did best on validation, not the
last one. With `patience`, training stops after that many epochs without a gain (early
stopping).

With a checkpoint directory the state survives a restart: `<checkpoint_dir>/best/` holds the
best weights (`model.weights.h5`) and `state.json` (the metric, its best value and epoch, the
epochs since, and whether training stopped), each written to a temporary file and renamed, so a
crash leaves the previous one. A run restarted after it stopped early does not train again; a
run restarted mid-way goes on counting patience where it was. Under a multi-worker strategy
only the chief writes (every worker computes the same validation metrics, so they all keep the
same weights).
"""

import json
import math
import os

import keras

BEST_DIRECTORY = "best"
STATE_FILE = "state.json"
WEIGHTS_FILE = "model.weights.h5"
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

    # State ------------------------------------------------------------------------------------

    def load(self):
        """Read the state a previous run of the same directory left (nothing if none)."""
        if self.directory is None:
            return
        path = os.path.join(self.directory, STATE_FILE)
        if not os.path.exists(path):
            return
        try:
            with open(path, encoding="utf-8") as file:
                state = json.load(file)
            self.best, self.best_epoch = float(state["best"]), int(state["best_epoch"])
            self.wait, self.stopped = int(state["wait"]), bool(state["stopped"])
            previous = state["monitor"]
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise ValueError(f"{path} cannot be read ({error}); delete it to start over.") from None
        if previous != self.monitor:
            raise ValueError(
                f"{path} kept the best epoch by {previous}, this run asks for {self.monitor}: "
                "use the same monitor to resume, or another checkpoint directory."
            )

    def _write_state(self):
        state = {
            "monitor": self.monitor,
            "best": self.best,
            "best_epoch": self.best_epoch,
            "wait": self.wait,
            "stopped": self.stopped,
        }
        _write_atomically(
            os.path.join(self.directory, STATE_FILE),
            lambda path: _write_json(path, state),
        )

    def restore_best(self, model):
        """Put the best epoch's weights into `model` (nothing when there was no epoch)."""
        if self._weights is not None:
            model.set_weights(self._weights)
        elif self.directory is not None and self.best_epoch is not None:
            path = os.path.join(self.directory, WEIGHTS_FILE)
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
                _write_atomically(
                    os.path.join(self.directory, WEIGHTS_FILE), self.model.save_weights
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
            self._write_state()


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
