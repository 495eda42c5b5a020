"""The training loop on a corpus mixture's stream: the step keeps the mixture position, a
resume seeks to the batch after it and equals the uninterrupted run bit for bit, and a
checkpoint written before mixtures (a `[3]` position alone) still resumes."""

import os
import subprocess
import sys

import numpy as np
import pytest

from lmpipe.datasets.examples.mixture import schedule_of
from lmpipe.datasets.examples.stream_position import MixturePosition, StreamPosition
from lmpipe.training.stream_state import StreamState
from tests.pipelines.stream_regression import Positions, fit, mixture
from tests.pipelines.test_stream_resume import InterruptAt, SimulatedKillError, weights


def _index(position):
    return position[0]


@pytest.mark.parametrize("stop", [2, 5])
def test_a_resumed_mixture_run_seeks_and_equals_the_uninterrupted_run(tmp_path, stop):
    whole = Positions(mixture=True)
    expected = weights(fit(tmp_path / "whole", 3, callbacks=[whole], data=mixture()))
    with pytest.raises(SimulatedKillError):
        fit(tmp_path / "run", 3, callbacks=[InterruptAt(stop)], data=mixture())
    calls, resumed = [], Positions(mixture=True)
    got = weights(fit(tmp_path / "run", 3, callbacks=[resumed], calls=calls, data=mixture()))
    for value, reference in zip(got, expected, strict=True):
        np.testing.assert_array_equal(value, reference)
    # Each step kept its global batch's first example: mixture index 4 * step, the same
    # example of the same source as the uninterrupted run's.
    assert [_index(p) for p in whole.positions] == list(range(0, 36, 4))
    assert [_index(p) for p in resumed.positions] == [
        _index(p) for p in whole.positions[stop - 1 :]
    ]
    schedule = schedule_of(mixture())
    pairs = zip(resumed.positions, whole.positions[stop - 1 :], strict=True)
    for got_position, expected_position in pairs:
        source = int(schedule.source_of(got_position[0]))
        own = slice(3 * (1 + source), 3 * (2 + source))
        assert got_position[own] == expected_position[own]
    # The resume started one batch after the checkpointed step's first example, rebuilding
    # none: the sources moved on by their examples among those 4.
    skip, start = calls[0]
    assert skip == 0
    checkpointed = MixturePosition.of(whole.positions[stop - 2])
    assert start == checkpointed.advanced(4)
    assert start.settled(schedule).index == 4 * (stop - 1)


def test_the_mixture_position_variable_holds_the_first_example_padded(tmp_path):
    positions = Positions(mixture=True)
    fit(None, 1, callbacks=[positions], data=mixture())
    first = positions.positions[0]
    assert len(first) == 27
    assert first[:9] == [0, 0, 0, 0, 0, 0, 0, 0, 0]  # example 0 of source 0, source 1 unread
    assert first[9:] == [-1] * 18


def test_a_single_corpus_run_leaves_the_mixture_variable_unset(tmp_path):
    single, mixed = Positions(), Positions(mixture=True)
    fit(None, 1, callbacks=[single, mixed])
    assert single.positions[0] == [0, 0, 0]
    assert mixed.positions == [[-1] * 27] * 3


def test_a_checkpoint_from_before_mixtures_resumes(tmp_path, monkeypatch):
    """A checkpoint holding the `[3]` position alone (as lmpipe wrote before mixtures)
    restores without the mixture's variable and resumes a one-corpus run by seeking."""
    whole = Positions()
    expected = weights(fit(tmp_path / "whole", 2, callbacks=[whole]))
    with monkeypatch.context() as patched:
        patched.setattr(
            StreamState, "checkpointed", property(lambda self: {"stream": self.variables})
        )
        with pytest.raises(SimulatedKillError):
            fit(tmp_path / "run", 2, callbacks=[InterruptAt(3)])
    calls = []
    got = weights(fit(tmp_path / "run", 2, calls=calls))
    for value, reference in zip(got, expected, strict=True):
        np.testing.assert_array_equal(value, reference)
    assert calls[0] == (0, StreamPosition(*whole.positions[1]).advanced(4))


def _script(out, checkpoints, replicas, stop=None):
    here = os.path.dirname(__file__)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([here, os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, os.path.join(here, "stream_resume_script.py"), str(out)]
    command += [str(checkpoints), str(replicas), *([] if stop is None else [str(stop)])]
    subprocess.run([*command, "--mixture"], check=True, env=env, capture_output=True, timeout=300)
    return None if stop is not None else np.load(f"{out}.npz")


@pytest.mark.slow
def test_a_mixture_run_resumes_on_another_number_of_replicas(tmp_path):
    """Killed on 2 replicas after step 5 of 12, resumed on 1: the steps take the global
    batches (mixture indices) of an uninterrupted run, the weights agree up to the order of
    the gradient sum over replicas (float32: within 1e-5)."""
    whole = _script(tmp_path / "whole", tmp_path / "whole-run", 2)
    _script(tmp_path / "first", tmp_path / "run", 2, stop=5)
    resumed = _script(tmp_path / "second", tmp_path / "run", 1)
    assert whole["positions"][:, 0].tolist() == list(range(0, 48, 4))
    np.testing.assert_array_equal(resumed["positions"][:, 0], whole["positions"][5:, 0])
    np.testing.assert_allclose(resumed["kernel"], whole["kernel"], rtol=0, atol=1e-5)
    np.testing.assert_allclose(resumed["bias"], whole["bias"], rtol=0, atol=1e-5)
