"""The README's main job, shortened: it learns past its baselines on held-out documents (slow)."""

import re
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_a_shortened_main_job_learns_past_its_baselines_on_held_out_documents(tmp_path):
    """The README's main job, shortened (BERT-tiny, 32 tokens, 400 steps): on the held-out
    scenes it predicts masked words clearly better than always the most frequent token and
    the sentence pairs better than chance (measured: MLM accuracy 0.111 against 0.069, 1.6x;
    pairs 0.66)."""
    out = tmp_path / "bert"
    command = [sys.executable, "-m", "lmpipe.cli", "pretrain", "bert", "--out", str(out)]
    command += ["--preset", "tiny", "--seq-len", "32", "--steps", "400", "--epochs", "2"]
    command += ["--learning-rate", "2e-3", "--no-export"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    printed = result.stdout
    assert re.search(r"Held out 39 documents \(2,199 sentences\)", printed)
    model = re.search(r"Evaluation on the 39 held-out documents: (.*)", printed)[1]
    baseline = re.search(r"Without context, on the same batches: (.*)", printed)[1]

    def value(line, name):
        return float(re.search(rf"\b{name} (\d+\.\d+)", line)[1])

    assert value(model, "mlm_accuracy") > 1.3 * value(baseline, "mlm_accuracy")
    assert value(model, "pair_accuracy") > 0.55
    assert value(baseline, "pair_accuracy") == 0.5
    # Validation after each epoch, and the best epoch kept.
    assert re.search(r"Kept the weights of epoch [12]: val_loss \d", printed)
    assert printed.count("[MASK] = ") == 3
