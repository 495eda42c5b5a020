"""`lmpipe evaluate RUN`: a saved pipeline evaluated on a corpus, TSV pairs or a labelled
file."""

import json

from lmpipe.cli import flags, runs

HELP = "evaluate a saved pipeline on a corpus, TSV pairs or a labelled file"
DESCRIPTION = (
    "Evaluates a saved pipeline: a pretraining family or word2vec on --corpus "
    "(default: the bundled Shakespeare), a translation model on --pairs (with BLEU), a "
    "classifier on a --labelled file."
)


def add_parser(commands, common):
    """Add `lmpipe evaluate` to the `commands` sub-parsers."""
    evaluate = flags.add_verb(commands, "evaluate", common, help=HELP, description=DESCRIPTION)
    flags.add_run(evaluate)
    evaluate.add_argument("--corpus", default=None, help="file glob (default: Shakespeare)")
    evaluate.add_argument(
        "--format",
        default="auto",
        choices=["auto", "bert", "prose", "jsonl"],
        help="the corpus's format (see pretrain --help)",
    )
    evaluate.add_argument("--pairs", nargs="+", default=None, help="translation: TSV files")
    evaluate.add_argument(
        "--labelled",
        default=None,
        help="a classifier: CSV, TSV or JSONL; a token tagger: CoNLL or JSONL (by the ending); "
        "a question answerer: SQuAD JSON or JSONL",
    )
    flags.add_label_columns(
        evaluate,
        texts="--labelled: the texts",
        pairs="--labelled: the second texts, for pairs",
        labels="--labelled: the labels",
    )
    flags.add_tag_fields(
        evaluate,
        words="--labelled JSONL of a tagger: the words",
        tags="--labelled JSONL of a tagger: the tags",
    )
    evaluate.add_argument(
        "--batch-size", type=int, default=None, help="default: the pipeline's family's"
    )
    evaluate.add_argument(
        "--steps",
        type=int,
        default=None,
        help="batches drawn as in training (default: one pass over the data)",
    )
    evaluate.add_argument(
        "--beam-width", type=int, default=4, help="translation: the beam of the BLEU"
    )
    evaluate.add_argument("--json", action="store_true", help="the metrics as one JSON object")
    evaluate.set_defaults(run=run)


def run(arguments):
    """Evaluate the saved pipeline on the data its family declares (`evaluation_data`)."""
    directory = runs.require_saved_pipeline(arguments.run_dir)
    flags.check_positive(arguments, "batch_size", "steps")
    pipe = runs.load_pipeline(directory)
    kind = type(pipe).__name__
    given = {
        "--pairs": arguments.pairs is not None,
        "--labelled": arguments.labelled is not None,
        "--corpus": arguments.corpus is not None,
    }
    wanted, read, file = READERS[type(pipe).evaluation_data]
    wrong = [flag for flag, present in given.items() if present and flag != wanted]
    if wrong:
        raise SystemExit(f"error: a {kind} pipeline is evaluated on {wanted}, not {wrong[0]}")
    if wanted == "--labelled" and arguments.labelled is None:
        raise SystemExit(f"error: a {kind} is evaluated on a --labelled {file}")
    data, what, options = read(arguments)
    # With memory, XLNet evaluates batches of its training streams per replica.
    batch_size = getattr(pipe, "batch_size", None) or arguments.batch_size
    metrics = pipe.evaluate(data, batch_size=batch_size, steps=arguments.steps, **options)
    if arguments.json:
        print(json.dumps(metrics))
    else:
        steps = f"{arguments.steps} batches of " if arguments.steps else ""
        print(
            f"Evaluation on {steps}{what}: "
            + ", ".join(f"{name} {value:.4f}" for name, value in sorted(metrics.items()))
        )
    return 0


# Each reader returns `(data, what it is, evaluate's keywords)`.


def _corpus(arguments):
    data = runs.read_corpus(arguments.corpus, arguments.format)
    return data, arguments.corpus or "the Shakespeare corpus", {}


def _pairs(arguments):
    from lmpipe.datasets import ParallelCorpus

    if not arguments.pairs:
        raise SystemExit("error: a Translation pipeline is evaluated on --pairs TSV files")
    try:
        data = ParallelCorpus.from_tsv(arguments.pairs)
    except ValueError as error:
        raise SystemExit(f"error: {error}") from None
    return data, f"{len(data):,} pairs", {"beam_width": arguments.beam_width}


def _labelled(arguments):
    from lmpipe.datasets import read_labelled

    try:
        labelled = read_labelled(
            arguments.labelled,
            text=arguments.text_column,
            label=arguments.label_column,
            text_pair=arguments.pair_column,
        )
    except (OSError, ValueError) as error:
        raise SystemExit(f"error: {error}") from None
    return labelled.examples, f"{len(labelled):,} examples", {}


def _tagged(arguments):
    from lmpipe.datasets import read_tagged

    try:
        tagged = read_tagged(
            arguments.labelled,
            tokens_field=arguments.tokens_field,
            tags_field=arguments.tags_field,
        )
    except (OSError, ValueError) as error:
        raise SystemExit(f"error: {error}") from None
    return tagged.examples, f"{len(tagged):,} sentences", {}


def _questions(arguments):
    from lmpipe.datasets import read_squad

    try:
        data = read_squad(arguments.labelled)
    except ValueError as error:
        raise SystemExit(f"error: {error}") from None
    return data, f"{len(data):,} questions", {}


READERS = {
    "corpus": ("--corpus", _corpus, "corpus"),
    "pairs": ("--pairs", _pairs, "TSV file"),
    "labelled": ("--labelled", _labelled, "file"),
    "tagged": ("--labelled", _tagged, "CoNLL or JSONL file"),
    "questions": ("--labelled", _questions, "SQuAD file (JSON or JSONL)"),
}
"""The flag, the reader and the file of each kind of evaluation data a family declares."""
