"""ReplicaLocalState: every replica's value of an ON_READ variable in one checkpoint.

One device and a MirroredStrategy (all replicas local) are covered by the XLNet resume tests
(tests/pipelines/test_xlnet_pretraining.py); here, two workers of a multi-worker strategy,
each holding one replica, which gather their values into the chief's checkpoint.
"""

import json
import os
import pathlib
import socket
import subprocess
import sys

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
assert dict(tf.train.list_variables(path))["state/.ATTRIBUTES/memory"] == [2, 2, 3]
strategy.run(fill, args=(100.0,))
chief_path = os.path.join(directory, os.path.basename(path))
checkpoint.restore(chief_path).assert_existing_objects_matched()
values = [float(v.numpy()[0, 0]) for v in strategy.experimental_local_results(variable)]
assert values == [10.0 + index], values  # its own replica's value, not the chief's
print("OK")
"""


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_each_worker_restores_its_own_replicas_value_from_the_chiefs_checkpoint(tmp_path):
    root = pathlib.Path(__file__).resolve().parents[2]
    cluster = {"worker": [f"127.0.0.1:{free_port()}" for _ in range(2)]}
    workers = []
    for index in range(2):
        tf_config = {"cluster": cluster, "task": {"type": "worker", "index": index}}
        environment = dict(os.environ, TF_CONFIG=json.dumps(tf_config), TF_CPP_MIN_LOG_LEVEL="3")
        workers.append(
            subprocess.Popen(
                [sys.executable, "-c", WORKER_SCRIPT, str(tmp_path)],
                cwd=root,
                env=environment,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    outputs = [worker.communicate(timeout=300)[0] for worker in workers]
    for worker, output in zip(workers, outputs, strict=True):
        assert worker.returncode == 0 and "OK" in output, output[-3000:]
