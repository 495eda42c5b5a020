"""The training loop on the seekable stream: a resume seeks (never replays) and equals the
uninterrupted run bit for bit; a run resumes on another number of replicas with the same
global batches; checkpoints written before the stream still resume (by replaying)."""

import os
import subprocess
import sys

import numpy as np
import pytest

from lmpipe.datasets.examples.stream import StreamPosition
from tests.pipelines.stream_regression import Positions, fit

HERE = os.path.dirname(__file__)


class SimulatedKillError(Exception):
    pass


class InterruptAt:
    """Stops training (as a kill would) once step `step` is done and checkpointed."""

    def __new__(cls, step):
        import keras

        class Interrupt(keras.callbacks.Callback):
            def on_train_batch_end(self, batch, logs=None):
                if int(self.model.optimizer.iterations.numpy()) == step:
                    raise SimulatedKillError

        return Interrupt()


def weights(model):
    return [np.asarray(w) for w in model.get_layer("dense").get_weights()]


@pytest.mark.parametrize("stop", [2, 4, 6])
def test_a_resumed_run_seeks_and_equals_the_uninterrupted_run(tmp_path, stop):
    whole = Positions()
    expected = weights(fit(tmp_path / "whole", 3, callbacks=[whole]))
    with pytest.raises(SimulatedKillError):
        fit(tmp_path / "run", 3, callbacks=[InterruptAt(stop)])
    calls, resumed = [], Positions()
    got = weights(fit(tmp_path / "run", 3, callbacks=[resumed], calls=calls))
    for value, reference in zip(got, expected, strict=True):
        np.testing.assert_array_equal(value, reference)
    # The kill came before step `stop` was checkpointed: the run resumed after step
    # `stop - 1`, and its steps took the global batches the uninterrupted run took then.
    assert resumed.positions == whole.positions[stop - 1 :]
    # It started the stream one batch (4 examples) after the checkpointed step's batch,
    # rebuilding none.
    skip, start = calls[0]
    assert skip == 0
    assert start == StreamPosition(*whole.positions[stop - 2]).advanced(4)


def test_a_fresh_run_starts_the_stream_at_its_beginning(tmp_path):
    calls = []
    fit(tmp_path / "run", 1, calls=calls)
    assert calls == [(0, None)]


def test_a_finished_run_resumes_to_nothing(tmp_path):
    fit(tmp_path / "run", 2)
    calls = []
    fit(tmp_path / "run", 2, calls=calls)
    assert calls == []


def test_extending_a_run_continues_the_stream(tmp_path):
    """(The weights differ: the learning-rate schedule follows the new number of steps.)"""
    whole = Positions()
    fit(tmp_path / "whole", 3, callbacks=[whole])
    fit(tmp_path / "run", 2)
    longer = Positions()
    fit(tmp_path / "run", 3, callbacks=[longer])
    assert longer.positions == whole.positions[6:]


def _script(out, checkpoints, replicas, stop=None):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([HERE, os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, os.path.join(HERE, "stream_resume_script.py"), str(out)]
    command += [str(checkpoints), str(replicas), *([] if stop is None else [str(stop)])]
    subprocess.run(command, check=True, env=env, capture_output=True, timeout=300)
    return None if stop is not None else np.load(f"{out}.npz")


@pytest.mark.slow
@pytest.mark.parametrize("before, after", [(1, 2), (2, 1)])
def test_a_run_resumes_on_another_number_of_replicas(tmp_path, before, after):
    """Killed on `before` replicas after step 5 of 12 (mid-epoch), resumed on `after`: the
    steps take the global batches of an uninterrupted run, and the weights agree with it up to
    the order of the gradient sum over replicas (float32: within 1e-5)."""
    whole = _script(tmp_path / "whole", tmp_path / "whole-run", before)
    _script(tmp_path / "first", tmp_path / "run", before, stop=5)
    resumed = _script(tmp_path / "second", tmp_path / "run", after)
    np.testing.assert_array_equal(resumed["positions"], whole["positions"][5:])
    np.testing.assert_allclose(resumed["kernel"], whole["kernel"], rtol=0, atol=1e-5)
    np.testing.assert_allclose(resumed["bias"], whole["bias"], rtol=0, atol=1e-5)
