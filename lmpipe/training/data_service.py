"""Training input from the tf.data service: the batches are built on other processes or
machines (the service's workers), not on the trainer's CPUs.

`fit(..., data_service="grpc://host:port")` sends each input pipeline's dataset (built as
without the service: the same examples, masks and seed, the batches already trained skipped) to
the service's dispatcher, and the trainer reads the batches the workers make. The dispatcher
must know its workers (`worker_addresses`), as `lmpipe data-service` starts it: the dataset is
sharded over the workers statically (`ShardingPolicy.FILE_OR_DATA`): a corpus of files is
split by file (each worker reads and builds examples from its own files), an in-memory one by
batch (each worker builds the whole stream and keeps every W-th batch); either way no batch
comes twice.

What holds:
- one worker: the same batches in the same order as without the service, so the run ends with
  the same weights, and a resumed run is exact;
- several workers: not the same run as without the service. Batches come in the order the
  workers deliver them, which varies from run to run; with files, each worker packs and
  shuffles examples of its own files (every document once an epoch, in other batches than
  without the service); without files, the batches are those of the stream without the
  service. So the run is not reproducible bit for bit; a resumed run skips the batches
  trained before in the stream without files, but with files each worker skips that many
  batches of its own stream (more than were trained). Give a file corpus at
  least as many files as workers; with an in-memory corpus more workers take the input off the
  trainer but do not build it faster than one worker can.

The workers run the dataset's graph, so `fit` builds it with TensorFlow's ops only
(`lmpipe.kernels.ops_only()`: the masking's compiled op, which a worker's machine may lack, is
left out; the batches are the same). A dataset given to `from_data_service` directly should be
built inside `ops_only()` too, unless every worker has lmpipe's kernels loaded.

`start_data_service` starts a dispatcher and workers in this process (for one machine, and for
the tests); `lmpipe data-service` runs it as a command.
"""

import dataclasses
import re
import socket
import time

import tensorflow as tf

ADDRESS = re.compile(r"^(grpc://)?[A-Za-z0-9_.\-\[\]:]+:\d+$")


def check_data_service(address):
    """Raise a ValueError unless `address` is None or `host:port` (optionally `grpc://`)."""
    if address is None:
        return
    if not isinstance(address, str) or not ADDRESS.match(address):
        raise ValueError(
            f"`data_service` must be the dispatcher's address, 'grpc://host:port' or "
            f"'host:port', got data_service={address!r}."
        )


def service_address(address):
    """`address` as the tf.data service takes it: `grpc://host:port`."""
    return address if address.startswith("grpc://") else f"grpc://{address}"


def from_data_service(dataset, address):
    """`dataset`, built by the tf.data service at `address` (sharded over its workers by file,
    or else by batch) and read back by this process."""
    return dataset.apply(
        tf.data.experimental.service.distribute(
            processing_mode=tf.data.experimental.service.ShardingPolicy.FILE_OR_DATA,
            service=service_address(address),
        )
    )


@dataclasses.dataclass
class DataService:
    """A dispatcher and its workers running in this process (see `start_data_service`).

    Attributes:
        address: the dispatcher's `grpc://host:port`, for `fit(data_service=...)`.
        dispatcher: the `tf.data.experimental.service.DispatchServer`.
        workers: the `tf.data.experimental.service.WorkerServer`s.
    """

    address: str
    dispatcher: object
    workers: list

    def join(self):
        """Serve until the process is stopped (Python's signal handlers run meanwhile: the
        servers' own `join` blocks inside TensorFlow, where Ctrl-C and SIGTERM wait)."""
        serve_until_stopped()

    def stop(self):
        """Stop the workers and the dispatcher."""
        for worker in self.workers:
            worker.stop()
        self.dispatcher.stop()


def start_data_service(port=0, workers=1, host="localhost", worker_addresses=()):
    """Start a tf.data service dispatcher on `port` (0: a free one) and `workers` workers in
    this process, on `host`.

    Args:
        port: the dispatcher's port.
        workers: workers started here (0: the dispatcher only).
        host: the name the workers and trainers reach this machine by.
        worker_addresses: `host:port` of workers started elsewhere (`lmpipe data-service
            --join`), which the dispatcher waits for besides the local ones.

    Returns:
        A `DataService`; its `address` goes to `fit(data_service=...)`.
    """
    local = [f"{host}:{_free_port()}" for _ in range(workers)]
    addresses = [*local, *worker_addresses]
    if not addresses:
        raise ValueError("A data service needs a worker: give `workers` or `worker_addresses`.")
    dispatcher = tf.data.experimental.service.DispatchServer(
        tf.data.experimental.service.DispatcherConfig(port=port, worker_addresses=addresses)
    )
    dispatcher_address = dispatcher.target.split("://", 1)[1]
    servers = [
        start_worker(dispatcher_address, int(address.rsplit(":", 1)[1]), address)
        for address in local
    ]
    return DataService(dispatcher.target, dispatcher, servers)


def start_worker(dispatcher, port, address=None):
    """A tf.data service worker in this process on `port`, for the dispatcher at
    `dispatcher` (`host:port`), reachable at `address` (default `localhost:port`)."""
    # A worker runs the input pipelines' graphs, whose tokenizers use tensorflow_text's ops:
    # they must be registered in this process (`lmpipe data-service` imports nothing else).
    import tensorflow_text  # noqa: F401

    return tf.data.experimental.service.WorkerServer(
        tf.data.experimental.service.WorkerConfig(
            dispatcher_address=dispatcher.removeprefix("grpc://"),
            worker_address=address or f"localhost:{port}",
            port=port,
        )
    )


def serve_until_stopped():
    """Sleep until a signal handler raises (Ctrl-C, SIGTERM under `lmpipe`)."""
    while True:
        time.sleep(3600)


def _free_port():
    with socket.socket() as probe:
        probe.bind(("localhost", 0))
        return probe.getsockname()[1]
