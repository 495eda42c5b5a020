"""Run the benchmarks one after another, each alone in its own process, and render their figures
(benchmarks/results/<benchmark>.json) as benchmarks/RESULTS.md.

A benchmark that fails or runs past its time leaves a JSON file saying so, with the end of its
standard error, in place of its figures. Running only some keeps the others' files, so the page
stays whole, each row dated by its own run.

Run: python benchmarks/run_all.py [--only masking,serving] [--render] [--timeout SECONDS]
"""

import argparse
import contextlib
import datetime
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

from measure import RESULTS_DIR, describe_machine, describe_run, goal_met

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS_PAGE = os.path.join(ROOT, "benchmarks", "RESULTS.md")
# Every benchmark, in the README's order, with the seconds it may run on 2 CPU cores (several
# times what it takes there).
BENCHMARKS = {
    "masking": 1200,
    "pretraining_data": 1200,
    "training": 2400,
    "serving": 1200,
    "permutation": 1200,
    "word2vec": 1800,
    "corpus_startup": 2400,
    "data_service": 1200,
    "decoding": 1200,
    "memory_budget": 1800,
    "resume": 1200,
    "learning": 3600,
    # Fine-tunes about 30 models; each measured cell is kept, so a timed-out run continues.
    "downstream": 14400,
}
STDERR_LINES = 40  # of a failed benchmark's standard error, kept in its JSON file


def utc_now():
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def busy_fraction(seconds=1.0):
    """The fraction of the machine's CPU time spent busy over `seconds` (from /proc/stat):
    other work beside the benchmarks, which makes their figures noisy. None off Linux."""

    def times():
        with open("/proc/stat", encoding="utf-8") as file:
            # user nice system idle iowait irq softirq steal ...
            values = [int(value) for value in file.readline().split()[1:]]
        return sum(values), values[3] + values[4]

    try:
        total, idle = times()
        time.sleep(seconds)
        later_total, later_idle = times()
    except (OSError, ValueError, IndexError):
        return None
    return 1 - (later_idle - idle) / max(later_total - total, 1)


def failure(returncode, timeout, stderr_tail):
    """How a run that left no figures ended, in words: a timeout (`returncode` None), a
    library that is not installed (a skip, not a fault), an exit status."""
    if returncode is None:
        return f"timed out after {timeout} s"
    missing = re.search(r"ModuleNotFoundError: No module named '([\w.]+)'", "\n".join(stderr_tail))
    if returncode != 0 and missing:
        return f"skipped: {missing.group(1)} is not installed"
    if returncode == 0:
        return "wrote no figures"
    return f"failed (exit status {returncode})"


def run_benchmark(name, timeout, busy=None, results_dir=RESULTS_DIR):
    """Run `benchmarks/<name>.py` in a process of its own (and its own process group, so that a
    timeout also ends the processes it started), its output passed through, and return its
    record: the JSON file it wrote, or one written here saying how it failed; `busy` (the
    machine's busy fraction before it started) is added to it."""
    path = os.path.join(results_dir, f"{name}.json")
    if os.path.exists(path):
        os.remove(path)  # a run that writes nothing must not leave the last run's figures
    environment = dict(os.environ)
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))
    command = [sys.executable, os.path.join("benchmarks", f"{name}.py")]
    begin = time.perf_counter()
    with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as stderr:
        process = subprocess.Popen(
            command, cwd=ROOT, env=environment, stderr=stderr, start_new_session=True
        )
        try:
            returncode = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            returncode = None
        finally:
            # Whatever of its group is left (all of it after a timeout or an interrupt of this
            # runner, a stray child of it otherwise) must not run beside the next benchmark.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        stderr.seek(0)
        stderr_tail = stderr.read().splitlines()[-STDERR_LINES:]
    seconds = round(time.perf_counter() - begin, 1)
    if returncode == 0 and os.path.exists(path):
        with open(path, encoding="utf-8") as file:
            record = json.load(file)
    else:
        record = {
            "benchmark": name,
            "status": failure(returncode, timeout, stderr_tail),
            "command": " ".join(["python", *command[1:]]),
            "date": utc_now(),
            "stderr_tail": stderr_tail,
        }
    record["seconds"] = seconds
    record["busy_before_start"] = busy
    os.makedirs(results_dir, exist_ok=True)
    with open(path, "w", encoding="utf-8") as file:
        file.write(json.dumps(record, indent=2) + "\n")
    return record


