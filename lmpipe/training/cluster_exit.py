"""Leaving a multi-worker cluster together, so that no worker sees another one vanish.

`MultiWorkerMirroredStrategy` runs TensorFlow's coordination service in the chief's process.
Every worker's agent sends it a heartbeat every 5 s, and the service takes a worker silent for
10 s for crashed: it reports "The tasks have crashed" (a `CoordinationServiceError`) to the
workers still there and aborts their collective ops. A worker that exits falls silent the
same way (TensorFlow has no public call that disconnects its agent), so after training, while
the chief goes on alone (saving, evaluating and exporting can take minutes), the other workers
must not exit; and the chief, whose process hosts the service, must not exit before them, or
their next heartbeat finds no service.

`leave_together` orders the end of a run:

1. every worker waits in one collective all-gather until all are done with their own work
   after training (the chief with its evaluation and export), learning whether each succeeded;
2. the workers other than the chief return at once, and exit;
3. the chief waits until their servers (the addresses of the cluster, `TF_CONFIG`'s) have
   closed, and returns. An exiting worker's agent heartbeats until its process is gone, so
   the service, which leaves with the chief within seconds, never finds it silent for long.
"""

import socket
import time

import tensorflow as tf

from lmpipe.training.distribution import gather_from_replicas, is_chief

CLOSE_TIMEOUT = 30.0
"""Seconds the chief waits at most for the other workers' processes to end (a few, on a busy
machine: TensorFlow's teardown)."""


class ClusterExitError(RuntimeError):
    """Another worker failed after training, or the cluster ended before all could meet."""


def leave_together(strategy, failed=False, close_timeout=CLOSE_TIMEOUT):
    """Meet the other workers of `strategy` once this one is done, then leave in order (see
    the module docstring); nothing for another strategy.

    Every worker that finished training must call it, after its own work (`failed`: whether
    that work raised), and not before: it waits for all of them, with no time limit (a worker
    that ends meanwhile ends the wait with an error).

    Raises:
        ClusterExitError: on a worker whose own work succeeded, when another worker's failed,
            or the cluster ended before all met (a worker exited or crashed).
    """
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return
    try:
        outcomes = gather_from_replicas(strategy, int(bool(failed)), timeout_seconds=None)
    except (tf.errors.OpError, TimeoutError) as error:
        message = str(error).strip().splitlines()[-1] if str(error).strip() else error
        raise ClusterExitError(
            f"the cluster ended before its workers could leave together: {message}"
        ) from None
    if is_chief(strategy):
        _wait_until_closed(_other_addresses(strategy), close_timeout)
    if any(outcomes) and not failed:
        raise ClusterExitError(
            "another worker of the cluster failed after training (its output says why)"
        )


def _other_addresses(strategy):
    """`host:port` of every task of the cluster but this one."""
    resolver = strategy.cluster_resolver
    own = (resolver.task_type, resolver.task_id)
    return [
        address
        for job, addresses in resolver.cluster_spec().as_dict().items()
        for index, address in (
            addresses.items() if isinstance(addresses, dict) else enumerate(addresses)
        )
        if (job, index) != own
    ]


def _wait_until_closed(addresses, timeout):
    """Return once nothing listens at any of `addresses` (`host:port`), or after `timeout`
    seconds."""
    deadline = time.monotonic() + timeout
    waiting = list(addresses)
    while waiting and time.monotonic() < deadline:
        waiting = [address for address in waiting if _listening(address)]
        if waiting:
            time.sleep(0.05)


def _listening(address):
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=0.5):
            return True
    except OSError:
        return False
