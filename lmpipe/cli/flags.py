"""The flags several verbs share, and how a flag's errors read.

`Help` shows every default; `add_training_options` adds the training group (`--out`,
`--strategy`, `--batch-size`, ...); `check_positive`, `check_steps` and `as_flags` turn a bad
value or a pipeline's message into the command's one-line error naming the flag. Standard
library only: the command line is parsed and checked before TensorFlow is imported.
"""

import argparse

MODEL_NAMES = ("bert", "albert", "xlnet", "gpt", "elmo")
"""The model families of `lmpipe pretrain` and `lmpipe summarize`, as they declare their names
(`lmpipe.pipelines.families.MODELS`, which a test holds this equal to): argparse needs the
choices before TensorFlow, which the families import, may be."""


OPTION_FLAGS = {
    "preset": "--preset",
    "pretrained": "--pretrained",
    "worker_addresses": "--worker-addresses",
    "workers": "--workers",
    "seq_len": "--seq-len",
    "reuse_len": "--reuse-len",
    "mem_len": "--mem-len",
    "batch_size": "--batch-size",
    "accumulation_steps": "--accumulation-steps",
    "data_service": "--data-service",
    "learning_rate": "--learning-rate",
    "checkpoint_every": "--checkpoint-every",
    "method": "--method",
    "vector_size": "--vector-size",
    "window": "--window",
    "min_count": "--min-count",
    "negative": "--negative",
    "update": "--update",
    "alpha": "--learning-rate",
    "epochs": "--epochs",
    "vocab_size": "--vocab-size",
    "max_source_len": "--max-source-len",
    "max_target_len": "--max-target-len",
    "held_out": "--held-out",
    "beam_width": "--beam-width",
    "doc_stride": "--doc-stride",
    "max_query_len": "--max-query-len",
    "max_answer_len": "--max-answer-len",
    "no_answer": "--no-answer",
}


def as_flags(message):
    """A pipeline's message with its argument names spelled as the command's options."""
    for name, flag in OPTION_FLAGS.items():
        message = message.replace(f"`{name}`", flag)
    return message


def add_verb(commands, name, *parents, **texts):
    """Add the verb `name` to the sub-parsers `commands`: with the flags of `parents`, every
    default in its help, and `texts` (its `help` in the list of verbs, its `description`)."""
    return commands.add_parser(name, parents=list(parents), formatter_class=Help, **texts)


def add_run(parser):
    """Add the positional RUN: the saved pipeline a verb reads."""
    parser.add_argument(
        "run_dir", metavar="RUN", help="a saved pipeline, or the --out of a training command"
    )


def add_label_columns(parser, texts, pairs, labels):
    """Add the flags that name the columns of a labelled file, with these help texts."""
    parser.add_argument("--text-column", default="text", help=texts)
    parser.add_argument("--pair-column", default=None, help=pairs)
    parser.add_argument("--label-column", default="label", help=labels)


def add_tag_fields(parser, words, tags):
    """Add the flags that name the fields of a JSONL file of tagged sentences."""
    parser.add_argument("--tokens-field", default="tokens", help=words)
    parser.add_argument("--tags-field", default="tags", help=tags)


def check_positive(arguments, *names):
    """Refuse a flag of `names` below 1 (None: not given), naming it: `--top-k` for `top_k`."""
    for name in names:
        value = getattr(arguments, name)
        if value is not None and value < 1:
            flag = "--" + name.replace("_", "-")
            raise SystemExit(f"error: {flag} must be a positive integer, got {value}")


def check_steps(steps, epochs):
    """Refuse `--steps` that do not split into `--epochs` equal epochs, suggesting values."""
    if steps < 1 or epochs < 1:
        raise SystemExit(
            f"error: --steps and --epochs must be positive, got --steps {steps} --epochs {epochs}"
        )
    if steps % epochs == 0:
        return
    below, above = steps // epochs * epochs, (steps // epochs + 1) * epochs
    step_choices = " or ".join(str(value) for value in (below, above) if value >= epochs)
    divisors = [d for d in range(1, steps + 1) if steps % d == 0]
    fewer = max(d for d in divisors if d < epochs)
    more = [d for d in divisors if d > epochs]
    epoch_choices = " or ".join(str(value) for value in [fewer, *more[:1]])
    raise SystemExit(
        f"error: --steps {steps} does not split into --epochs {epochs} equal epochs (an epoch "
        f"trains --steps / --epochs steps): use --steps {step_choices} with --epochs {epochs}, "
        f"or --epochs {epoch_choices} with --steps {steps}"
    )


def add_training_options(
    parser,
    batch_default,
    learning_rate,
    batch_help="global batch size",
    learning_rate_help="peak learning rate",
    seq_len=True,
):
    parser.add_argument("--out", required=True, help="run directory (checkpoints, logs, ...)")
    parser.add_argument(
        "--strategy",
        default="none",
        choices=["none", "mirrored", "multi_worker"],
        help="tf.distribute strategy; multi_worker reads TF_CONFIG",
    )
    parser.add_argument("--batch-size", type=int, default=batch_default, help=batch_help)
    parser.add_argument(
        "--accumulation-steps",
        type=int,
        default=1,
        help="batches of --batch-size whose gradients make one update (the update of a batch "
        "this many times larger, with the memory of one); --steps counts updates",
    )
    parser.add_argument(
        "--learning-rate", type=float, default=learning_rate, help=learning_rate_help
    )
    parser.add_argument(
        "--data-service",
        default=None,
        metavar="HOST:PORT",
        help="build the training batches on the workers of this tf.data service dispatcher "
        "(lmpipe data-service)",
    )
    if seq_len:
        parser.add_argument(
            "--seq-len", type=int, default=128, help="tokens per example, special tokens included"
        )
    parser.add_argument(
        "--seed", type=int, default=0, help="seed of the data order, masks and initial weights"
    )
    parser.add_argument(
        "--export-dir", default=None, help="TF Serving base directory (default: OUT/serving)"
    )
    parser.add_argument("--no-export", action="store_true", help="skip the export")
    parser.add_argument(
        "--export-outputs",
        nargs="+",
        default=None,
        metavar="NAME",
        help="the outputs the export serves (encoders; default: all, e.g. sequence_output, "
        "pooled_output)",
    )


class Help(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """Descriptions as written, and every flag's default in its help (unless the help says
    it, or there is none to say: None, or off for a switch)."""

    def _get_help_string(self, action):
        text = action.help or ""
        if action.default is None or action.default is False or "default" in text:
            return text
        return super()._get_help_string(action)