def load_records(results_dir=RESULTS_DIR):
    """`{benchmark: record}` of the JSON files in `results_dir`, the known benchmarks first in
    their order, then any others by name."""
    records = {}
    if os.path.isdir(results_dir):
        for filename in sorted(os.listdir(results_dir)):
            if filename.endswith(".json"):
                with open(os.path.join(results_dir, filename), encoding="utf-8") as file:
                    records[filename[: -len(".json")]] = json.load(file)
    order = [name for name in BENCHMARKS if name in records]
    order += [name for name in records if name not in BENCHMARKS]
    return {name: records[name] for name in order}


def _row(*cells):
    """A markdown table row of `cells`, a "|" inside one escaped."""
    return "| " + " | ".join(str(cell).replace("|", "\\|") for cell in cells) + " |"


def _date(record):
    return (record["machine"]["date"] if "machine" in record else record["date"])[:10]


def figure_row(name, figure, date):
    """One table row: benchmark, measure, against, ratio, spread, goal, met, date."""
    measure = figure["measure"]
    if figure["higher_is_better"] is False:
        measure += " (lower is better)"
    spread = figure["spread"]
    goal = figure["goal"]
    met = ("met" if goal_met(goal, figure["ratio"]) else "**not met**") if goal else ""
    return _row(
        name,
        measure,
        figure["alternative"],
        f"{figure['ratio']:.2f}x",
        f"{spread[0]:.2f}-{spread[1]:.2f}x" if spread else "",
        goal["text"] if goal else "",
        met,
        date,
    )


def _introduction(ran):
    dates = sorted(record["machine"]["date"] for record in ran.values())
    if dates:
        when = (
            f"Figures of runs from {dates[0][:10]} to {dates[-1][:10]} (UTC), rendered by "
            "`python benchmarks/run_all.py` from `benchmarks/results/*.json`."
        )
    else:
        when = "No benchmark has recorded figures yet."
    return [
        "# Benchmark results",
        "",
        when,
        "",
        "Each ratio is lmpipe's figure over the one it is measured against, in the same run;"
        " above 1 lmpipe is faster, except where the measure says lower is better (times,"
        " latencies); a ratio to a formula has no better side. The ratio is the median over"
        " rounds taken in turns; the spread is the lowest and highest ratio of one round"
        " (word2vec: against each of gensim's two runs; serving: of 5 runs of 10 calls), blank"
        " for a single run.",
        "",
    ]


def _machines(ran):
    """The machine paragraph, or one per machine with its benchmarks where they differ."""
    machines = {}
    for name, record in ran.items():
        machines.setdefault(describe_machine(record["machine"]), []).append(name)
    lines = ["## Machine", ""]
    for paragraph, names in machines.items():
        if len(machines) > 1:
            paragraph += f" Benchmarks: {', '.join(names)}."
        lines += [paragraph, ""]
    return lines


def _figures(records, benchmarks):
    lines = [
        "## Figures",
        "",
        _row("benchmark", "measure", "against", "lmpipe / other", "spread", "goal", "met", "date"),
        _row(*["---"] * 8),
    ]
    for name in list(benchmarks) + [name for name in records if name not in benchmarks]:
        record = records.get(name)
        if record is None:
            lines.append(_row(name, "not run yet", *[""] * 6))
        elif record["status"] != "ok":
            lines.append(_row(name, f"{record['status']} (see below)", *[""] * 5, _date(record)))
        elif not record["figures"]:
            lines.append(_row(name, "no figures recorded", *[""] * 5, _date(record)))
        else:
            lines += [figure_row(name, figure, _date(record)) for figure in record["figures"]]
    return lines + [""]


