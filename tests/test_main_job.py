"""The README's main job, shortened: it learns past its baselines on held-out documents (slow)."""

import re
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_a_shortened_main_job_learns_past_its_baselines_on_held_out_documents(tmp_path):
    """The README's main job, shortened (its recipe, BERT-tiny, at 32 tokens, 400 steps): on the
    held-out scenes it predicts masked words clearly better than always the most frequent
    token and than a unigram model fit on the very targets, and the sentence pairs better than
    chance (measured: MLM accuracy 0.120 against 0.059, 2.05x; perplexity 304 against 349,
    0.87x; pairs 0.67)."""
    out = tmp_path / "bert"
    command = [sys.executable, "-m", "lmpipe.cli", "pretrain", "bert", "--out", str(out)]
    command += ["--seq-len", "32", "--steps", "400", "--epochs", "2"]
    command += ["--recipe", "fast", "--learning-rate", "2e-3", "--no-export"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    printed = result.stdout
    assert re.search(r"Held out 39 documents \(2,199 sentences\)", printed)
    model = re.search(r"Evaluation on the 39 held-out documents: (.*)", printed)[1]
    baseline = re.search(r"Without context, on the same batches: (.*)", printed)[1]

    def value(line, name):
        return float(re.search(rf"\b{name} (\d+\.\d+)", line)[1])

    assert value(model, "mlm_accuracy") > 1.6 * value(baseline, "mlm_accuracy")
    assert value(model, "mlm_perplexity") < 0.95 * value(baseline, "mlm_perplexity")
    assert value(model, "pair_accuracy") > 0.6
    assert value(baseline, "pair_accuracy") == 0.5
    # Validation after each epoch, and the best epoch kept.
    assert re.search(r"Kept the weights of epoch [12]: val_loss \d", printed)
    assert printed.count("[MASK] = ") == 3
