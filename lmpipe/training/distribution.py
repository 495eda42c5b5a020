"""Distribution strategies by name, and per-replica datasets."""

import json
import logging
import os
import subprocess
import sys

import tensorflow as tf

from lmpipe.arguments import check_positive_int

STRATEGY_NAMES = (None, "default", "mirrored", "multi_worker")
# Seconds a multi-worker strategy waits for every task of the cluster to start.
CLUSTER_TIMEOUT = 600
_CLUSTER_NOTICE_AFTER = 30  # seconds before saying what it waits for

logger = logging.getLogger(__name__)


def check_tf_config():
    """Parse TF_CONFIG and raise a ValueError that says what is wrong with it."""
    raw = os.environ.get("TF_CONFIG")
    if raw is None:
        return None
    try:
        config = json.loads(raw)
    except json.JSONDecodeError as error:
        raise ValueError(f"TF_CONFIG is not valid JSON ({error}): {raw!r}") from None
    if not isinstance(config, dict):
        raise ValueError(f"TF_CONFIG must be a JSON object, got {raw!r}.")
    cluster, task = config.get("cluster"), config.get("task")
    if not isinstance(cluster, dict) or not cluster:
        raise ValueError(f"TF_CONFIG needs a non-empty 'cluster' object, got {raw!r}.")
    for job, addresses in cluster.items():
        if not isinstance(addresses, list) or not all(isinstance(a, str) for a in addresses):
            raise ValueError(f"TF_CONFIG cluster job {job!r} must be a list of 'host:port'.")
    if not isinstance(task, dict) or "type" not in task or "index" not in task:
        raise ValueError(f"TF_CONFIG needs a 'task' with 'type' and 'index', got {raw!r}.")
    job, index = task["type"], task["index"]
    if not isinstance(job, str) or job not in cluster:
        raise ValueError(
            f"TF_CONFIG task type {job!r} is not a job of its cluster (jobs: "
            f"{', '.join(sorted(cluster))}): {raw!r}."
        )
    if isinstance(index, str) and index.isdigit():  # TensorFlow reads it with int()
        index = int(index)
    if isinstance(index, bool) or not isinstance(index, int):
        raise ValueError(
            f"TF_CONFIG task index must be an integer (this task's position in the list of "
            f"job {job!r}), got {index!r}: {raw!r}."
        )
    if not 0 <= index < len(cluster[job]):
        raise ValueError(
            f"TF_CONFIG task index {index} is out of range: job {job!r} has "
            f"{len(cluster[job])} task(s), indices 0 to {len(cluster[job]) - 1}: {raw!r}."
        )
    return config


def check_strategy(strategy):
    """Raise a ValueError unless `strategy` is a known name or a `tf.distribute.Strategy`."""
    known = strategy is None or (isinstance(strategy, str) and strategy in STRATEGY_NAMES)
    if not known and not isinstance(strategy, tf.distribute.Strategy):
        raise ValueError(
            f"Unknown `strategy` {strategy!r}: use None, 'mirrored', 'multi_worker' or a "
            "tf.distribute.Strategy."
        )


def distribution_strategy(strategy=None, cluster_timeout=CLUSTER_TIMEOUT):
    """A `tf.distribute.Strategy` from a name or an instance.

    Args:
        strategy: None or "default" (the current strategy: one device), "mirrored" (all local
            GPUs, or the CPU), "multi_worker" (MultiWorkerMirroredStrategy over the cluster in
            TF_CONFIG), or a `tf.distribute.Strategy`.
        cluster_timeout: "multi_worker" only: seconds to wait for every task of the cluster to
            start. Past them the process says why on stderr and is ended (TensorFlow waits
            inside a call that Python cannot interrupt, so it is ended with SIGTERM).

    "multi_worker" must be created before TensorFlow runs anything else in the process (a
    constraint of collective ops): call this first thing in the training script.
    """
    if isinstance(strategy, tf.distribute.Strategy):
        return strategy
    check_strategy(strategy)
    if strategy in (None, "default"):
        return tf.distribute.get_strategy()
    # MirroredStrategy reads TF_CONFIG too (to refuse a cluster): a malformed one is named.
    config = check_tf_config()
    if strategy == "mirrored":
        return tf.distribute.MirroredStrategy()
    try:
        with _ClusterWatchdog(config, cluster_timeout):
            return tf.distribute.MultiWorkerMirroredStrategy()
    except RuntimeError as error:
        raise RuntimeError(
            "MultiWorkerMirroredStrategy must be created before TensorFlow runs anything in "
            "this process: call lmpipe.pipelines.distribution_strategy('multi_worker') at the "
            f"start of the script and pass the strategy object to fit ({error})."
        ) from None


