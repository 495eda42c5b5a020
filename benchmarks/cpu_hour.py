"""Quality per CPU-hour: the held-out metric each family's `lmpipe pretrain` default reaches on
the bundled corpus after 10, 30 and 60 minutes of 2 CPU cores, beside keras-hub's BERT on the
same batches and nanoGPT's published CPU figure.

The budget is CPU time, so that a cell can be measured on a shared machine: a mark of M minutes
is reached when the training process has used 2 x M x 60 CPU-seconds (`time.process_time`, all
its threads; M wall minutes on 2 cores when the machine is alone and the step keeps both cores
busy). Counted: everything a training segment does (building and tracing the model, restoring
the checkpoint, the steps, the checkpoints; in a resumed invocation also reading the corpus and
the kept tokenizer); not counted: the evaluations at the marks, and the first invocation's
set-up (reading the corpus, learning the tokenizer) and the probe below. Wall seconds are kept
beside the CPU-seconds.

Each family trains its CLI default (`lmpipe pretrain FAMILY`, bert with the README main job's
`--recipe fast --seq-len 64`), through the CLI's own functions in this process: its held-out
documents (`--held-out 0.05`), its tokenizer, model, learning rate and batch size. One run per
family goes through the three marks: its learning-rate schedule (warmup 10%, linear decay) is
planned for the 60-minute mark's budget, the steps counted from a probe of `PROBE_STEPS` steps
(its CPU-seconds per step, the probe not counted); the 10- and 30-minute marks are points on
that run, not runs of their own. At a mark, training stops (a checkpoint is written), the model
is evaluated on the held-out documents as `lmpipe pretrain` does at its end, and the cell is
kept in `--work/FAMILY/cell.json`; a later invocation resumes from lmpipe's checkpoint
(`--until 30` after `--until 10`). The epochs flag only sets how often the CLI validates, so
the run is one epoch of the planned steps, validated at the marks.

keras-hub: `BertMaskedLM(BertBackbone(the sizes of lmpipe's model), preprocessor=None)`,
trained on lmpipe's masked-LM batches of the same corpus (the same tokenizer, masks and order;
keras-hub takes the masked-LM part, lmpipe's model also trains its sentence-pair head), with
the same AdamW schedule (`lmpipe.training.schedules.adamw`, planned for its own 60 minutes)
and budget definition, evaluated on the same held-out batches: the mean over batches of each
batch's mean cross-entropy over its real predictions, as lmpipe's `mlm_loss`.

GPT: besides the perplexity per BPE token, the loss per character (nats per token times the
held-out text's tokens per character), beside nanoGPT's CPU figure, quoted from the README of
karpathy/nanoGPT: a character-level model of 4 layers and 128 characters of context trained
on shakespeare_char on a CPU (a MacBook) for about 3 minutes reaches a validation loss of about
1.88 per character. The texts differ: nanoGPT's is tiny-shakespeare (1 MB, validation its last
10%), lmpipe's the bundled plays (held-out documents): the comparison is of orders.

word2vec trains whole passes (its default 5) with no stop inside one: its cell records where
the passes ended, and its metric is the Spearman correlation with WordSim-353's ratings.

Run: PYTHONPATH=. python benchmarks/cpu_hour.py [--until 10|30|60] [--families bert,gpt]
     [--quick]   (--kept: the table of the kept cells; --quick: a tiny run for a smoke test)
"""

import argparse
import contextlib
import io
import json
import os
import shlex
import sys
import tempfile
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

