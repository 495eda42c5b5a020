"""Timing shared by the benchmarks, and the record each run leaves: the machine it ran on and
the ratios it printed, in benchmarks/results/<benchmark>.json.

Each benchmark runs lmpipe and the library a user would otherwise pick on the same data in the
same process and prints the ratio. Absolute numbers depend on the (shared, noisy) machine; the
ratios are what to quote. Every measurement is the median of several repeats, taken after one
warm-up pass that traces the functions; where the repeats are rounds taken in turns, the lowest
and highest ratio of a round is its spread. `benchmarks/run_all.py` runs every benchmark and
renders their JSON files as benchmarks/RESULTS.md.
"""

import datetime
import importlib.metadata
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time

BENCHMARKS_DIR = os.path.dirname(os.path.abspath(__file__))
RESULTS_DIR = os.path.join(BENCHMARKS_DIR, "results")
# The CPU features that decide TensorFlow's CPU kernels: AVX-512 and its bfloat16 dot products,
# and the AMX tiles oneDNN uses for bfloat16 matmuls.
CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")
# The libraries the benchmarks compare lmpipe with: module name -> distribution name.
ALTERNATIVES = {
    "keras_hub": "keras-hub",
    "tensorflow_text": "tensorflow-text",
    "transformers": "transformers",
    "torch": "torch",
    "gensim": "gensim",
}


def start_up_and_steady_state_rounds(make_datasets, batch_size, warmup=20, timed=200, rounds=3):
    """For each of `make_datasets` (`{name: () -> endless tf.data.Dataset}`), in each of
    `rounds` rounds (the names taken in turns, rotated each round): the seconds from making the
    dataset to its first batch (start-up: tracing, iterator creation, first batch), and the
    sequences/s of one long-lived iterator after `warmup` batches, over `timed` batches.

    Returns `{name: ([start-up seconds of each round], [sequences/s of each round])}`.
    """
    names = list(make_datasets)
    starts = {name: [] for name in names}
    rates = {name: [] for name in names}
    for round_index in range(rounds):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            begin = time.perf_counter()
            batches = iter(make_datasets[name]())
            next(batches)
            starts[name].append(time.perf_counter() - begin)
            for _ in range(warmup):
                next(batches)
            begin = time.perf_counter()
            for _ in range(timed):
                next(batches)
            rates[name].append(timed * batch_size / (time.perf_counter() - begin))
    return {name: (starts[name], rates[name]) for name in names}


def round_medians(per_round):
    """`{name: (start-up seconds, sequences/s)}`, the medians over the rounds of
    `start_up_and_steady_state_rounds`."""
    return {
        name: (statistics.median(starts), statistics.median(rates))
        for name, (starts, rates) in per_round.items()
    }


def report_start_up_and_steady_state(title, results, reference):
    """Print `results` (`round_medians`), each against `results[reference]`:
    steady-state sequences/s (ratio above 1: faster) and start-up seconds (ratio below 1:
    sooner)."""
    print(f"\n{title}")
    width = max(len(name) for name in results)
    start, rate = results[reference]
    for name, (seconds, sequences) in results.items():
        print(
            f"  {name:<{width}}  steady {sequences:10,.0f} sequences/s {sequences / rate:6.2f}x"
            f"   start-up {seconds:6.2f} s {seconds / start:5.2f}x"
        )


def report(title, results, reference):
    """Print `results` ({name: sequences/s}) and each one's ratio to `results[reference]`."""
    print(f"\n{title}")
    width = max(len(name) for name in results)
    for name, rate in results.items():
        ratio = rate / results[reference]
        print(f"  {name:<{width}}  {rate:12,.0f} sequences/s   {ratio:6.2f}x {reference}")


def interleaved_seconds(functions, rounds, warmup=1):
    """Seconds per call of each of `functions` (`{name: () -> anything}`), called in turns.

    Each function is first called `warmup` times (tracing, compilation, caches). Then every
    round calls each function once, the order rotated from round to round, so that load from
    other processes on a shared machine falls on all of them alike rather than on whichever
    happened to run during a busy spell. Returns `{name: [seconds of each timed call]}`.
    """
    names = list(functions)
    for name in names:
        for _ in range(warmup):
            functions[name]()
    seconds = {name: [] for name in names}
    for round_index in range(rounds):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            start = time.perf_counter()
            functions[name]()
            seconds[name].append(time.perf_counter() - start)
    return seconds


def percentile(values, fraction):
    """The `fraction` quantile of `values` (0.9: p90), linearly interpolated."""
    ordered = sorted(values)
    position = fraction * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def ratio_range(numerators, denominators):
    """(lowest, highest) of the ratios `numerators[i] / denominators[i]` of rounds taken in
    turns: the spread of a ratio whose median the benchmark prints. For a rate from seconds,
    pass the other library's seconds as numerators and lmpipe's as denominators."""
    ratios = [a / b for a, b in zip(numerators, denominators, strict=True)]
    return min(ratios), max(ratios)


