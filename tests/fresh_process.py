"""Scripts run in a fresh Python process: TensorFlow's logical devices (two CPUs for a
MirroredStrategy) can only be set before TensorFlow starts, so such tests run there."""

import json
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def run_script(script, timeout=300):
    """Run `script` with `python -c` from the repository root; assert that it exits with 0 and
    prints "OK" (its stderr's end in the message otherwise)."""
    environment = dict(os.environ, KERAS_BACKEND="tensorflow", TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert result.returncode == 0 and "OK" in result.stdout, result.stderr[-3000:]


def json_from_fresh_process(script, timeout=300):
    """Run `script`, which prints one JSON line last, in a fresh process, and return that
    value: for the tests of full-size models (BERT-large, GPT-2 small), whose hundreds of MB
    of weights would otherwise stay with the test process until it ends (two test processes
    run the whole suite)."""
    environment = dict(os.environ, KERAS_BACKEND="tensorflow", TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])