def _tables(records):
    """The tables of absolute figures the benchmarks kept (`Results.add_table`), as written."""
    lines = []
    for name, record in records.items():
        if record["status"] != "ok":
            continue
        for table in record.get("tables", []):
            lines += [f"## {name}: {table['title']}", "", _row(*table["header"])]
            lines.append(_row(*["---"] * len(table["header"])))
            lines += [_row(*row) for row in table["rows"]]
            lines.append("")
    return lines


def _runs(records):
    """Each run's command, time, libraries, commit and date; a failure's standard error."""
    lines = ["## Runs", ""]
    for name, record in records.items():
        notes = ""
        if record.get("seconds") is not None:
            notes += f", {record['seconds']:.0f} s"
        if record.get("busy_before_start") is not None:
            notes += f", the CPUs {record['busy_before_start']:.0%} busy before it started"
        if record["status"] == "ok":
            lines.append(
                f"- {name}: `{record['command']}`{notes}. {describe_run(record['machine'])}"
            )
        else:
            lines.append(
                f"- {name}: `{record['command']}`{notes}: {record['status']}, {record['date']}."
            )
    for name, record in records.items():
        if record["status"] != "ok":
            lines += [
                "",
                f"<details><summary>{name}: {record['status']}, {record['date']}</summary>",
                "",
                "```",
                *record["stderr_tail"],
                "```",
                "</details>",
            ]
    return lines + [""]


def _reproduce(ran):
    settings = {record["machine"].get("onednn_env") for record in ran.values()}
    prefix = ""
    if len(settings) == 1 and None not in settings:
        prefix = f"TF_ENABLE_ONEDNN_OPTS={settings.pop()} "
    return [
        "## Reproduce",
        "",
        "From the repository root, on a machine with nothing else running:",
        "",
        "    pip install -e '.[benchmarks]'   # and PyTorch (CPU) for permutation.py, learning.py",
        f"    {prefix}python benchmarks/run_all.py",
        "",
        "`--only masking,serving` runs some of them and keeps the others' figures; `--render`"
        " only renders this page again from the JSON files. Each benchmark also runs alone"
        " (`PYTHONPATH=. python benchmarks/masking.py`), printing its tables and writing its JSON"
        " file.",
        "",
    ]


def render(records, benchmarks=BENCHMARKS):
    """RESULTS.md of `records` (`load_records`): the machine, one row per figure and one for
    each benchmark that failed, timed out or has not run, each run's details (a failure's
    standard error) and the commands that reproduce them."""
    ran = {name: record for name, record in records.items() if record["status"] == "ok"}
    lines = _introduction(ran) + _machines(ran) + _figures(records, benchmarks) + _tables(ran)
    return "\n".join(lines + _runs(records) + _reproduce(ran))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated benchmarks, e.g. masking,serving")
    parser.add_argument(
        "--render", action="store_true", help="only render RESULTS.md from the JSON files"
    )
    parser.add_argument("--timeout", type=int, help="seconds each benchmark may run")
    arguments = parser.parse_args()
    names = list(BENCHMARKS)
    if arguments.only:
        names = [name.strip() for name in arguments.only.split(",") if name.strip()]
        unknown = [name for name in names if name not in BENCHMARKS]
        if unknown:
            parser.error(f"unknown benchmarks {unknown}; known: {', '.join(BENCHMARKS)}")
    failures = []
    if not arguments.render:
        for name in names:
            busy = busy_fraction()
            print(f"\n===== {name} =====", flush=True)
            if busy is not None and busy > 0.2:
                print(f"warning: the CPUs are {busy:.0%} busy with other work", flush=True)
            record = run_benchmark(name, arguments.timeout or BENCHMARKS[name], busy)
            if record["status"] != "ok":
                failures.append(name)
                print(f"{name}: {record['status']}", *record["stderr_tail"][-10:], sep="\n")
    with open(RESULTS_PAGE, "w", encoding="utf-8") as file:
        file.write(render(load_records()))
    print(f"\nWrote {os.path.relpath(RESULTS_PAGE)}")
    if failures:
        sys.exit(f"failed: {', '.join(failures)}")


if __name__ == "__main__":
    main()
