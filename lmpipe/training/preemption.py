"""Preemption: SIGTERM checkpoints the run at the next step and ends it with a restart code.

Cluster schedulers and preemptible machines send SIGTERM, then SIGKILL after a grace period.
While `fit` trains with a `checkpoint_dir`, SIGTERM no longer ends the process at once: the
step under way finishes, one more step runs (the step every worker agrees to stop at), the
checkpoint of that step is written, and `fit` raises `Preempted`, a `SystemExit` with code
`PREEMPTED_EXIT_CODE` (42): a script that does not catch it exits with that code, which
tells the scheduler "preempted, restart me". Started again, the run resumes from that
checkpoint (see `lmpipe.training.checkpointing`) and ends with the weights of an
uninterrupted run.

The agreement is TensorFlow's `PreemptionCheckpointHandler`: under
MultiWorkerMirroredStrategy the worker that got the signal publishes, through the cluster's
coordination service, the step to stop at, and waits until every worker has acknowledged it;
so one signalled worker (or all of them) stops the whole cluster at the same step, and every
worker takes part in writing the checkpoint (the chief's is kept). lmpipe gives the handler its
own save (the run's checkpoints, numbered by step) and exit (raising `Preempted`); the
handler's own checkpoint, which holds only its step counter, goes to a scratch folder that is
removed when `fit` returns.

SIGTERM's previous handler is put back when `fit` returns or raises. Outside the main thread
(where Python cannot install signal handlers) and without `checkpoint_dir`, SIGTERM keeps its
usual effect.
"""

import contextlib
import shutil
import signal
import sys
import tempfile
import threading

import keras
import tensorflow as tf

PREEMPTED_EXIT_CODE = 42


class Preempted(SystemExit):
    """Training stopped on SIGTERM after checkpointing step `step` in `directory`; its exit
    code (`code`) is `PREEMPTED_EXIT_CODE`."""

    def __init__(self, step, directory):
        super().__init__(PREEMPTED_EXIT_CODE)
        self.step = step
        self.directory = directory

    def __str__(self):
        return (
            f"Preempted (SIGTERM): the checkpoint of step {self.step} is in "
            f"{self.directory!r}; start the same run again to continue from it (exit code "
            f"{PREEMPTED_EXIT_CODE})."
        )


class _SaveIfPreempted(keras.callbacks.Callback):
    """Asks the handler after every step whether to checkpoint and stop."""

    def __init__(self, handler):
        super().__init__()
        self.handler = handler

    def on_train_batch_end(self, batch, logs=None):
        self.handler.save_checkpoint_if_preempted()


@contextlib.contextmanager
def checkpoint_on_preemption(checkpoint, strategy):
    """Inside: SIGTERM makes training checkpoint `checkpoint` (a `TrainingCheckpoint`) at a
    step every worker agrees on and raise `Preempted`. Yields the Keras callback that checks
    after each step, or None where SIGTERM cannot be handled (no checkpoint, not the main
    thread)."""
    if checkpoint is None or threading.current_thread() is not threading.main_thread():
        yield None
        return
    previous = signal.getsignal(signal.SIGTERM)
    scratch = tempfile.mkdtemp(prefix="lmpipe-preemption-")

    def save():
        checkpoint.save()

    def stop():
        preempted = Preempted(checkpoint.steps, checkpoint.directory)
        print(str(preempted), file=sys.stderr, flush=True)
        raise preempted

    # The handler restores its own step counter from `scratch` (empty: it counts from this
    # run's start, on every worker alike) and installs its SIGTERM handler.
    handler = tf.distribute.experimental.PreemptionCheckpointHandler(
        _cluster_resolver(strategy),
        tf.train.CheckpointManager(tf.train.Checkpoint(), scratch, max_to_keep=1),
        termination_config=tf.distribute.experimental.TerminationConfig(exit_fn=stop, save_fn=save),
    )
    try:
        yield _SaveIfPreempted(handler)
    finally:
        signal.signal(signal.SIGTERM, previous)
        shutil.rmtree(scratch, ignore_errors=True)


def _cluster_resolver(strategy):
    """The cluster of a multi-worker strategy; None (one process) for the others."""
    if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return strategy.cluster_resolver
    return None
