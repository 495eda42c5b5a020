"""ReplicaLocalState: every replica's value of an ON_READ variable in one checkpoint.

One device and a MirroredStrategy (all replicas local) are covered by the XLNet resume tests
(tests/pipelines/test_xlnet_pretraining.py); here, two workers of a multi-worker strategy,
each holding one replica, which gather their values into the chief's checkpoint.
"""

import pathlib
import sys

from tests.local_cluster import run_workers

WORKER_SCRIPT = """
import json, os, sys, tempfile
import tensorflow as tf
from lmpipe.models.replica_local_state import ReplicaLocalState

index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
directory = sys.argv[1]
strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    variable = tf.Variable(
        tf.zeros((2, 3)),
        trainable=False,
        synchronization=tf.VariableSynchronization.ON_READ,
        aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
    )


@tf.function
def fill(offset):
    replica = tf.distribute.get_replica_context().replica_id_in_sync_group
    variable.assign(tf.fill((2, 3), tf.cast(replica, tf.float32) + offset))


strategy.run(fill, args=(10.0,))
checkpoint = tf.train.Checkpoint(state=ReplicaLocalState({"memory": variable}, strategy))
# Every worker saves (they gather together); only the chief's directory is read back.
path = checkpoint.save(os.path.join(directory if index == 0 else tempfile.mkdtemp(), "ckpt"))
# A barrier: the chief has written its checkpoint before any worker reads it.
strategy.reduce("SUM", strategy.run(lambda: tf.constant(1.0)), axis=None)
assert dict(tf.train.list_variables(path))["state/.ATTRIBUTES/memory"] == [2, 2, 3]
strategy.run(fill, args=(100.0,))
chief_path = os.path.join(directory, os.path.basename(path))
checkpoint.restore(chief_path).assert_existing_objects_matched()
values = [float(v.numpy()[0, 0]) for v in strategy.experimental_local_results(variable)]
assert values == [10.0 + index], values  # its own replica's value, not the chief's
print("OK")
"""


def test_each_worker_restores_its_own_replicas_value_from_the_chiefs_checkpoint(tmp_path):
    root = pathlib.Path(__file__).resolve().parents[2]
    command = [sys.executable, "-c", WORKER_SCRIPT, str(tmp_path)]
    results = run_workers(
        [command, command],
        env={"PYTHONPATH": str(root), "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    # Every worker's output on failure: a worker that dies makes the others fail with
    # "Socket closed", which does not say why.
    report = "\n".join(
        f"worker {index} (exit {code}):\n{text[-2000:]}"
        for index, (code, text) in enumerate(results)
    )
    assert all(code == 0 and "OK" in text for code, text in results), report
