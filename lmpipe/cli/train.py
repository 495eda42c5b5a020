"""`lmpipe train translation`: train a translation model on parallel text, then save,
evaluate (BLEU) and export."""

from lmpipe.cli import flags, runs

HELP = "train a translation model on parallel text, then save, evaluate (BLEU) and export"
DESCRIPTION = (
    "Trains on --pairs (TSV files of source<TAB>target lines; default: the "
    "English-Spanish Bible of the Debian SWORD modules), holds out --held-out pairs, "
    "evaluates them with BLEU and shows a few translations. Running the same command "
    "again after an interruption resumes from the last checkpoint."
)


def add_parser(commands, common):
    """Add `lmpipe train` to the `commands` sub-parsers."""
    train = flags.add_verb(commands, "train", common, help=HELP, description=DESCRIPTION)
    train.add_argument("task", choices=["translation"])
    train.add_argument(
        "--pairs",
        nargs="+",
        default=None,
        help="TSV files of source<TAB>target lines (default: the English-Spanish Bible)",
    )
    train.add_argument("--reverse", action="store_true", help="translate target to source")
    train.add_argument(
        "--arch", default="transformer", choices=["transformer", "rnn"], help="the model"
    )
    train.add_argument(
        "--preset",
        default="tiny",
        help="transformer tiny|base|big; rnn tiny|sutskever|cho|bahdanau|luong",
    )
    train.add_argument(
        "--attention",
        default=None,
        choices=["additive", "dot", "general", "none"],
        help="rnn: the attention score, or none (default: the preset's)",
    )
    train.add_argument("--vocab-size", type=int, default=8000, help="WordPiece vocabulary")
    train.add_argument(
        "--separate-vocabularies",
        action="store_true",
        help="one vocabulary per language (default: one shared)",
    )
    train.add_argument("--uncased", action="store_true", help="lower-case the vocabularies")
    train.add_argument("--max-source-len", type=int, default=128, help="source tokens at most")
    train.add_argument("--max-target-len", type=int, default=128, help="target tokens at most (+1)")
    train.add_argument(
        "--held-out", type=int, default=200, help="pairs held out for the evaluation"
    )
    train.add_argument("--steps", type=int, default=1000, help="training steps in all")
    train.add_argument("--epochs", type=int, default=1, help="epochs the steps divide into")
    train.add_argument(
        "--checkpoint-every", type=int, default=100, help="steps between checkpoints"
    )
    train.add_argument(
        "--beam-width", type=int, default=4, help="beam of the evaluation and the export"
    )
    flags.add_training_options(
        train,
        batch_default=64,
        learning_rate=None,
        learning_rate_help="transformer: the factor of the paper's schedule (default: 1); "
        "rnn: Adam's rate (default: 1e-3)",
        seq_len=False,
    )
    train.set_defaults(run=run)


def run(arguments):
    strategy = runs.start_strategy(arguments.strategy)
    flags.check_steps(arguments.steps, arguments.epochs)
    flags.check_positive(arguments, "held_out", "beam_width", "accumulation_steps")
    from lmpipe.datasets import ParallelCorpus
    from lmpipe.training.distribution import per_replica_batch_size
    from lmpipe.training.options import check_training_values

    try:
        per_replica_batch_size(strategy, arguments.batch_size)
        values = {"learning_rate": arguments.learning_rate}
        values = {name: value for name, value in values.items() if value is not None}
        check_training_values(
            checkpoint_every=arguments.checkpoint_every,
            data_service=arguments.data_service,
            **values,
        )
    except ValueError as error:
        raise SystemExit(f"error: {flags.as_flags(str(error))}") from None
    pipe = _translation_pipeline(arguments)
    try:
        pairs = (
            ParallelCorpus.from_tsv(arguments.pairs) if arguments.pairs else ParallelCorpus.bible()
        )
        if arguments.reverse:
            pairs = pairs.reversed()
        train_pairs, test_pairs = pairs.split(held_out=arguments.held_out, seed=arguments.seed)
    except ValueError as error:
        raise SystemExit(f"error: {flags.as_flags(str(error))}") from None
    print(f"{len(pairs):,} pairs: {len(train_pairs):,} to train on, {len(test_pairs):,} held out")
    history = pipe.fit(
        train_pairs,
        steps_per_epoch=arguments.steps // arguments.epochs,
        checkpoint_every=arguments.checkpoint_every,
        **runs.fit_options(arguments, strategy),
    )
    pipe = runs.save_after_fit(pipe, strategy, arguments.out)
    if pipe is None:
        return 0
    metrics = pipe.evaluate(
        test_pairs, batch_size=arguments.batch_size, beam_width=arguments.beam_width
    )
    print(
        f"Held-out pairs ({len(test_pairs):,}): "
        + ", ".join(f"{name} {value:.4f}" for name, value in sorted(metrics.items()))
    )
    examples = test_pairs[:3]
    translations = pipe.translate(list(examples.sources), beam_width=arguments.beam_width)
    for (source, target), translation in zip(examples, translations, strict=True):
        print(f"  {source}\n  -> {translation}\n     (reference: {target})")
    runs.export_once(pipe, arguments, trained=bool(history.history))
    return 0


def _translation_pipeline(arguments):
    """The `Translation` pipeline the `lmpipe train translation` flags describe."""
    import dataclasses

    from lmpipe.pipelines import Translation

    rnn = arguments.arch == "rnn"
    config_class = Translation.architectures[arguments.arch]
    presets = config_class.preset_names()
    if arguments.preset not in presets:
        raise SystemExit(
            f"error: --preset for --arch {arguments.arch}: one of {', '.join(presets)}"
        )
    if arguments.attention is not None and not rnn:
        raise SystemExit("error: --attention is for --arch rnn")
    config = config_class.from_preset(arguments.preset)
    if arguments.attention == "none":
        config = dataclasses.replace(config, form="context")
    elif arguments.attention is not None:
        config = dataclasses.replace(config, form="attention", attention_score=arguments.attention)
    try:
        return Translation(
            config,
            shared_vocabulary=not arguments.separate_vocabularies,
            vocab_size=arguments.vocab_size,
            lower_case=arguments.uncased,
            max_source_len=arguments.max_source_len,
            max_target_len=arguments.max_target_len,
            seed=arguments.seed,
        )
    except ValueError as error:
        raise SystemExit(f"error: {flags.as_flags(str(error))}") from None