# Run by `_ClusterWatchdog` in a child process: the parent is blocked inside TensorFlow, holding
# Python's global lock, so no thread of its own could end the wait. The child returns as soon
# as the parent closes its stdin (the cluster formed, or the parent ended).
_WATCHDOG_PROGRAM = """
import os, select, signal, sys, time
parent, notice_after, timeout = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
if select.select([sys.stdin], [], [], notice_after)[0]:
    sys.exit(0)
sys.stderr.write(sys.argv[4] + "\\n")
sys.stderr.flush()
if select.select([sys.stdin], [], [], timeout - notice_after)[0]:
    sys.exit(0)
sys.stderr.write(sys.argv[5] + "\\n")
sys.stderr.flush()
os.kill(parent, signal.SIGTERM)
time.sleep(10)
if not select.select([sys.stdin], [], [], 0)[0]:
    os.kill(parent, signal.SIGKILL)
"""


class _ClusterWatchdog:
    """While creating a multi-worker strategy: after a while, say which cluster it waits for;
    after `timeout` seconds, end the process with a message. TensorFlow blocks until every task
    of the cluster has registered, for example when one worker of a failed run was restarted
    alone (the others must be started again too)."""

    def __init__(self, config, timeout):
        self.config = config
        self.timeout = timeout
        self.process = None

    def __enter__(self):
        if self.config is None or os.name != "posix":
            return self
        task = self.config["task"]
        tasks = sum(len(addresses) for addresses in self.config["cluster"].values())
        this = f"{task['type']} {task['index']}"
        cluster = json.dumps(self.config["cluster"])
        notice = (
            f"{this} waits for the {tasks} tasks of the cluster in TF_CONFIG to start "
            f"({cluster}); it gives up after {self.timeout} s."
        )
        error = (
            f"error: {this} waited {self.timeout} s for the {tasks} tasks of the cluster in "
            f"TF_CONFIG ({cluster}) and not all of them started. Start every task; after a "
            "failure, restart all of them (they resume from the checkpoint directory they "
            "share). Ending this process."
        )
        notice_after = min(_CLUSTER_NOTICE_AFTER, self.timeout)
        command = [sys.executable, "-c", _WATCHDOG_PROGRAM, str(os.getpid())]
        command += [str(notice_after), str(self.timeout), notice, error]
        try:
            self.process = subprocess.Popen(command, stdin=subprocess.PIPE)
        except OSError as failure:  # no interpreter to run it: wait as TensorFlow does
            logger.warning("No watchdog for the cluster's start (%s).", failure)
        return self

    def __exit__(self, *exc_info):
        if self.process is not None:
            self.process.stdin.close()
            self.process.wait()
        return False


def per_replica_batch_size(strategy, batch_size):
    """`batch_size` (global) divided among the replicas; raise if it does not divide."""
    check_positive_int("batch_size", batch_size)
    replicas = strategy.num_replicas_in_sync
    if batch_size % replicas:
        raise ValueError(
            f"`batch_size`={batch_size} is not divisible by the {replicas} replicas of the "
            "distribution strategy; use a multiple of the replica count."
        )
    return batch_size // replicas


def distributed_dataset(strategy, make_dataset):
    """`make_dataset(input_context)` per input pipeline, distributed over the replicas.

    With the default (single-device) strategy the dataset is returned as is.
    """
    if strategy.num_replicas_in_sync == 1 and not isinstance(
        strategy, (tf.distribute.MirroredStrategy, tf.distribute.MultiWorkerMirroredStrategy)
    ):
        return make_dataset(None)
    return strategy.distribute_datasets_from_function(make_dataset)


def gather_from_replicas(strategy, value, timeout_seconds):
    """The integer `value` of every replica of `strategy`, as a list (one per replica).

    Under a `MultiWorkerMirroredStrategy` this is a collective: every worker must call it, and
    it waits at most `timeout_seconds` for them. With one process every replica has the value
    given, so nothing is exchanged.

    Raises:
        TimeoutError: when some worker did not take part within `timeout_seconds`.
    """
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return [value] * strategy.num_replicas_in_sync
    options = tf.distribute.experimental.CommunicationOptions(timeout_seconds=timeout_seconds)
    local = tf.constant([value], tf.int64)

    @tf.function
    def gather():
        def replica_fn():
            context = tf.distribute.get_replica_context()
            return context.all_gather(local, axis=0, options=options)

        return strategy.run(replica_fn)

    try:
        gathered = strategy.experimental_local_results(gather())[0]
    except tf.errors.DeadlineExceededError:
        raise TimeoutError(
            f"Not every worker of the cluster took part within {timeout_seconds} s"
        ) from None
    return [int(item) for item in gathered.numpy()]


def is_chief(strategy):
    """True on the worker that writes checkpoints, logs and exports."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.cluster_spec().as_dict():
        return True
    task_type, task_id = resolver.task_type, resolver.task_id
    return task_type in (None, "chief") or (
        task_type == "worker" and task_id == 0 and "chief" not in resolver.cluster_spec().jobs
    )
