"""`lmpipe export PIPELINE BASE_DIR`: a saved pipeline exported for TF Serving, or written as a
Hugging Face folder (`--format hf`)."""

import pathlib

from lmpipe.cli import flags, runs

HELP = "export a saved pipeline for TF Serving (or as a Hugging Face folder)"


def add_parser(commands, common):
    """Add `lmpipe export` to the `commands` sub-parsers."""
    export = flags.add_verb(commands, "export", common, help=HELP)
    export.add_argument(
        "pipeline", help="directory written by pipe.save(), or the --out of a training command"
    )
    export.add_argument("base_dir", help="TF Serving model base directory (hf: the folder)")
    export.add_argument(
        "--format",
        choices=("saved_model", "hf"),
        default="saved_model",
        help="saved_model for TF Serving; hf: pipe.save_pretrained, a transformers folder",
    )
    export.add_argument(
        "--version", type=int, default=None, help="version number (default: the next one)"
    )
    export.add_argument("--overwrite", action="store_true", help="replace an existing --version")
    export.add_argument(
        "--outputs",
        nargs="+",
        default=None,
        metavar="NAME",
        help="the outputs served (encoders; default: all, e.g. sequence_output, pooled_output)",
    )
    export.set_defaults(run=run)


def run(arguments):
    directory = runs.require_saved_pipeline(arguments.pipeline)
    pipe = runs.load_pipeline(directory)
    if arguments.format == "hf":
        return _export_hugging_face(pipe, arguments)
    options = runs.export_options(pipe, arguments.outputs, "--outputs")
    path = pipe.export(
        arguments.base_dir, version=arguments.version, overwrite=arguments.overwrite, **options
    )
    print(f"Exported for TensorFlow Serving: {path}")
    return 0


def _export_hugging_face(pipe, arguments):
    """Write `pipe` (loaded from the command's saved pipeline) to `arguments.base_dir` with its
    `save_pretrained`: BERT, ALBERT and XLNet pretraining with their heads, GPT as
    `GPT2LMHeadModel`, the fine-tuned classifier, tagger and span answerer with their task
    heads and labels. Refuses, in one line and before writing, the flags that only a SavedModel
    takes, a pipeline with no Hugging Face form, and a non-empty folder without `--overwrite`
    (whose files are then replaced). Returns the command's exit status."""
    if arguments.version is not None or arguments.outputs is not None:
        raise SystemExit("error: --version and --outputs are for SavedModels, not --format hf")
    if not hasattr(pipe, "save_pretrained"):
        raise SystemExit(
            f"error: a {type(pipe).__name__} pipeline has no Hugging Face form; --format hf "
            "writes BERT, ALBERT, XLNet, GPT and the fine-tuned classifier, tagger and answerer"
        )
    folder = pathlib.Path(arguments.base_dir)
    if folder.is_file():
        raise SystemExit(f"error: {folder} is a file; --format hf writes a folder")
    if folder.is_dir() and any(folder.iterdir()) and not arguments.overwrite:
        raise SystemExit(
            f"error: {folder} is not empty; give a new folder, or --overwrite to replace the "
            "files in it"
        )
    try:
        pipe.save_pretrained(folder)
    except ValueError as error:
        raise SystemExit(f"error: {error}") from None
    print(f"Wrote a Hugging Face folder ({type(pipe).__name__}): {folder}")
    return 0
