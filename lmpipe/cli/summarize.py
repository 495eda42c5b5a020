"""`lmpipe summarize MODEL`: build a model of a preset and print its layers and parameters."""

from lmpipe.cli import flags

HELP = "build a model and print its layers"


def add_parser(commands, common):
    """Add `lmpipe summarize` to the `commands` sub-parsers."""
    summarize = flags.add_verb(commands, "summarize", common, help=HELP)
    summarize.add_argument("model", choices=list(flags.MODEL_NAMES))
    summarize.add_argument("--preset", default=None, help="default: base (gpt and elmo: small)")
    summarize.set_defaults(run=run)


def run(arguments):
    """Build the model of `--preset` (default: the published model's) and summarize it."""
    from lmpipe.models import count_parameters
    from lmpipe.pipelines.families import MODELS

    declared = MODELS[arguments.model].command_line
    if arguments.preset is None:
        arguments.preset = declared.published_preset
    try:
        config = declared.config_class.from_preset(arguments.preset)
    except ValueError as error:
        raise SystemExit(f"error: {flags.as_flags(str(error))}") from None
    model = declared.build_model(config)
    model.summary(expand_nested=False)
    print(f"{arguments.model}-{arguments.preset}: {count_parameters(model):,} parameters")
    return 0