MARKS = (10, 30, 60)
CORES = 2
PROBE_STEPS = 30  # the first 5 not timed (tracing)
FAMILIES = ("bert", "keras_hub", "gpt", "albert", "xlnet", "elmo", "word2vec")
FLAGS = {"bert": "--recipe fast --seq-len 64", "keras_hub": "--recipe fast --seq-len 64"}
QUICK_FLAGS = "--preset tiny --seq-len 32 --batch-size 8 --vocab-size 300 --checkpoint-every 5"
QUICK_SECONDS_PER_MARK = 1.0  # --quick: a mark of M "minutes" is M CPU-seconds
# The held-out figures each family's table rows show (all of them are kept in the cells).
HEADLINE = {
    "bert": ("mlm_perplexity", "mlm_accuracy"),
    "keras_hub": ("mlm_perplexity", "mlm_accuracy"),
    "albert": ("mlm_perplexity", "mlm_accuracy"),
    "xlnet": ("plm_perplexity", "plm_accuracy"),
    "gpt": ("loss_per_character", "perplexity"),
    "elmo": ("forward_perplexity", "backward_perplexity"),
    "word2vec": ("spearman",),
}
NAMES = {
    "bert": "lmpipe BERT (--recipe fast --seq-len 64)",
    "keras_hub": "keras-hub BertMaskedLM, same batches",
    "gpt": "lmpipe GPT",
    "albert": "lmpipe ALBERT",
    "xlnet": "lmpipe XLNet",
    "elmo": "lmpipe ELMo",
    "word2vec": "lmpipe word2vec",
}
NANOGPT = (
    "nanoGPT, its README: shakespeare_char on a CPU (MacBook), 4 layers, 128 characters of "
    "context, about 3 minutes"
)
NANOGPT_LOSS = 1.88


def mark_seconds(mark, quick=False):
    """The CPU-seconds of training a mark of `mark` minutes stands for."""
    return mark * QUICK_SECONDS_PER_MARK if quick else CORES * mark * 60


# Cells -----------------------------------------------------------------------------------------


def load_cell(directory):
    """The kept state of a family's run in `directory`: CPU- and wall seconds trained, steps,
    the planned steps, whether the schedule ended, and the figures of each mark reached."""
    try:
        with open(os.path.join(directory, "cell.json"), encoding="utf-8") as file:
            return json.load(file)
    except FileNotFoundError:
        return {
            "cpu_seconds": 0.0,
            "wall_seconds": 0.0,
            "steps": 0,
            "planned_steps": None,
            "finished": False,
            "marks": {},
        }


def save_cell(directory, cell):
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "cell.json")
    with open(path + ".tmp", "w", encoding="utf-8") as file:
        json.dump(cell, file, indent=1)
    os.replace(path + ".tmp", path)


