"""The folder a pipeline's `save` writes and its `load` reads back: its tokenizer(s), the
pipeline's description in `pipeline.json`, and the trained model in `model.keras`.

A save over an existing folder replaces it atomically: the new folder is written completely
under a hidden name beside it (`.tmp-lmpipe-*`), then swapped with the old one in one step
(see `lmpipe.serving.directory_swap`), so that the path holds the complete old or the
complete new pipeline at every instant, whenever the process is killed."""

import contextlib
import json
import os

import keras
import tensorflow as tf

from lmpipe.datasets.wordpiece import WordPieceTokenizer
from lmpipe.serving import directory_swap

PIPELINE_FILE = "pipeline.json"
MODEL_FILE = "model.keras"


@contextlib.contextmanager
def replacing_directory(directory):
    """Write a folder that replaces `directory` as a whole: yields a fresh hidden folder
    beside it to write to, swapped in for `directory` when the block ends without error
    (and removed if it raises).

    Leftovers of saves killed earlier beside `directory` are cleared first (those of saves
    still running are kept). `directory` must be a local path (the swap is a file-system
    call); an existing file there is an error.
    """
    directory = os.path.abspath(os.fspath(directory))
    if os.path.lexists(directory) and not os.path.isdir(directory):
        raise ValueError(f"Cannot save to {directory!r}: it exists and is not a directory.")
    parent = os.path.dirname(directory)
    directory_swap.remove_leftovers(parent)
    with directory_swap.temporary_directory(parent) as temporary:
        yield temporary
        directory_swap.replace_directory(temporary, directory)


def save_pipeline(directory, pipeline, model, description, tokenizers):
    """Write a trained pipeline to `directory`, replacing what is there atomically.

    Args:
        directory: the folder (created if needed; a local path).
        pipeline: the pipeline; its class name is recorded, for `SavedPipeline` to check.
        model: its trained Keras model, or None (an error: nothing to save yet).
        description: JSON-serializable dict of what the pipeline's `load` needs besides the
            tokenizers and the model (its constructor's options, the model's configuration).
        tokenizers: `{subfolder name: WordPieceTokenizer}`.
    """
    if model is None:
        raise ValueError("The pipeline has no model yet: call fit() or load() first.")
    with replacing_directory(directory) as temporary:
        for name, tokenizer in tokenizers.items():
            tokenizer.save(os.path.join(temporary, name))
        with open(os.path.join(temporary, PIPELINE_FILE), "w", encoding="utf-8") as file:
            json.dump({"pipeline": type(pipeline).__name__, **description}, file, indent=2)
        model.save(os.path.join(temporary, MODEL_FILE))


class SavedPipeline:
    """A folder written by `save_pipeline`, opened for `pipeline_class.load`.

    Args:
        directory: the folder.
        pipeline_class: the class loading it; the folder must hold a pipeline of this class.

    Attributes:
        description: the `description` given to `save_pipeline` (a new dict, free to change).
    """

    def __init__(self, directory, pipeline_class):
        description = read_description(directory)
        path = os.path.join(directory, PIPELINE_FILE)
        kind = description.pop("pipeline", None)
        if kind != pipeline_class.__name__:
            raise ValueError(
                f"{path} describes a {kind!r} pipeline, not a {pipeline_class.__name__}."
            )
        self.directory = directory
        self.description = description

    def tokenizer(self, name="tokenizer"):
        """The `WordPieceTokenizer` saved under `name`."""
        return WordPieceTokenizer.load(os.path.join(self.directory, name))

    def model(self):
        """The trained Keras model (its classes must be registered, i.e. imported)."""
        return keras.models.load_model(os.path.join(self.directory, MODEL_FILE))


def read_description(directory):
    """The dict in `directory`'s `pipeline.json` (its "pipeline" key names the class).

    Raises:
        ValueError: naming the file (and the line) when it is missing, not valid JSON or not
            a JSON object.
    """
    path = os.path.join(directory, PIPELINE_FILE)
    if not tf.io.gfile.exists(path):
        raise ValueError(f"{directory!r} holds no saved pipeline ({PIPELINE_FILE} missing).")
    try:
        with tf.io.gfile.GFile(path, "rb") as file:
            description = json.loads(file.read().decode("utf-8"))
    except UnicodeDecodeError as error:
        raise ValueError(f"{path} is not UTF-8 text ({error}); save the pipeline again.") from None
    except json.JSONDecodeError as error:
        raise ValueError(
            f"{path} is not valid JSON (line {error.lineno}, column {error.colno}: "
            f"{error.msg}); the saved pipeline is damaged: save it again."
        ) from None
    if not isinstance(description, dict):
        raise ValueError(
            f"{path} must hold a JSON object describing the pipeline, got "
            f"{type(description).__name__}."
        )
    return description
