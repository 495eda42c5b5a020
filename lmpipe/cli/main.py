"""The `lmpipe` command: pretrain, train translation, fine-tune, evaluate, export, predict,
and summarize models.

lmpipe pretrain bert --out runs/bert           # bundled Shakespeare corpus, then export
lmpipe pretrain albert --corpus 'wiki/*.txt' --vocab-size 30000 --steps 100000
lmpipe pretrain xlnet --out runs/xlnet --reuse-len 64   # permutation LM with memory
lmpipe pretrain gpt --out runs/gpt --seq-len 64          # next-token LM; elmo: both ways
lmpipe pretrain gpt --pretrained hf-gpt2-folder --corpus 'mine/*.txt' --out runs/my-gpt2
lmpipe train translation --pairs en-es.tsv --out runs/mt   # TSV pairs, or the Bible
lmpipe finetune classify --pretrained runs/bert --train reviews.csv --out runs/reviews
lmpipe finetune tokens --pretrained runs/bert --train eng.train --out runs/ner
lmpipe finetune spans --pretrained hf-bert-folder --train train-v1.1.json --out runs/squad
lmpipe evaluate runs/bert --steps 20
lmpipe export runs/bert/pipeline serving/bert
lmpipe predict runs/bert "To be, or not to [MASK]."   # fill-mask, classify, generate, ...
lmpipe predict runs/squad "Who says it?" --context "HAMLET. To be, or not to be."
lmpipe summarize bert --preset base
"""

import argparse
import os
import re
import signal
import sys

from lmpipe.cli import (
    data_service,
    evaluate,
    export,
    finetune,
    flags,
    kernels,
    predict,
    pretrain,
    summarize,
    train,
)
from lmpipe.cli.cluster import leaving_together
from lmpipe.cli.paths import check_paths

VERBS = (pretrain, finetune, train, export, predict, evaluate, data_service, summarize, kernels)
"""The verbs' modules, in the order `lmpipe --help` lists them; each adds its sub-parser."""


def build_parser():
    """The argument parser of the `lmpipe` command."""
    from lmpipe import __version__

    parser = argparse.ArgumentParser(prog="lmpipe", description=__doc__, formatter_class=flags.Help)
    parser.add_argument("--version", action="version", version=f"lmpipe {__version__}")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--verbose", action="store_true", help="show TensorFlow's native start-up log lines"
    )
    common.add_argument(
        "--debug", action="store_true", help="show the Python traceback of an error"
    )
    commands = parser.add_subparsers(dest="command", required=True)
    for verb in VERBS:
        verb.add_parser(commands, common)
    return parser


def main(argv=None):
    """Entry point of the `lmpipe` command."""
    parser = build_parser()
    arguments, extra = parser.parse_known_args(argv)
    if arguments.command == "predict":
        # Texts may come after the options too (argparse gives them to no positional there).
        arguments.texts += [text for text in extra if not text.startswith("-")]
        extra = [text for text in extra if text.startswith("-")]
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    check_paths(arguments)  # before TensorFlow starts and any data is read
    if arguments.command == "pretrain":
        # The families' rules: after the paths, as they import the families (TensorFlow).
        pretrain.resolve_flags(arguments, sys.argv[1:] if argv is None else list(argv))
    # The flags given (defaults that depend on the data may yield to them).
    given = sys.argv[1:] if argv is None else list(argv)
    arguments.flags_given = {argument.split("=", 1)[0] for argument in given}
    if argv is None:
        # Run as the command (not called from Python): SIGTERM (what schedulers send) stops
        # it as Ctrl-C does, with the message of where a rerun resumes.
        signal.signal(signal.SIGTERM, _terminate)
    if argv is None and not arguments.verbose:
        # Before TensorFlow starts.
        from lmpipe.cli.console import hide_native_logs

        hide_native_logs()
    try:
        with leaving_together():
            return arguments.run(arguments)
    except KeyboardInterrupt as interrupt:
        if arguments.debug:
            raise
        print(_interrupted(arguments), file=sys.stderr)
        return 143 if isinstance(interrupt, Terminated) else 130
    except Exception as error:  # noqa: BLE001  (every error is one line without --debug)
        if arguments.debug:
            raise
        message = error.args[0] if isinstance(error, KeyError) and error.args else error
        raise SystemExit(
            f"error: {flags.as_flags(str(message))} ({type(error).__name__}; --debug shows where)"
        ) from None


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the program is, as Ctrl-C raises `KeyboardInterrupt`."""


def _terminate(signum, frame):
    del signum, frame
    raise Terminated


def _interrupted(arguments):
    """What Ctrl-C (or SIGINT) prints: where a rerun of the same command goes on from."""
    out = getattr(arguments, "out", None)
    if arguments.command not in ("pretrain", "finetune", "train") or out is None:
        return "interrupted"
    checkpoints = os.path.join(out, "checkpoints")
    steps = [
        int(match.group(1))
        for name in (os.listdir(checkpoints) if os.path.isdir(checkpoints) else [])
        if (match := re.fullmatch(r"ckpt-(\d+)\.index", name))
    ]
    if not steps:
        return "interrupted before the first checkpoint; run the same command to start again"
    return (
        f"interrupted; the last checkpoint is step {max(steps)} ({checkpoints}); run the same "
        "command to resume from it"
    )


if __name__ == "__main__":
    sys.exit(main())