def advance(directory, trainer, limits, until):
    """Train `trainer` up to each mark of `limits` (`{minutes: CPU-seconds}`) not above
    `until` that the cell in `directory` has not reached, and evaluate it there; the cell,
    kept after each segment and each mark.

    `trainer`: `plan(budget) -> (planned steps, probe record)`, `train(seconds, planned,
    progress) -> (steps done, schedule finished)`, training until the process has used
    `seconds` more CPU-seconds (`progress(cpu_seconds)` called on the way so that a killed
    run keeps its count), and `evaluate() -> {metric: value}`.
    """
    cell = load_cell(directory)
    has_model = False
    for mark, limit in limits.items():
        if mark > until or str(mark) in cell["marks"]:
            continue
        if cell["planned_steps"] is None:
            cell["planned_steps"], cell["probe"] = trainer.plan(max(limits.values()))
            save_cell(directory, cell)
        if not cell["finished"] and cell["cpu_seconds"] < limit:
            train_segment(directory, cell, trainer, limit)
            has_model = True
        elif cell["finished"] and not has_model:
            # A schedule that ended in an earlier invocation: its model, from the checkpoint
            # (nothing is left to train).
            trainer.train(0.0, cell["planned_steps"], lambda _: None)
            has_model = True
        cpu, wall = time.process_time(), time.time()
        metrics = trainer.evaluate()
        cell["marks"][str(mark)] = {
            "metrics": metrics,
            "cpu_seconds": cell["cpu_seconds"],
            "wall_seconds": cell["wall_seconds"],
            "steps": cell["steps"],
            "schedule_finished": cell["finished"],
            "evaluation_cpu_seconds": time.process_time() - cpu,
            "evaluation_wall_seconds": time.time() - wall,
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        save_cell(directory, cell)
        print(
            f"{trainer.name} {mark} min: {format_metrics(metrics)} "
            f"({cell['steps']:,} steps, {cell['cpu_seconds']:.0f} CPU-s, "
            f"{cell['wall_seconds'] / 60:.1f} wall min)",
            flush=True,
        )
    return cell


def train_segment(directory, cell, trainer, limit):
    """Train until the cell has used `limit` CPU-seconds (or the schedule ends), adding the
    segment's CPU- and wall seconds to the cell as it goes."""
    base_cpu, base_wall = cell["cpu_seconds"], cell["wall_seconds"]
    cpu, wall = time.process_time(), time.time()

    def progress(_):
        cell["cpu_seconds"] = base_cpu + time.process_time() - cpu
        cell["wall_seconds"] = base_wall + time.time() - wall
        save_cell(directory, cell)

    steps, finished = trainer.train(limit - base_cpu, cell["planned_steps"], progress)
    progress(None)
    cell["steps"], cell["finished"] = steps, finished
    save_cell(directory, cell)


def format_metrics(metrics):
    return ", ".join(f"{name} {value:.4g}" for name, value in sorted(metrics.items()))


def budget_callback(seconds, progress, every=25):
    """A Keras callback that stops training once this process has used `seconds` more
    CPU-seconds than when it was made, calling `progress(cpu_seconds)` every `every` batches."""
    import keras

    class CpuBudget(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.start = time.process_time()
            self.batches = 0

        def on_train_batch_end(self, batch, logs=None):
            used = time.process_time() - self.start
            self.batches += 1
            if self.batches % every == 0:
                progress(used)
            if used >= seconds:
                self.model.stop_training = True

    return CpuBudget()


def step_seconds_callback(skip=5):
    """A Keras callback that keeps the CPU-seconds of each batch after the first `skip`."""
    import keras

    class StepSeconds(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.times = []

        def on_train_batch_end(self, batch, logs=None):
            self.times.append(time.process_time())

        def per_step(self):
            times = self.times[skip:]
            return (times[-1] - times[0]) / (len(times) - 1)

    return StepSeconds()


def planned_steps(budget, per_step):
    """Steps for `budget` CPU-seconds at `per_step` CPU-seconds a step (at least 10)."""
    return max(10, int(budget / per_step))


# lmpipe ----------------------------------------------------------------------------------------


class LmpipeTrainer:
    """`lmpipe pretrain FAMILY FLAGS --out OUT`'s corpus, held-out documents, tokenizer and
    pipeline, made by the CLI's functions; trained in segments from its checkpoints."""

    def __init__(self, family, out, flags=""):
        self.name = family
        self.family = family
        self.out = out
        self.flags = flags
        self.pipe = None

    def set_up(self):
        """Parse the command, read the corpus, hold out documents, learn (or read back) the
        tokenizer and make the pipeline, as `lmpipe pretrain` does."""
        if self.pipe is not None:
            return
        from lmpipe.cli import pretrain, runs
        from lmpipe.cli.held_out import held_out_documents, validation_documents
        from lmpipe.cli.main import build_parser

        argv = ["pretrain", self.family, "--out", self.out, *shlex.split(self.flags)]
        arguments = build_parser().parse_args(argv)
        pretrain.resolve_flags(arguments, argv)
        arguments.flags_given = {flag.split("=", 1)[0] for flag in argv if flag.startswith("--")}
        self.arguments = arguments
        self.strategy = runs.start_strategy(arguments.strategy)
        quiet = io.StringIO()
        with contextlib.redirect_stdout(quiet):
            if self.family == "word2vec":
                family = pretrain._family(arguments)
                self.pipe = family(**family.command_line.options(arguments))
                self.corpus = runs.read_corpus(
                    arguments.corpus, arguments.format, arguments.max_line_bytes
                )
                return
            pretrain.check_arguments(arguments, self.strategy)
            whole = runs.read_corpus(arguments.corpus, arguments.format, arguments.max_line_bytes)
            corpus, validation = held_out_documents(whole, arguments)
            tokenizer = runs.run_tokenizer(arguments, corpus)
            pipe = pretrain._pipeline(arguments, tokenizer)
            self.corpus, self.validation = validation_documents(
                pipe, whole, corpus, validation, arguments
            )
        self.pipe = pipe

    def fit_options(self, checkpoint_dir, callbacks):
        from lmpipe.cli import runs

        options = runs.fit_options(self.arguments, self.strategy)
        options.update(epochs=1, checkpoint_dir=checkpoint_dir, callbacks=callbacks, verbose=0)
        options["checkpoint_every"] = self.arguments.checkpoint_every
        return options

    def plan(self, budget):
        """The steps of `budget` CPU-seconds, from a probe of `PROBE_STEPS` steps."""
        self.set_up()
        cpu = time.process_time()
        if self.family == "word2vec":
            return self.arguments.epochs, {"epochs": self.arguments.epochs}
        timer = step_seconds_callback()
        with tempfile.TemporaryDirectory() as probe:
            options = self.fit_options(probe, (timer,))
            self.pipe.fit(self.corpus, steps_per_epoch=PROBE_STEPS, **options)
        per_step = timer.per_step()
        record = {"cpu_seconds_per_step": per_step, "cpu_seconds": time.process_time() - cpu}
        return planned_steps(budget, per_step), record

    def train(self, seconds, steps, progress):
        start = time.process_time()
        self.set_up()
        left = seconds - (time.process_time() - start)
        checkpoints = os.path.join(self.out, "checkpoints")
        if self.family == "word2vec":  # whole passes: no stop inside one
            self.pipe.fit(
                self.corpus,
                batch_size=self.arguments.batch_size,
                epochs=steps,
                strategy=self.strategy,
                checkpoint_dir=checkpoints,
                verbose=False,
            )
            return steps, True
        callback = budget_callback(left, progress)
        self.pipe.fit(
            self.corpus, steps_per_epoch=steps, **self.fit_options(checkpoints, (callback,))
        )
        done = int(self.pipe.model.optimizer.iterations.numpy())
        return done, done >= steps

    def evaluate(self):
        """The held-out metrics `lmpipe pretrain` prints at its end (with the baselines
        `without_context_*`); GPT's per character too."""
        import numpy as np

        self.set_up()
        if self.family == "word2vec":
            similarity = self.pipe.evaluate_similarity()
            return {"spearman": similarity["spearman"], "pairs": similarity["pairs"]}
        pipe, batch_size = self.pipe, self.arguments.batch_size
        batch_size = getattr(pipe, "batch_size", None) or batch_size
        metrics = pipe.evaluate(self.validation, batch_size=batch_size)
        if hasattr(pipe, "baselines"):
            baselines = pipe.baselines(self.validation, batch_size=batch_size)
            metrics |= {f"without_context_{name}": value for name, value in baselines.items()}
        if self.family == "xlnet":  # the CLI prints the loss only
            metrics["plm_perplexity"] = float(np.exp(metrics["plm_loss"]))
        if self.family == "gpt":
            tokens, characters = token_and_character_counts(pipe.tokenizer, self.validation)
            metrics["tokens_per_character"] = tokens / characters
            metrics["loss_per_character"] = metrics["next_token_loss"] * tokens / characters
        return metrics


def token_and_character_counts(tokenizer, corpus):
    """The tokens and characters of `corpus`'s sentences, a separator token and a newline
    character between sentences."""
    sentences = [sentence for document in corpus.iter_documents() for sentence in document]
    tokens = tokenizer.tokenize(sentences).row_lengths().numpy().sum() + len(sentences)
    return int(tokens), sum(len(sentence) + 1 for sentence in sentences)


# keras-hub -------------------------------------------------------------------------------------

KERAS_HUB_INPUTS = ("token_ids", "padding_mask", "segment_ids", "mask_positions")


class KerasHubTrainer:
    """keras-hub's BertMaskedLM of lmpipe's BERT's sizes, on lmpipe's BERT batches."""

    name = "keras_hub"

    def __init__(self, out, flags):
        self.data = LmpipeTrainer("bert", out, flags)
        self.out = out
        self.model = None

    def build(self, steps):
        import keras
        import keras_hub

        from lmpipe.training.schedules import adamw

        pipe, arguments = self.data.pipe, self.data.arguments
        config = pipe.model_config if hasattr(pipe, "model_config") else pipe.config
        keras.utils.set_random_seed(arguments.seed)
        backbone = keras_hub.models.BertBackbone(
            vocabulary_size=config.vocabulary_size,
            num_layers=config.num_layers,
            num_heads=config.num_heads,
            hidden_dim=config.hidden_dim,
            intermediate_dim=config.intermediate_dim,
            dropout=config.dropout,
            max_sequence_length=config.max_sequence_length,
        )
        model = keras_hub.models.BertMaskedLM(backbone=backbone, preprocessor=None)
        optimizer = adamw(arguments.learning_rate, steps, max(1, steps // 10), 0.01, 1.0)
        model.compile(
            optimizer=optimizer,
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        )
        model.optimizer.build(model.trainable_variables)
        return model

    def batches(self, skip=0):
        pipe = self.data.pipe

        def split(x, y):
            return {name: x[name] for name in KERAS_HUB_INPUTS}, y["mask_ids"], y["mask_weights"]

        dataset = pipe.training_batches(self.data.corpus, self.data.arguments.batch_size, None)
        return dataset.skip(skip).map(split)

    def plan(self, budget):
        self.data.set_up()
        cpu = time.process_time()
        model = self.build(1000)
        timer = step_seconds_callback()
        model.fit(self.batches(), steps_per_epoch=PROBE_STEPS, callbacks=[timer], verbose=0)
        per_step = timer.per_step()
        record = {"cpu_seconds_per_step": per_step, "cpu_seconds": time.process_time() - cpu}
        return planned_steps(budget, per_step), record

    def train(self, seconds, steps, progress):
        import keras
        import tensorflow as tf

        start = time.process_time()
        self.data.set_up()
        if self.model is None:
            self.model = self.build(steps)
            self.checkpoint = tf.train.Checkpoint(model=self.model, optimizer=self.model.optimizer)
            self.manager = tf.train.CheckpointManager(
                self.checkpoint, os.path.join(self.out, "keras_hub_checkpoints"), max_to_keep=1
            )
            if self.manager.latest_checkpoint:
                self.checkpoint.restore(self.manager.latest_checkpoint).assert_consumed()
        done = int(self.model.optimizer.iterations.numpy())
        if done >= steps:
            return done, True
        every = self.data.arguments.checkpoint_every
        manager = self.manager

        class Save(keras.callbacks.Callback):
            def on_train_batch_end(self, batch, logs=None):
                if (batch + 1) % every == 0:
                    manager.save()

        left = seconds - (time.process_time() - start)
        self.model.fit(
            self.batches(skip=done),
            steps_per_epoch=steps - done,
            callbacks=[budget_callback(left, progress), Save()],
            verbose=0,
        )
        self.manager.save()
        done = int(self.model.optimizer.iterations.numpy())
        return done, done >= steps

    def evaluate(self):
        """Held-out masked-LM loss and perplexity on lmpipe's held-out batches: the mean over
        batches of each batch's mean cross-entropy over its real predictions."""
        import numpy as np
        import tensorflow as tf

        data = self.data
        batches = data.pipe.evaluation_batches(data.validation, data.arguments.batch_size, None)
        model = self.model
        losses, correct, counted = [], 0.0, 0.0

        @tf.function
        def batch_loss(x, ids, weights):
            logits = model({name: x[name] for name in KERAS_HUB_INPUTS}, training=False)
            entropy = tf.nn.sparse_softmax_cross_entropy_with_logits(ids, logits)
            hits = tf.cast(tf.equal(tf.argmax(logits, -1, output_type=ids.dtype), ids), tf.float32)
            weights = tf.cast(weights, tf.float32)
            return (
                tf.reduce_sum(entropy * weights) / tf.reduce_sum(weights),
                tf.reduce_sum(hits * weights),
                tf.reduce_sum(weights),
            )

        for x, y in batches:
            loss, hits, weight = batch_loss(x, y["mask_ids"], y["mask_weights"])
            losses.append(float(loss))
            correct += float(hits)
            counted += float(weight)
        mlm_loss = float(np.mean(losses))
        return {
            "mlm_loss": mlm_loss,
            "mlm_perplexity": float(np.exp(mlm_loss)),
            "mlm_accuracy": correct / counted,
        }


# Table -----------------------------------------------------------------------------------------


def trainer_for(family, work, quick):
    flags = FLAGS.get(family, "")
    if quick and family != "word2vec":
        flags = " ".join(flag for flag in (flags, QUICK_FLAGS) if flag)
        flags = flags.replace("--seq-len 64 ", "")
    out = os.path.join(work, family)
    if family == "keras_hub":
        return KerasHubTrainer(out, flags)
    return LmpipeTrainer(family, out, flags)


def table(cells, marks=MARKS):
    """Rows: family, command, held-out metric, without context, each mark's value (steps,
    wall minutes); a nanoGPT row after GPT's."""
    rows = []
    for family, cell in cells.items():
        command = "(same batches as lmpipe BERT)"
        if family != "keras_hub":
            command = f"lmpipe pretrain {family} {FLAGS.get(family, '')}".strip()
        for metric in HEADLINE[family]:
            rows.append([NAMES[family], command, metric, *_values(cell, metric, marks)])
        if family == "gpt":
            rows.append(
                [NANOGPT, "(published)", "loss_per_character", "", f"{NANOGPT_LOSS} at ~3 min"]
                + [""] * (len(marks) - 1)
            )
    return {
        "title": "held-out metric after 10, 30 and 60 minutes of 2 CPU cores (2 x M x 60 "
        "CPU-seconds of the training process; blank: not measured)",
        "header": ["model", "command", "held-out metric", "without context", *map(_mark, marks)],
        "rows": rows,
    }


def _values(cell, metric, marks):
    """The baseline without context (the last mark's) and each mark's value (steps, CPU-
    seconds, wall minutes), "" where not measured."""
    values, baseline = [], ""
    for mark in marks:
        reached = cell["marks"].get(str(mark))
        figures = reached["metrics"] if reached else {}
        if metric not in figures:
            values.append("")
            continue
        ended = ", schedule ended" if reached["schedule_finished"] else ""
        values.append(
            f"{figures[metric]:.3f} ({reached['steps']:,} steps, "
            f"{reached['cpu_seconds']:,.0f} CPU-s, {reached['wall_seconds'] / 60:.0f} wall "
            f"min{ended})"
        )
        if f"without_context_{metric}" in figures:
            baseline = f"{figures[f'without_context_{metric}']:.3f}"
    return [baseline, *values]


def _mark(mark):
    return f"{mark} min"


def print_table(result):
    print(f"\n{result['title']}")
    for row in [result["header"], *result["rows"]]:
        print(" | ".join(str(cell) for cell in row))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", default=",".join(FAMILIES))
    parser.add_argument("--until", type=int, default=10, choices=MARKS)
    parser.add_argument(
        "--work",
        default=os.path.join("runs", "cpu_hour"),
        help="where each family's run and cell are kept (a rerun continues)",
    )
    parser.add_argument("--quick", action="store_true", help="tiny models and budgets")
    parser.add_argument("--kept", action="store_true", help="train nothing: the kept cells")
    parser.add_argument("--no-write", action="store_true", help="do not write the JSON figures")
    arguments = parser.parse_args(argv)
    families = [name.strip() for name in arguments.families.split(",") if name.strip()]
    unknown = [name for name in families if name not in FAMILIES]
    if unknown:
        raise SystemExit(f"error: --families: unknown {unknown}, choose from {FAMILIES}")
    if arguments.quick:
        arguments.work = os.path.join(arguments.work, "quick")
    limits = {mark: mark_seconds(mark, arguments.quick) for mark in MARKS}
    cells = {}
    for family in families:
        directory = os.path.join(arguments.work, family)
        if arguments.kept:
            cells[family] = load_cell(directory)
            continue
        trainer = trainer_for(family, arguments.work, arguments.quick)
        cells[family] = advance(directory, trainer, limits, arguments.until)
    result = table(cells)
    print_table(result)
    if arguments.quick or arguments.no_write:
        return
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from measure import RESULTS_DIR, Results

    # Every kept cell, not only this invocation's families.
    kept = {
        family: load_cell(os.path.join(arguments.work, family))
        for family in FAMILIES
        if os.path.exists(os.path.join(arguments.work, family, "cell.json"))
    }
    results = Results("cpu_hour")
    for mark in MARKS:
        bert, hub = (kept.get(name, {}).get("marks", {}).get(str(mark)) for name in FAMILIES[:2])
        if bert and hub:
            ratio = bert["metrics"]["mlm_perplexity"] / hub["metrics"]["mlm_perplexity"]
            results.add(
                f"held-out MLM perplexity after {mark} min of 2 CPU cores",
                ratio,
                "keras-hub BertMaskedLM, same batches and budget",
                higher_is_better=False,
            )
    gpt = kept.get("gpt", {}).get("marks", {}).get("10")
    if gpt:
        results.add(
            "GPT held-out loss per character after 10 min of 2 CPU cores",
            gpt["metrics"]["loss_per_character"] / NANOGPT_LOSS,
            f"{NANOGPT} (1.88; another text)",
            higher_is_better=False,
        )
    result = table(kept)
    previous = os.path.join(RESULTS_DIR, "cpu_hour.json")
    if os.path.exists(previous):
        with open(previous, encoding="utf-8") as file:
            previous = json.load(file)
        result["rows"], results.figures = carried_over(previous, kept, result, results.figures)
    results.add_table(result["title"], result["header"], result["rows"])
    results.write()


def carried_over(previous, kept, result, figures):
    """`(rows, figures)`: this table's rows and figures, with those of the families that have
    no cell in --work taken as they were from the `previous` results (a family measured in
    another run folder, e.g. on another machine of the kind, keeps its row when others are
    measured again); rows in the order of `FAMILIES`."""
    family_of = {name: family for family, name in NAMES.items()} | {NANOGPT: "gpt"}
    old_rows = previous["tables"][0]["rows"] if previous.get("tables") else []
    rows = []
    for family in FAMILIES:
        source = result["rows"] if family in kept else old_rows
        rows += [row for row in source if family_of.get(row[0]) == family]
    measured = {figure["measure"] for figure in figures}
    figures = figures + [
        figure
        for figure in previous.get("figures", [])
        if figure["measure"] not in measured
        and not any(family in kept for family in _figure_families(figure["measure"]))
    ]
    return rows, figures


def _figure_families(measure):
    """The families whose cells a figure of `main` is computed from."""
    return ("gpt",) if measure.startswith("GPT") else FAMILIES[:2]


if __name__ == "__main__":
    main()
