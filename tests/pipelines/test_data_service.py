"""Training through the tf.data service on loopback: a dispatcher and its workers in this
process; one worker gives the run without the service exactly, two give the same batches."""

import hashlib
import math
import os
import signal
import subprocess
import sys

import keras
import numpy as np
import pytest

from lmpipe import kernels
from lmpipe.datasets import TextCorpus
from lmpipe.models import BertConfig
from lmpipe.pipelines import BertPretraining
from lmpipe.training import data_service as service_module
from lmpipe.training import loop as training
from lmpipe.training.data_service import (
    WorkerLostError,
    from_data_service,
    service_workers,
    start_data_service,
)
from tests.local_cluster import free_port


def pipeline(tokenizer, seed=5):
    """A small BERT pretraining pipeline (width 32, 2 heads, 32 tokens)."""
    config = BertConfig.tiny(
        vocabulary_size=tokenizer.vocabulary_size,
        hidden_dim=32,
        num_heads=2,
        intermediate_dim=64,
        max_sequence_length=32,
    )
    return BertPretraining(tokenizer, config, seq_len=32, seed=seed)


def digest(batch):
    features, labels = batch
    parts = [features[name].numpy().tobytes() for name in sorted(features)]
    parts += [labels[name].numpy().tobytes() for name in sorted(labels)]
    return hashlib.sha1(b"".join(parts)).hexdigest()


def test_one_worker_trains_to_the_weights_of_the_run_without_the_service(
    comedies_tokenizer, comedies
):
    service = start_data_service(workers=1)
    try:
        weights = []
        for data_service in (None, service.address):
            pipe = pipeline(comedies_tokenizer)
            pipe.fit(
                comedies,
                batch_size=4,
                epochs=2,
                steps_per_epoch=2,
                data_service=data_service,
                verbose=0,
            )
            weights.append([weight.numpy() for weight in pipe.model.weights])
    finally:
        service.stop()
    for without, through in zip(*weights, strict=True):
        np.testing.assert_allclose(through, without, rtol=0, atol=1e-6)


def test_fit_sends_the_service_a_graph_of_tensorflow_ops_only(
    comedies_tokenizer, comedies, monkeypatch
):
    # The workers may lack lmpipe's compiled kernels (the masking op): fit builds what it sends
    # them with TensorFlow's ops (the same batches, the test above).
    sent = []

    class SentError(Exception):
        pass

    def capture(dataset, address):
        sent.append(dataset)
        raise SentError

    monkeypatch.setattr(training, "from_data_service", capture)
    pipe = pipeline(comedies_tokenizer)
    with pytest.raises(SentError):
        pipe.fit(comedies, batch_size=4, steps_per_epoch=1, data_service="localhost:1", verbose=0)
    assert b"LmpipeMaskedLm" not in sent[0]._as_serialized_graph().numpy()
    if kernels.compiler() is not None:
        local = pipe.training_batches(comedies, 4, None)._as_serialized_graph().numpy()
        assert b"LmpipeMaskedLm" in local


def test_two_workers_give_each_batch_of_the_stream_once(comedies_tokenizer, comedies):
    pipe = pipeline(comedies_tokenizer)
    local = [digest(batch) for batch in pipe.training_batches(comedies, 4, None).take(120)]
    service = start_data_service(workers=2)
    try:
        served = from_data_service(pipe.training_batches(comedies, 4, None), service.address)
        received = [digest(batch) for batch in served.take(40)]
    finally:
        service.stop()
    assert len(set(received)) == 40  # none twice
    assert set(received) <= set(local)  # batches of the stream, from near its start


def test_two_workers_split_a_file_corpus_by_file(comedies_tokenizer, comedies, tmp_path):
    scenes = list(comedies.iter_documents())[:40]
    for index in range(2):
        text = "".join("\n".join(scene) + "\n\n" for scene in scenes[index::2])
        (tmp_path / f"part-{index}.txt").write_text(text)
    files = TextCorpus.from_files(str(tmp_path / "*.txt"))
    pipe = pipeline(comedies_tokenizer)
    service = start_data_service(workers=2)
    try:
        served = from_data_service(pipe.training_batches(files, 4, None), service.address)
        received = [digest(batch) for batch in served.take(40)]
    finally:
        service.stop()
    assert len(set(received)) == 40


