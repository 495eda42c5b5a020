"""Distribution strategies by name, and per-replica datasets."""

import json
import os

import tensorflow as tf

STRATEGY_NAMES = (None, "default", "mirrored", "multi_worker")


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


def distribution_strategy(strategy=None):
    """A `tf.distribute.Strategy` from a name or an instance.

    Args:
        strategy: None or "default" (the current strategy: one device), "mirrored" (all local
            GPUs, or the CPU), "multi_worker" (MultiWorkerMirroredStrategy over the cluster in
            TF_CONFIG), or a `tf.distribute.Strategy`.

    "multi_worker" must be created before TensorFlow runs anything else in the process (a
    constraint of collective ops): call this first thing in the training script.
    """
    if isinstance(strategy, tf.distribute.Strategy):
        return strategy
    check_strategy(strategy)
    if strategy in (None, "default"):
        return tf.distribute.get_strategy()
    # MirroredStrategy reads TF_CONFIG too (to refuse a cluster): a malformed one is named.
    check_tf_config()
    if strategy == "mirrored":
        return tf.distribute.MirroredStrategy()
    try:
        return tf.distribute.MultiWorkerMirroredStrategy()
    except RuntimeError as error:
        raise RuntimeError(
            "MultiWorkerMirroredStrategy must be created before TensorFlow runs anything in "
            "this process: call lmpipe.pipelines.distribution_strategy('multi_worker') at the "
            f"start of the script and pass the strategy object to fit ({error})."
        ) from None


def per_replica_batch_size(strategy, batch_size):
    """`batch_size` (global) divided among the replicas; raise if it does not divide."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"`batch_size` must be a positive integer, got {batch_size!r}.")
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


def is_chief(strategy):
    """True on the worker that writes checkpoints, logs and exports."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.cluster_spec().as_dict():
        return True
    task_type, task_id = resolver.task_type, resolver.task_id
    return task_type in (None, "chief") or (
        task_type == "worker" and task_id == 0 and "chief" not in resolver.cluster_spec().jobs
    )
