"""SIGTERM during fit: the run checkpoints at a step every worker agrees on, stops with exit
code 42, and the same run started again ends with the weights of an uninterrupted one."""

import json
import os
import signal
import sys
import time

import keras
import numpy as np
import pytest

from lmpipe.pipelines import PREEMPTED_EXIT_CODE, Preempted
from tests.local_cluster import start_workers, wait_for_workers
from tests.pipelines.test_data_service import pipeline
from tests.pipelines.test_pretraining_fit import SCRIPT, replica_weights


class SigtermAt(keras.callbacks.Callback):
    """Sends SIGTERM to this process at the end of the `step`-th batch of the first fit."""

    def __init__(self, step):
        super().__init__()
        self.step = step
        self.batches = 0

    def on_train_batch_end(self, batch, logs=None):
        self.batches += 1
        if self.batches == self.step:
            os.kill(os.getpid(), signal.SIGTERM)


def fit(tokenizer, corpus, directory, callbacks=()):
    pipe = pipeline(tokenizer, seed=3)
    pipe.fit(
        corpus,
        batch_size=4,
        epochs=2,
        steps_per_epoch=3,
        checkpoint_dir=str(directory),
        callbacks=list(callbacks),
        verbose=0,
    )
    return pipe


def test_sigterm_checkpoints_the_next_step_exits_42_and_the_run_resumes_exactly(
    comedies_tokenizer, comedies, tmp_path, capsys
):
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Preempted) as raised:
        fit(comedies_tokenizer, comedies, tmp_path / "preempted", [SigtermAt(2)])
    preempted = raised.value
    assert isinstance(preempted, SystemExit) and preempted.code == PREEMPTED_EXIT_CODE == 42
    assert preempted.step == 3  # the step after the signal
    assert (tmp_path / "preempted" / "ckpt-3.index").exists()
    assert "Preempted (SIGTERM): the checkpoint of step 3" in capsys.readouterr().err
    assert signal.getsignal(signal.SIGTERM) is before  # put back, also on the way out
    resumed = fit(comedies_tokenizer, comedies, tmp_path / "preempted")
    assert int(resumed.model.optimizer.iterations.numpy()) == 6
    straight = fit(comedies_tokenizer, comedies, tmp_path / "straight")
    for weight, other in zip(straight.model.weights, resumed.model.weights, strict=True):
        np.testing.assert_allclose(other.numpy(), weight.numpy(), rtol=0, atol=1e-6)
    assert signal.getsignal(signal.SIGTERM) is before


def cluster_commands(tmp_path, name, checkpoints, *arguments):
    """fit_script as the two workers of a multi-worker run checkpointing in `checkpoints`."""
    return [
        [
            sys.executable,
            SCRIPT,
            str(tmp_path / f"{name}{index}"),
            "--strategy",
            "multi_worker",
            "--checkpoint-dir",
            str(checkpoints),
            "--epochs",
            "2",
            "--steps",
            "4",
            *arguments,
        ]
        for index in range(2)
    ]


def latest_step(checkpoints):
    return max(int(path.name[5:-6]) for path in checkpoints.glob("ckpt-*.index"))


@pytest.mark.slow
def test_sigterm_to_one_worker_stops_the_cluster_at_one_step_and_it_resumes_exactly(tmp_path):
    env = {"TMPDIR": str(tmp_path)}
    # Two clusters at once: the uninterrupted reference, and one whose worker that is not the
    # chief gets SIGTERM: the chief, never signalled, must stop at the same step. (SIGTERM to
    # every worker, each of them told, was checked the same way: it is the easier case, and a
    # third cluster cost 30 s of the suite.)
    reference = start_workers(
        cluster_commands(tmp_path, "reference", tmp_path / "reference_checkpoints"), env
    )
    runs = {}
    for signalled in ([1],):
        name = "worker" + "".join(map(str, signalled))
        checkpoints = tmp_path / f"{name}_checkpoints"
        commands = cluster_commands(
            tmp_path, name, checkpoints, "--step-delay", "0.5", "--checkpoint-every", "2"
        )
        runs[name] = (signalled, checkpoints, commands, start_workers(commands, env))
    deadline = time.time() + 300
    for signalled, checkpoints, _, workers in runs.values():
        while not (checkpoints / "ckpt-2.index").exists():  # the first checkpoint_every
            assert all(worker.poll() is None for worker in workers), "a worker ended early"
            assert time.time() < deadline
            time.sleep(0.05)
        for index in signalled:
            workers[index].send_signal(signal.SIGTERM)
    for returncode, output in wait_for_workers(reference):
        assert returncode == 0, output[-3000:]
    expected = replica_weights(tmp_path / "reference0" / "result.npz")

    steps, resumed = {}, {}
    for name, (_, checkpoints, commands, workers) in runs.items():
        results = wait_for_workers(workers)
        for returncode, output in results:
            assert returncode == PREEMPTED_EXIT_CODE, output[-3000:]
        steps[name] = latest_step(checkpoints)
        assert 2 < steps[name] < 8
        for _, output in results:  # every worker stopped at the same step
            assert f"Preempted (SIGTERM): the checkpoint of step {steps[name]} is in" in output
        assert not (tmp_path / f"{name}0" / "result.npz").exists()
        resumed[name] = start_workers(commands, env)  # the same runs, started again
    for name, workers in resumed.items():
        for returncode, output in wait_for_workers(workers):
            assert returncode == 0, output[-3000:]
        history = json.loads((tmp_path / f"{name}0" / "history.json").read_text())
        assert (history["first_step"], history["steps"]) == (steps[name], 8)
        weights = replica_weights(tmp_path / f"{name}0" / "result.npz")
        for variable, values in expected.items():
            np.testing.assert_allclose(weights[variable][0], values[0], rtol=0, atol=1e-5)
