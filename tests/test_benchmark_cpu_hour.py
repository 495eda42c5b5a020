"""benchmarks/cpu_hour.py's cells: a mark is a budget of process CPU-seconds at which training
stops and the model is evaluated; the cell is kept on disk, and a rerun continues from it (and
from lmpipe's checkpoint) to the later marks."""

import importlib.util
import json
import os
import sys
import time

import pytest

BENCHMARKS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks")


@pytest.fixture(scope="module")
def cpu_hour():
    """benchmarks/cpu_hour.py, imported by path (the folder is not a package)."""
    sys.path.insert(0, BENCHMARKS)
    try:
        path = os.path.join(BENCHMARKS, "cpu_hour.py")
        spec = importlib.util.spec_from_file_location("benchmarks_cpu_hour", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(BENCHMARKS)
    return module


class BusyTrainer:
    """Steps that each burn `step` CPU-seconds; stops at the budget as the callback does."""

    name = "busy"

    def __init__(self, step=0.01):
        self.step = step
        self.steps = 0
        self.plans = 0
        self.evaluated = []

    def plan(self, budget):
        self.plans += 1
        return 1000, {"cpu_seconds_per_step": self.step}

    def train(self, seconds, planned, progress):
        start = time.process_time()
        while self.steps < planned and time.process_time() - start < seconds:
            began = time.process_time()
            while time.process_time() - began < self.step:
                pass
            self.steps += 1
        return self.steps, self.steps >= planned

    def evaluate(self):
        self.evaluated.append(self.steps)
        return {"loss": 1.0 / self.steps}


def test_the_budget_stops_at_each_mark_and_a_rerun_continues_from_the_kept_cell(cpu_hour, tmp_path):
    limits = {10: 0.2, 30: 0.5, 60: 0.8}  # CPU-seconds
    trainer = BusyTrainer()
    cell = cpu_hour.advance(str(tmp_path), trainer, limits, until=10)
    assert list(cell["marks"]) == ["10"]
    first = cell["marks"]["10"]
    assert 0.2 <= first["cpu_seconds"] < 0.3
    assert first["steps"] == trainer.steps < 1000 and not first["schedule_finished"]
    kept = json.loads((tmp_path / "cell.json").read_text())
    assert kept["marks"]["10"]["steps"] == first["steps"] and kept["planned_steps"] == 1000

    # A later invocation (a new trainer, as after a restart) goes on from the kept CPU-seconds.
    again = BusyTrainer()
    again.steps = first["steps"]  # what the checkpoint restores
    cell = cpu_hour.advance(str(tmp_path), again, limits, until=30)
    assert again.plans == 0  # the planned steps are kept
    assert cell["marks"]["10"] == first  # not measured again
    assert 0.5 <= cell["marks"]["30"]["cpu_seconds"] < 0.6
    # Only the 0.3 CPU-seconds left to the mark were trained.
    assert 0.25 <= (cell["marks"]["30"]["steps"] - first["steps"]) * 0.01 <= 0.35
    assert again.evaluated == [cell["marks"]["30"]["steps"]]
    cell = cpu_hour.advance(str(tmp_path), again, limits, until=30)
    assert again.evaluated == [cell["marks"]["30"]["steps"]]  # nothing left to do


def test_a_schedule_that_ends_before_the_mark_is_said_and_not_trained_again(cpu_hour, tmp_path):
    trainer = BusyTrainer(step=0.001)
    trainer.plan = lambda budget: (20, {})
    cell = cpu_hour.advance(str(tmp_path), trainer, {10: 5.0, 30: 9.0}, until=30)
    assert cell["marks"]["10"]["schedule_finished"] and cell["marks"]["10"]["steps"] == 20
    assert cell["marks"]["30"]["cpu_seconds"] == cell["marks"]["10"]["cpu_seconds"] < 1

    # A later invocation (a new process, no model yet) restores the finished run's model from
    # its checkpoint once, training nothing, before evaluating it.
    later = BusyTrainer(step=0.001)
    calls = []

    def restore(seconds, planned, progress):
        calls.append((seconds, planned, list(later.evaluated)))
        later.steps = planned
        return planned, True

    later.train = restore
    cell = cpu_hour.advance(str(tmp_path), later, {10: 5.0, 30: 9.0, 60: 12.0}, until=60)
    assert calls == [(0.0, 20, [])] and later.evaluated == [20]
    assert cell["marks"]["60"]["cpu_seconds"] == cell["marks"]["10"]["cpu_seconds"]


def test_the_table_puts_each_mark_in_its_column_beside_nanogpt(cpu_hour):
    def cell(**marks):
        return {
            "marks": {
                mark: {
                    "metrics": metrics,
                    "steps": 100,
                    "cpu_seconds": 1200.0,
                    "wall_seconds": 900.0,
                    "schedule_finished": False,
                }
                for mark, metrics in marks.items()
            }
        }

    bert = {"mlm_perplexity": 90.0, "without_context_mlm_perplexity": 380.0}
    cells = {"bert": cell(**{"10": bert}), "gpt": cell(**{"30": {"loss_per_character": 2.1}})}
    result = cpu_hour.table(cells)
    assert result["header"][-3:] == ["10 min", "30 min", "60 min"]
    rows = {(row[0], row[2]): row for row in result["rows"]}
    bert_row = rows[cpu_hour.NAMES["bert"], "mlm_perplexity"]
    assert bert_row[3] == "380.000" and bert_row[4].startswith("90.000 (100 steps, 1,200 CPU-s")
    assert bert_row[5:] == ["", ""]
    assert rows[cpu_hour.NAMES["bert"], "mlm_accuracy"][3:] == ["", "", "", ""]  # not kept
    gpt_row = rows[cpu_hour.NAMES["gpt"], "loss_per_character"]
    assert gpt_row[4:] == ["", "2.100 (100 steps, 1,200 CPU-s, 15 wall min)", ""]
    assert rows[cpu_hour.NANOGPT, "loss_per_character"][4] == "1.88 at ~3 min"


def test_a_family_with_no_cell_here_keeps_its_previous_row_and_figures(cpu_hour):
    def row(family, value):
        return [cpu_hour.NAMES[family], "lmpipe pretrain", "metric", "", value, "", ""]

    def figure(measure):
        return {"measure": measure, "ratio": 1.0}

    old_nanogpt = [cpu_hour.NANOGPT, "(published)", "loss_per_character", "", "1.88", "", ""]
    previous = {
        "tables": [
            {
                "rows": [
                    row("bert", "old"),
                    row("gpt", "old"),
                    old_nanogpt,
                    row("xlnet", "old"),
                    row("elmo", "old"),
                ]
            }
        ],
        "figures": [
            figure("held-out MLM perplexity after 10 min of 2 CPU cores"),
            figure("GPT held-out loss per character after 10 min of 2 CPU cores"),
        ],
    }
    kept = {"xlnet": {}, "bert": {}}
    result = {"rows": [row("bert", "new"), row("xlnet", "new")]}
    rows, figures = cpu_hour.carried_over(previous, kept, result, [])
    # Measured here: the new rows; not measured here: the old ones, nanoGPT's beside GPT's.
    assert rows == [
        row("bert", "new"),
        row("gpt", "old"),
        old_nanogpt,
        row("xlnet", "new"),
        row("elmo", "old"),
    ]
    # The keras-hub ratio is not carried once BERT's cell is here (it would mismatch its row).
    assert [figure["measure"] for figure in figures] == [
        "GPT held-out loss per character after 10 min of 2 CPU cores"
    ]


@pytest.mark.slow
def test_a_tiny_gpt_stops_at_its_budget_and_resumes_from_its_checkpoint(cpu_hour, tmp_path):
    out = str(tmp_path / "gpt")
    limits = {10: 4.0, 30: 8.0, 60: 100.0}
    trainer = cpu_hour.trainer_for("gpt", str(tmp_path), quick=True)
    cell = cpu_hour.advance(out, trainer, limits, until=10)
    first = cell["marks"]["10"]
    assert first["cpu_seconds"] >= 4.0 and 0 < first["steps"] < cell["planned_steps"]
    assert first["metrics"]["loss_per_character"] > 0
    # A new trainer (a later invocation) restores lmpipe's checkpoint and trains on.
    again = cpu_hour.trainer_for("gpt", str(tmp_path), quick=True)
    cell = cpu_hour.advance(out, again, limits, until=30)
    assert cell["marks"]["30"]["steps"] > first["steps"]
    assert cell["marks"]["30"]["cpu_seconds"] >= 8.0
