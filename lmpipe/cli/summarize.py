"""`lmpipe summarize MODEL`: build a model of a preset and print its layers and parameters."""

from lmpipe.cli import flags, pretrain


def add_parser(commands, common):
    """Add `lmpipe summarize` to the `commands` sub-parsers."""
    summarize = commands.add_parser(
        "summarize",
        parents=[common],
        formatter_class=flags.Help,
        help="build a model and print its layers",
    )
    summarize.add_argument("model", choices=list(pretrain.PRESETS))
    summarize.add_argument("--preset", default=None, help="default: base (gpt and elmo: small)")
    summarize.set_defaults(run=run)


def run(arguments):
    from lmpipe import models

    config_class, builder = {
        "bert": (models.BertConfig, models.bert),
        "albert": (models.AlbertConfig, models.albert),
        "xlnet": (models.XLNetConfig, models.xlnet),
        "gpt": (models.GptConfig, models.gpt),
        "elmo": (models.ElmoConfig, models.elmo),
    }[arguments.model]
    if arguments.preset is None:
        arguments.preset = "small" if arguments.model in ("gpt", "elmo") else "base"
    if arguments.preset not in pretrain.PRESETS[arguments.model]:
        raise SystemExit(
            f"error: --preset {arguments.preset!r} is not a preset of {config_class.__name__}: "
            f"choose from {', '.join(pretrain.PRESETS[arguments.model])}"
        )
    model = builder(getattr(config_class, arguments.preset)())
    model.summary(expand_nested=False)
    print(f"{arguments.model}-{arguments.preset}: {models.count_parameters(model):,} parameters")
    return 0
