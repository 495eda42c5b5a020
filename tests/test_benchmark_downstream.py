"""benchmarks/downstream.py on a tiny sample: its cells are fine-tuned as `lmpipe finetune
classify` does, kept on disk so that a rerun continues, and rendered as the accuracy table and
the ratios RESULTS.md shows."""

import argparse
import importlib.util
import json
import os
import sys

import pytest

BENCHMARKS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks")


@pytest.fixture(scope="module")
def downstream():
    """benchmarks/downstream.py, imported by path (the folder is not a package)."""
    sys.path.insert(0, BENCHMARKS)
    try:
        path = os.path.join(BENCHMARKS, "downstream.py")
        spec = importlib.util.spec_from_file_location("benchmarks_downstream", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(BENCHMARKS)
    return module


def test_the_benchmark_reads_the_cli_defaults(downstream, tmp_path):
    arguments = downstream.cli_arguments("runs/bert", str(tmp_path), [])
    from lmpipe.cli.main import build_parser

    parsed = build_parser().parse_args(["finetune", "classify", "--pretrained", "x", "--out", "y"])
    names = ("learning_rate", "epochs", "batch_size", "seq_len", "patience", "monitor", "pooling")
    for name in names:
        assert getattr(arguments, name) == getattr(parsed, name)
    assert downstream.cli_arguments("x", "y", ["--epochs", "7"]).epochs == 7


def test_the_table_puts_each_cell_under_its_size_and_the_goals_start_at_300(downstream):
    def cell(accuracy):
        return {"accuracy": accuracy}

    records = {
        ("spam", "100", "tfidf"): cell(0.9),
        ("spam", "100", "minilm"): cell(0.8),
        ("spam", "300", "tfidf"): cell(0.9),
        ("spam", "300", "minilm"): cell(0.99),
        ("spam", "300", "main"): cell(0.6),
        ("spam", "300", "scratch"): cell(0.5),
    }
    table = downstream.accuracy_table(records, ["spam"], ["100", "300"])
    assert table["header"] == ["set", "model", "100 labels", "300 labels"]
    rows = {row[1]: row[2:] for row in table["rows"]}
    assert rows["MiniLM checkpoint"] == ["0.800", "0.990"]
    assert rows["README main job's model"] == ["", "0.600"]
    found = {
        measure: (ratio, goal)
        for measure, ratio, _, goal in downstream.comparisons(records, ["spam"], ["100", "300"])
    }
    assert len(found) == 3  # no main-over-scratch ratio at 100: neither was measured
    minilm_100 = found["test accuracy, SpamAssassin ham/spam, 100 labels, MiniLM checkpoint"]
    assert minilm_100 == (pytest.approx(0.8 / 0.9), None)
    main_300 = found["test accuracy, SpamAssassin ham/spam, 300 labels, README main job's model"]
    assert main_300 == (pytest.approx(1.2), "> 1x")


def test_cells_not_measured_here_are_read_back_from_the_previous_results(downstream, tmp_path):
    records = {
        ("spam", "100", "minilm"): {"accuracy": 0.9516},
        ("genres", "all", "tfidf"): {"accuracy": 0.666},
        ("genres", "1000", "main"): {"accuracy": 0.5},
    }
    table = downstream.accuracy_table(records)
    path = tmp_path / "downstream.json"
    path.write_text(json.dumps({"tables": [table]}))
    cells = downstream.previous_cells(str(path))
    assert cells == {
        cell: {"accuracy": round(record["accuracy"], 3), "carried": True}
        for cell, record in records.items()
    }
    assert downstream.accuracy_table(cells) == table


def test_cells_are_measured_once_and_kept(downstream, tiny_bert, tmp_path, monkeypatch):
    pytest.importorskip("sklearn")
    texts = ["win money now", "free prize now", "lunch at five", "see you tomorrow"] * 6
    labels = ["spam", "spam", "ham", "ham"] * 6
    monkeypatch.setattr(
        downstream, "labelled_set", lambda name, arguments: (texts, labels, texts[:8], labels[:8])
    )
    arguments = argparse.Namespace(
        sizes=["all"],
        sets=["spam"],
        models=["tfidf", "scratch", "main"],
        work=str(tmp_path),
        pretrained=str(tiny_bert),
        flags="--seq-len 16 --batch-size 4",
        all_epochs=1,
        spam_assassin=None,
        test_size=8,
        kept=False,
    )
    records = downstream.measure(arguments)
    assert set(records) == {("spam", "all", model) for model in ("tfidf", "scratch", "main")}
    scratch = records["spam", "all", "scratch"]
    assert scratch["train"] == 24 and scratch["test"] == 8
    assert 0 <= scratch["accuracy"] <= 1
    # The CLI's defaults, but the flags given and the capped epochs of size "all".
    assert scratch["settings"]["seq_len"] == 16 and scratch["settings"]["epochs"] == 1
    assert "--from-scratch" in scratch["settings"]["flags"]
    assert "--from-scratch" not in records["spam", "all", "main"]["settings"]["flags"]
    # A rerun reads the kept cells: a changed file shows that nothing was measured again.
    path = tmp_path / "cells" / "spam-all-main.json"
    kept = json.loads(path.read_text()) | {"accuracy": 0.125}
    path.write_text(json.dumps(kept))
    assert downstream.measure(arguments)["spam", "all", "main"]["accuracy"] == 0.125
    # --kept: the kept cells only, nothing measured.
    path.unlink()
    arguments.kept = True
    assert ("spam", "all", "main") not in downstream.measure(arguments)


def test_the_main_job_built_is_the_readme_main_job(downstream):
    """The model the table calls the README main job's is trained by the README's command."""
    with open(os.path.join(os.path.dirname(BENCHMARKS), "README.md"), encoding="utf-8") as file:
        readme = file.read()
    command = "lmpipe " + downstream.MAIN_JOB.format(out="runs/bert")
    assert f"pip install -e '.[shakespeare]' && {command}\n" in readme
    assert f"{command}  # main job" in readme
