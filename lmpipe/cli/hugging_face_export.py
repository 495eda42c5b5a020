"""`lmpipe export PIPELINE FOLDER --format hf`: a saved pipeline written as a Hugging Face
folder (`pipe.save_pretrained`) instead of a SavedModel for TF Serving."""

import pathlib


def export_hugging_face(pipe, arguments):
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
