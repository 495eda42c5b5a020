"""The end of a multi-worker command: its workers leave the cluster together.

After training, the chief saves, evaluates and exports alone while the other workers have
nothing left to do; if they exited then, the coordination service in the chief's process
would take them for crashed ("The tasks have crashed", a `CoordinationServiceError`) while
it works. `leaving_together` wraps a command: once it trained (`finished_training`), every
worker meets the others when its own work is done and leaves with them
(`lmpipe.training.cluster_exit`). Standard library only at import: the command imports it
before TensorFlow.
"""

import contextlib

_trained = []
"""The strategy this process finished training under, while a command runs."""


def finished_training(strategy):
    """Say that this process's `fit` under `strategy` returned: the command then leaves the
    cluster with the other workers (nothing happens for a strategy of one process)."""
    _trained[:] = [strategy]


@contextlib.contextmanager
def leaving_together():
    """Run a command; if it finished training under a multi-worker strategy, meet the other
    workers when it ends (after the chief's evaluation and export), successful or not, and
    leave with them. On a worker whose own work succeeded, another worker's failure after
    training, or the cluster ending before all met, is a `SystemExit` saying so."""
    _trained.clear()
    failed = True
    try:
        yield
        failed = False
    finally:
        if _trained:
            from lmpipe.training.cluster_exit import ClusterExitError, leave_together

            strategy = _trained.pop()
            try:
                leave_together(strategy, failed=failed)
            except ClusterExitError as error:
                if not failed:  # else this worker's own error is the one to show
                    raise SystemExit(f"error: {error}") from None
