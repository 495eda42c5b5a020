"""The workers of a TensorFlow cluster as processes on this machine, for the multi-worker tests:
each gets a TF_CONFIG naming free loopback ports, and all of them a time limit."""

import json
import os
import socket
import subprocess
import time


def free_port():
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def tf_config(cluster, index):
    """TF_CONFIG for worker `index` of `cluster` (`{"worker": [addresses]}`)."""
    return json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})


def run_workers(commands, timeout=300, env=None, cluster_size=None):
    """Run `commands[i]` as worker i of a local cluster; return `[(returncode, output)]`.

    Args:
        commands: one argument list per worker to start.
        timeout: seconds for all of them; past it every worker still running is killed and
            its return code is None.
        env: environment variables added to this process's for every worker.
        cluster_size: workers in the cluster (default: one per command), to start only some
            of the workers of a larger cluster.
    """
    workers = start_workers(commands, env, cluster_size)
    return wait_for_workers(workers, timeout)


def start_workers(commands, env=None, cluster_size=None):
    """Start `commands[i]` as worker i of a local cluster (see `run_workers`); return the
    `subprocess.Popen`s, their output piped."""
    size = cluster_size or len(commands)
    cluster = {"worker": [f"127.0.0.1:{free_port()}" for _ in range(size)]}
    return [
        subprocess.Popen(
            command,
            env={**os.environ, **(env or {}), "TF_CONFIG": tf_config(cluster, index)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for index, command in enumerate(commands)
    ]


def wait_for_workers(workers, timeout=300):
    """`[(returncode, output)]` of started workers; past `timeout` seconds every worker still
    running is killed and its return code is None."""
    deadline = time.monotonic() + timeout
    results = []
    try:
        for worker in workers:
            output, _ = worker.communicate(timeout=max(1.0, deadline - time.monotonic()))
            results.append((worker.returncode, output))
    except subprocess.TimeoutExpired:
        for worker in workers:
            worker.kill()
        for worker in workers[len(results) :]:
            output, _ = worker.communicate()
            results.append((None, output))
    return results
