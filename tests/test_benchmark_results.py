"""benchmarks/RESULTS.md from the benchmarks' JSON files (`benchmarks/run_all.py`): a row per
ratio with its spread and goal, met or not in the goal's direction, and a row for a benchmark
that failed. Fake figures and machines: nothing is timed and TensorFlow is not imported."""

import importlib.util
import json
import os
import sys

import pytest

BENCHMARKS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks")

MACHINE = {
    "cpu": "Intel(R) Xeon(R) Processor",
    "cores": 2,
    "cpu_count": 2,
    "flags": dict.fromkeys(("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"), True),
    "onednn": True,
    "onednn_env": None,
    "gpus": [],
    "python": "3.11.7",
    "tensorflow": "2.21.0",
    "keras": "3.15.1",
    "alternatives": {"keras-hub": "0.32.0"},
    "lmpipe": "abc1234",
    "date": "2026-05-01T10:00:00+00:00",
}


@pytest.fixture(scope="module")
def run_all():
    """benchmarks/run_all.py, imported by path (the folder is not a package) with the folder on
    sys.path for its `measure` import, as when it runs as a script."""
    sys.path.insert(0, BENCHMARKS)
    try:
        path = os.path.join(BENCHMARKS, "run_all.py")
        spec = importlib.util.spec_from_file_location("benchmarks_run_all", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(BENCHMARKS)
    return module


@pytest.fixture
def measure(run_all, monkeypatch):
    """benchmarks/measure.py with `machine()` describing the fake MACHINE."""
    module = sys.modules["measure"]
    monkeypatch.setattr(module, "machine", lambda: dict(MACHINE))
    return module


def rows_of(page, benchmark):
    return [line for line in page.splitlines() if line.startswith(f"| {benchmark} |")]


def test_a_goal_is_met_only_on_its_side_of_the_threshold(measure):
    at_least, at_most, above = (measure.parse_goal(goal) for goal in (">= 1.2x", "<= 0.8x", "> 1x"))
    assert at_least == {"text": ">= 1.2x", "operator": ">=", "threshold": 1.2}
    assert measure.goal_met(at_least, 1.2) and not measure.goal_met(at_least, 1.19)
    assert measure.goal_met(at_most, 0.75) and not measure.goal_met(at_most, 0.81)
    assert measure.goal_met(above, 1.01) and not measure.goal_met(above, 1.0)
    with pytest.raises(ValueError, match="operator"):
        measure.parse_goal("1.2x")


def test_a_goal_pointing_against_the_measure_is_refused(measure):
    results = measure.Results("serving")
    with pytest.raises(ValueError, match="contradicts"):
        results.add("latency", 0.7, "keras-hub", goal=">= 1x", higher_is_better=False)


def test_spreads_are_the_extreme_ratios_of_rounds_and_of_blocks_of_calls(measure):
    assert measure.ratio_range([2.0, 3.0, 4.0], [1.0, 1.0, 2.0]) == (2.0, 3.0)
    assert measure.block_medians([1, 2, 3, 10, 20, 30], 2) == [2, 20]


def test_each_recorded_ratio_becomes_a_row_with_its_spread_goal_and_verdict(
    run_all, measure, tmp_path
):
    results = measure.Results("masking")
    results.add("steady state sequences/s", 3.2414, "keras-hub", goal=">= 5x", spread=(3.1, 3.4))
    results.write(directory=tmp_path)
    results = measure.Results("serving")
    results.add("latency, batch 1", 0.71, "keras-hub", goal="<= 0.8x", higher_is_better=False)
    results.add("latency, all outputs", 0.9, "keras-hub", higher_is_better=False)
    results.write(directory=tmp_path)
    with open(tmp_path / "masking.json", encoding="utf-8") as file:
        assert json.load(file)["figures"][0]["spread"] == [3.1, 3.4]

    page = run_all.render(run_all.load_records(tmp_path))

    assert rows_of(page, "masking") == [
        "| masking | steady state sequences/s | keras-hub | 3.24x | 3.10-3.40x | >= 5x "
        "| **not met** | 2026-05-01 |"
    ]
    assert rows_of(page, "serving") == [
        "| serving | latency, batch 1 (lower is better) | keras-hub | 0.71x |  | <= 0.8x | met "
        "| 2026-05-01 |",
        "| serving | latency, all outputs (lower is better) | keras-hub | 0.90x |  |  |  "
        "| 2026-05-01 |",
    ]
    assert "Figures of runs from 2026-05-01 to 2026-05-01 (UTC)" in page
    assert "AVX-512 BF16 yes" in page and "TensorFlow oneDNN on; GPU: none" in page
    assert "    python benchmarks/run_all.py" in page
    # Every other benchmark still has its row, so that the page is whole.
    assert rows_of(page, "decoding") == ["| decoding | not run yet |  |  |  |  |  |  |"]


def test_a_table_of_absolute_figures_is_shown_as_written(run_all, measure, tmp_path):
    results = measure.Results("downstream")
    results.add("test accuracy, 300 labels, MiniLM", 1.05, "TF-IDF", goal="> 1x")
    results.add_table("accuracy", ["set", "model", "300 labels"], [["spam", "MiniLM", "0.990"]])
    with pytest.raises(ValueError, match="3 cells"):
        results.add_table("accuracy", ["set", "model", "300 labels"], [["spam", "0.9"]])
    results.write(directory=tmp_path)

    page = run_all.render(run_all.load_records(tmp_path))

    assert rows_of(page, "downstream")[0].startswith(
        "| downstream | test accuracy, 300 labels, MiniLM | TF-IDF | 1.05x |  | > 1x | met"
    )
    table = page.split("## downstream: accuracy\n\n")[1].split("\n\n")[0]
    assert table.splitlines() == [
        "| set | model | 300 labels |",
        "| --- | --- | --- |",
        "| spam | MiniLM | 0.990 |",
    ]


def test_a_failed_benchmark_has_a_row_and_the_end_of_its_standard_error(run_all, tmp_path):
    failure = {
        "benchmark": "training",
        "status": "failed (exit status 1)",
        "command": "python benchmarks/training.py",
        "date": "2026-05-02T08:00:00+00:00",
        "seconds": 12.0,
        "busy_before_start": 0.05,
        "stderr_tail": ["Traceback (most recent call last):", "ValueError: no | pipes here"],
    }
    (tmp_path / "training.json").write_text(json.dumps(failure), encoding="utf-8")

    page = run_all.render(run_all.load_records(tmp_path))

    assert rows_of(page, "training") == [
        "| training | failed (exit status 1) (see below) |  |  |  |  |  | 2026-05-02 |"
    ]
    assert "<details><summary>training: failed (exit status 1)" in page
    assert "ValueError: no | pipes here" in page
    assert "No benchmark has recorded figures yet." in page


def test_a_run_without_figures_says_how_it_ended(run_all):
    missing = ["Traceback (most recent call last):", "ModuleNotFoundError: No module named 'torch'"]
    assert run_all.failure(1, 600, missing) == "skipped: torch is not installed"
    assert run_all.failure(1, 600, ["ValueError: bad"]) == "failed (exit status 1)"
    assert run_all.failure(None, 600, missing) == "timed out after 600 s"
    assert run_all.failure(0, 600, []) == "wrote no figures"


def test_benchmarks_run_on_different_machines_get_a_paragraph_each(run_all, tmp_path):
    for name, onednn, env in (("masking", True, None), ("decoding", False, "0")):
        record = {
            "benchmark": name,
            "status": "ok",
            "command": f"python benchmarks/{name}.py",
            "machine": dict(MACHINE, onednn=onednn, onednn_env=env),
            "figures": [],
        }
        (tmp_path / f"{name}.json").write_text(json.dumps(record), encoding="utf-8")

    page = run_all.render(run_all.load_records(tmp_path))

    assert "TensorFlow oneDNN on; GPU: none. Python 3.11.7" in page
    assert "oneDNN off (TF_ENABLE_ONEDNN_OPTS=0)" in page
    assert "Benchmarks: masking." in page and "Benchmarks: decoding." in page
    assert rows_of(page, "decoding") == [
        "| decoding | no figures recorded |  |  |  |  |  | 2026-05-01 |"
    ]
