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

A lost worker stops training (`WorkerWatch`, which `fit` runs with `data_service`). The
service itself does not: its dispatcher logs a worker that misses its heartbeats but keeps it,
so a trainer whose only worker died waits for it forever, and one with two workers goes on
with the other's shard alone. The trainer asks the dispatcher for its workers and checks every
`PROBE_INTERVAL` seconds that each accepts connections; one that does not for `WORKER_TIMEOUT`
seconds is lost: training stops with `WorkerLostError` naming it at the next step's end, or,
when no step ends (the batches were that worker's alone), the process exits with code
`LOST_EXIT_CODE` after printing the same message, since TensorFlow waits for the batch without
a way to interrupt it. A rerun resumes from the last checkpoint once the worker is back.
"""

import dataclasses
import os
import re
import socket
import sys
import threading
import time

import keras
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


WORKER_TIMEOUT = 60.0
"""Seconds a worker may refuse connections before the trainer counts it as lost."""

PROBE_INTERVAL = 2.0
"""Seconds between the trainer's checks of its workers."""

LOST_EXIT_CODE = 75
"""The exit code of a trainer that stopped waiting for the batches of a lost worker."""


class WorkerLostError(RuntimeError):
    """A tf.data service worker of the training run is gone."""


class WorkerWatch(keras.callbacks.Callback):
    """Stop training when a worker of the tf.data service at `address` is lost (see the
    module's docstring): a callback that starts checking when training begins (or at `start`)
    and raises `WorkerLostError` at the end of the first step after the loss; `stop` it after
    `fit`.

    Args:
        address: the dispatcher's address.
        timeout: seconds a worker may be unreachable (`WORKER_TIMEOUT` by default), and
            seconds without a step after that before the process exits.
        interval: seconds between checks (`PROBE_INTERVAL` by default).
    """

    def __init__(self, address, timeout=None, interval=None):
        super().__init__()
        self.address = service_address(address)
        self.timeout = WORKER_TIMEOUT if timeout is None else timeout
        self.interval = PROBE_INTERVAL if interval is None else interval
        self.workers = []
        self.message = None  # set when a worker is lost
        self._last_step = time.monotonic()
        self._stopped = threading.Event()
        self._thread = None

    def start(self):
        """Ask the dispatcher for its workers and start checking them."""
        self.workers = service_workers(self.address)
        self._thread = threading.Thread(target=self._watch, name="lmpipe-worker-watch")
        self._thread.daemon = True
        self._thread.start()

    def stop(self):
        """Stop checking."""
        self._stopped.set()

    def on_train_begin(self, logs=None):
        self._last_step = time.monotonic()
        if self._thread is None:
            self.start()

    def on_train_batch_end(self, batch, logs=None):
        self._last_step = time.monotonic()
        if self.message is not None:
            raise WorkerLostError(self.message)

    def _watch(self):
        seen = dict.fromkeys(self.workers, time.monotonic())
        lost_at = None
        while not self._stopped.wait(self.interval):
            now = time.monotonic()
            for worker in self.workers:
                if reachable(worker, self.interval):
                    seen[worker] = now
            lost = [worker for worker in self.workers if now - seen[worker] > self.timeout]
            if lost and self.message is None:
                self.message = _lost_message(lost, self.workers, self.timeout, self.address)
                print(f"lmpipe: {self.message}", file=sys.stderr, flush=True)
                lost_at = now
            if self.message is not None and now - max(self._last_step, lost_at) > self.timeout:
                print(
                    f"lmpipe: no batch came for {self.timeout:g} s more: exiting with code "
                    f"{LOST_EXIT_CODE}.",
                    file=sys.stderr,
                    flush=True,
                )
                exit_process(LOST_EXIT_CODE)
                return


def _lost_message(lost, workers, timeout, address):
    left = len(workers) - len(lost)
    names = ", ".join(lost)
    return (
        f"the tf.data service worker{'s' if len(lost) > 1 else ''} {names} of the dispatcher "
        f"{address} refused connections for {timeout:g} s: lost; {left} of {len(workers)} "
        "workers left, which would train on part of the data (or wait forever). Training "
        "stops: restart the worker (`lmpipe data-service --join`) at the same address and "
        "run the same command again to resume from the last checkpoint."
    )


def exit_process(code):
    """End the process now (a thread cannot interrupt TensorFlow's wait for a batch)."""
    os._exit(code)


def reachable(worker, timeout):
    """Whether `host:port` accepts a TCP connection within `timeout` seconds."""
    host, port = worker.rsplit(":", 1)
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            return True
    except OSError:
        return False


def service_workers(address, timeout=30.0):
    """The `host:port` of each worker the dispatcher at `address` knows.

    It calls the dispatcher's `GetWorkers` (an empty request; the answer lists `WorkerInfo`s,
    field 1, whose field 1 is the address), which TensorFlow's Python API does not expose.
    """
    import grpc  # TensorFlow's own dependency

    with grpc.insecure_channel(address.removeprefix("grpc://")) as channel:
        call = channel.unary_unary(
            "/tensorflow.data.DispatcherService/GetWorkers",
            request_serializer=lambda request: request,
            response_deserializer=lambda response: response,
        )
        try:
            response = call(b"", timeout=timeout)
        except grpc.RpcError as error:
            raise ValueError(
                f"The tf.data service dispatcher {address} does not answer ({error.code().name}):"
                " is `lmpipe data-service` running there?"
            ) from None
    return [
        field.decode("utf-8")
        for info in _message_fields(response, 1)
        for field in _message_fields(info, 1)
    ]


def _message_fields(data, number):
    """The values of the length-delimited field `number` of the protobuf message `data`."""
    values, index = [], 0
    while index < len(data):
        key, index = _varint(data, index)
        wire = key & 7
        if wire == 0:
            _, index = _varint(data, index)
            continue
        if wire == 2:
            size, index = _varint(data, index)
            if key >> 3 == number:
                values.append(data[index : index + size])
            index += size
        else:  # fixed 64 or 32 bits
            index += 8 if wire == 1 else 4
    return values


def _varint(data, index):
    value = shift = 0
    while True:
        byte = data[index]
        index += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, index


def serve_until_stopped():
    """Sleep until a signal handler raises (Ctrl-C, SIGTERM under `lmpipe`)."""
    while True:
        time.sleep(3600)


def _free_port():
    with socket.socket() as probe:
        probe.bind(("localhost", 0))
        return probe.getsockname()[1]