def test_a_bad_address_is_refused_by_name(comedies_tokenizer, comedies):
    with pytest.raises(ValueError, match="`data_service` must be the dispatcher's address"):
        pipeline(comedies_tokenizer).fit(comedies, batch_size=4, data_service="dispatcher")


def test_lmpipe_data_service_serves_a_training_run_and_stops_on_sigterm(
    comedies_tokenizer, comedies
):
    port = free_port()
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    process = subprocess.Popen(
        [sys.executable, "-m", "lmpipe.cli", "data-service", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": root},
    )
    try:
        line = process.stdout.readline()
        assert f"train with --data-service localhost:{port}" in line, process.stderr.read()
        history = pipeline(comedies_tokenizer).fit(
            comedies, batch_size=4, steps_per_epoch=2, data_service=f"localhost:{port}", verbose=0
        )
        assert math.isfinite(history.history["loss"][0])
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 143
    finally:
        process.kill()


class StopWorkerAt(keras.callbacks.Callback):
    """Stops a worker of the service at the end of step `step`, as a crash would."""

    def __init__(self, worker, step):
        super().__init__()
        self.worker, self.step = worker, step

    def on_train_batch_end(self, batch, logs=None):
        if int(self.model.optimizer.iterations.numpy()) == self.step:
            self.worker.stop()


@pytest.mark.slow
def test_a_lost_worker_of_two_stops_training_naming_it(comedies_tokenizer, comedies, monkeypatch):
    # The service alone goes on with the other worker's shard, silently.
    monkeypatch.setattr(service_module, "WORKER_TIMEOUT", 1.0)
    monkeypatch.setattr(service_module, "PROBE_INTERVAL", 0.2)
    service = start_data_service(workers=2)
    try:
        workers = service_workers(service.address)
        assert len(workers) == 2
        lost = workers[0]
        port = int(lost.rsplit(":", 1)[1])
        worker = next(w for w in service.workers if w._server.bound_port() == port)
        pipe = pipeline(comedies_tokenizer)
        with pytest.raises(WorkerLostError) as raised:
            pipe.fit(
                comedies,
                batch_size=4,
                steps_per_epoch=100_000,
                data_service=service.address,
                callbacks=[StopWorkerAt(worker, 2)],
                verbose=0,
            )
    finally:
        service.stop()
    assert str(raised.value).startswith(
        f"the tf.data service worker {lost} of the dispatcher {service.address} refused "
        "connections for 1 s: lost; 1 of 2 workers left"
    )


LOSE_THE_ONLY_WORKER = """
from lmpipe.training import data_service
from lmpipe.training.loop import train
from lmpipe.training.options import TrainingOptions
from tests.pipelines.test_checkpointing import Regression, regression_batches
from tests.pipelines.test_data_service import StopWorkerAt

data_service.WORKER_TIMEOUT, data_service.PROBE_INTERVAL = 1.0, 0.2
service = data_service.start_data_service(workers=1)
print("worker", data_service.service_workers(service.address)[0], flush=True)
options = TrainingOptions(
    data_service=service.address, callbacks=[StopWorkerAt(service.workers[0], 2)], verbose=0
)
train(Regression, regression_batches(), run_config={}, batch_size=4, epochs=1,
      steps_per_epoch=10**6, options=options)
print("trained on", flush=True)
"""


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.slow
def test_the_only_worker_lost_ends_the_waiting_trainer_naming_it():
    # TensorFlow waits for the lost worker's batch forever, and no thread can interrupt it:
    # the trainer says why and exits.
    result = subprocess.run(
        [sys.executable, "-c", LOSE_THE_ONLY_WORKER],
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "PYTHONPATH": ROOT},
    )
    worker = result.stdout.split("worker ", 1)[1].split()[0]
    assert result.returncode == service_module.LOST_EXIT_CODE, result.stderr[-2000:]
    assert "trained on" not in result.stdout
    assert f"lmpipe: the tf.data service worker {worker} of the dispatcher" in result.stderr
    assert "lost; 0 of 1 workers left" in result.stderr
    assert "lmpipe: no batch came for 1 s more: exiting with code 75." in result.stderr
