"""The `lmpipe` command."""

import argparse
import sys


def _summarize(arguments):
    from lmpipe import models

    config_class, builder = {
        "bert": (models.BertConfig, models.bert),
        "albert": (models.AlbertConfig, models.albert),
    }[arguments.model]
    preset = getattr(config_class, arguments.preset, None)
    if preset is None:
        raise SystemExit(
            f"error: --preset {arguments.preset!r} is not a preset of {config_class.__name__}"
        )
    model = builder(preset())
    model.summary(expand_nested=False)
    print(f"{arguments.model}-{arguments.preset}: {models.count_parameters(model):,} parameters")
    return 0


def build_parser():
    """The argument parser of the `lmpipe` command."""
    parser = argparse.ArgumentParser(prog="lmpipe", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    summarize = commands.add_parser("summarize", help="build a model and print its layers")
    summarize.add_argument("model", choices=["bert", "albert"])
    summarize.add_argument(
        "--preset",
        default="base",
        help="tiny, small, base, large (bert); tiny, base .. xxlarge (albert)",
    )
    summarize.set_defaults(run=_summarize)
    return parser


def main(argv=None):
    """Entry point of the `lmpipe` command."""
    arguments = build_parser().parse_args(argv)
    return arguments.run(arguments)


if __name__ == "__main__":
    sys.exit(main())