def block_medians(values, blocks):
    """The medians of `values` cut into `blocks` runs of consecutive values: rounds of many
    single calls, whose call-by-call ratios would only show the noise of one call."""
    size = len(values) // blocks
    return [statistics.median(values[i * size : (i + 1) * size]) for i in range(blocks)]


def _cpu():
    """(model name, set of flags) of the first CPU in /proc/cpuinfo (Linux), else what
    `platform` knows and no flags."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as file:
            info = file.read()
    except OSError:
        return platform.processor() or platform.machine(), set()
    model = re.search(r"^model name\s*:\s*(.*)$", info, re.MULTILINE)
    flags = re.search(r"^flags\s*:\s*(.*)$", info, re.MULTILINE)
    return (
        model.group(1).strip() if model else platform.machine(),
        set(flags.group(1).split()) if flags else set(),
    )


def onednn_enabled():
    """Whether TensorFlow runs its oneDNN kernels in this process, or None where it cannot say.

    It asks `IsMklEnabled`, the switch TensorFlow's oneDNN kernels consult: TensorFlow's
    default for this build and CPU (on x86 Linux, on only for the CPUs it picks) unless
    `TF_ENABLE_ONEDNN_OPTS=0` or `=1` overrides it, which it follows both ways. The module is
    private; Intel's own check of an install asks it too.
    """
    try:
        from tensorflow.python.util import _pywrap_util_port
    except ImportError:
        return None
    return bool(_pywrap_util_port.IsMklEnabled())


def _gpus():
    """The names of the GPUs TensorFlow sees (`[]` on a CPU-only machine)."""
    import tensorflow as tf

    names = []
    for device in tf.config.list_physical_devices("GPU"):
        details = tf.config.experimental.get_device_details(device)
        names.append(details.get("device_name", device.name))
    return names


def _lmpipe_commit():
    """The short commit of the repository holding the benchmarks, with "+dirty" where tracked
    files outside the recorded results differ from it; None outside a git checkout."""

    def git(*arguments):
        return subprocess.run(
            ["git", "-C", BENCHMARKS_DIR, *arguments], capture_output=True, text=True, check=True
        ).stdout.strip()

    try:
        commit = git("rev-parse", "--short", "HEAD")
        # The results a run writes are not a change to the code it measured.
        changes = git(
            "status",
            "--porcelain",
            "--untracked-files=no",
            "--",
            ":/",
            ":(top,exclude)benchmarks/results",
            ":(top,exclude)benchmarks/RESULTS.md",
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return commit + ("+dirty" if changes else "")


def _version(distribution):
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def machine():
    """What a benchmark ran on: a JSON-ready dict of the CPU (model, usable cores, the flags of
    `CPU_FLAGS`), whether TensorFlow's oneDNN is on (and `TF_ENABLE_ONEDNN_OPTS` as set), the
    GPUs TensorFlow sees, the versions of Python, TensorFlow, Keras and of the alternative
    libraries imported so far, lmpipe's commit and the date (UTC)."""
    import keras
    import tensorflow as tf

    model, flags = _cpu()
    return {
        "cpu": model,
        "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "cpu_count": os.cpu_count(),
        "flags": {flag: flag in flags for flag in CPU_FLAGS},
        "onednn": onednn_enabled(),
        "onednn_env": os.environ.get("TF_ENABLE_ONEDNN_OPTS"),
        "gpus": _gpus(),
        "python": platform.python_version(),
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "alternatives": {
            distribution: _version(distribution)
            for module, distribution in ALTERNATIVES.items()
            if module in sys.modules
        },
        "lmpipe": _lmpipe_commit(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def describe_machine(machine):
    """One paragraph of the hardware and software of `machine()` that figures depend on: the
    same paragraph for every run on one machine and install (no date or commit)."""
    flags = machine["flags"]
    yes = {True: "yes", False: "no"}
    amx = flags["amx_bf16"] and flags["amx_tile"]
    onednn = {True: "on", False: "off", None: "unknown"}[machine["onednn"]]
    if machine.get("onednn_env") is not None:
        onednn += f" (TF_ENABLE_ONEDNN_OPTS={machine['onednn_env']})"
    gpus = ", ".join(machine["gpus"]) if machine["gpus"] else "none"
    cores = machine["cores"]
    if machine["cpu_count"] not in (None, cores):
        cores = f"{cores} of {machine['cpu_count']}"
    return (
        f"{machine['cpu']}, {cores} cores; AVX2 {yes[flags['avx2']]}, AVX-512F "
        f"{yes[flags['avx512f']]}, AVX-512 BF16 {yes[flags['avx512_bf16']]}, AMX (bf16, tile) "
        f"{yes[amx]}; TensorFlow oneDNN {onednn}; GPU: {gpus}. Python {machine['python']}, "
        f"TensorFlow {machine['tensorflow']}, Keras {machine['keras']}."
    )


def describe_run(machine):
    """The other libraries loaded, lmpipe's commit and the date of one run of `machine()`."""
    libraries = ", ".join(f"{name} {version}" for name, version in machine["alternatives"].items())
    return f"Libraries: {libraries or 'none'}; lmpipe {machine['lmpipe']}; {machine['date']}."


def print_machine():
    """Print, before the figures, the machine and software they were measured on."""
    current = machine()
    print(f"Machine: {describe_machine(current)} {describe_run(current)}\n", flush=True)


_GOAL = re.compile(r"(>=|<=|>|<)\s*(\d+(?:\.\d*)?)\s*x?")
_COMPARE = {
    ">=": lambda a, b: a >= b,
    ">": lambda a, b: a > b,
    "<=": lambda a, b: a <= b,
    "<": lambda a, b: a < b,
}


def parse_goal(text):
    """`{"text", "operator", "threshold"}` of a goal written as the issue writes it: ">= 1.2x"
    (lmpipe at least 1.2 times the other), "<= 0.8x", "> 1x"."""
    match = _GOAL.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"a goal is an operator and a ratio, like '>= 1.2x'; got {text!r}")
    return {"text": text.strip(), "operator": match.group(1), "threshold": float(match.group(2))}


def goal_met(goal, ratio):
    """Whether `ratio` meets `goal` (a dict of `parse_goal`)."""
    return _COMPARE[goal["operator"]](ratio, goal["threshold"])


class Results:
    """The ratios one run of a benchmark printed, written with `machine()` to
    `results/<benchmark>.json` for `run_all.py` to render.

    Example:

        results = Results("decoding")
        results.add("output tokens/s, beam search", 1.9, "keras-hub BeamSampler",
                    goal="> 1x", spread=(1.84, 1.95))
        results.write()
    """

    def __init__(self, benchmark):
        self.benchmark = benchmark
        self.figures = []
        self.tables = []

    def add_table(self, title, header, rows):
        """Keep a table of absolute figures (accuracies, ...) that RESULTS.md shows as it is,
        below the ratios: `header` a list of column names, `rows` lists of cells."""
        if any(len(row) != len(header) for row in rows):
            raise ValueError(f"table {title!r}: every row needs {len(header)} cells")
        self.tables.append({"title": title, "header": list(header), "rows": rows})

    def add(
        self, measure, ratio, alternative, goal=None, higher_is_better=True, spread=None, **extra
    ):
        """Record `ratio`, lmpipe's `measure` over `alternative`'s, as printed.

        `goal`: as the issue states it (">= 1.2x"; see `parse_goal`), or None.
        `higher_is_better`: True for rates, False for times and latencies, None where neither
        (a ratio to a formula); a goal's operator must point the same way.
        `spread`: (lowest, highest) ratio of a round (`ratio_range`), or None for one run.
        `extra`: JSON-ready values worth keeping beside it (absolute rates, MFU).
        """
        parsed = parse_goal(goal) if goal is not None else None
        if parsed is not None and higher_is_better != parsed["operator"].startswith(">"):
            raise ValueError(f"goal {goal!r} for {measure!r} contradicts higher_is_better")
        self.figures.append(
            {
                "measure": measure,
                "alternative": alternative,
                "ratio": float(ratio),
                "higher_is_better": higher_is_better,
                "spread": [float(spread[0]), float(spread[1])] if spread is not None else None,
                "goal": parsed,
                "extra": extra,
            }
        )

    def write(self, directory=RESULTS_DIR):
        """Write the figures and the machine to `directory/<benchmark>.json`; its path."""
        os.makedirs(directory, exist_ok=True)
        arguments = " ".join(sys.argv[1:])
        record = {
            "benchmark": self.benchmark,
            "status": "ok",
            "command": f"python benchmarks/{self.benchmark}.py {arguments}".strip(),
            "machine": machine(),
            "figures": self.figures,
        }
        if self.tables:
            record["tables"] = self.tables
        # NumPy values among the extras as plain numbers and lists, anything else as text.
        text = json.dumps(
            record, indent=2, default=lambda value: getattr(value, "tolist", value.__str__)()
        )
        path = os.path.join(directory, f"{self.benchmark}.json")
        with open(path, "w", encoding="utf-8") as file:
            file.write(text + "\n")
        print(f"\nFigures written to {os.path.relpath(path)}")
        return path
