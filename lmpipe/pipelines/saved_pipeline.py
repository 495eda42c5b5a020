"""The folder a pipeline's `save` writes and its `load` reads back: its tokenizer(s), the
pipeline's description in `pipeline.json`, and the trained model in `model.keras`.

A save over an existing folder replaces it atomically: the new folder is written completely
under a hidden name beside it (`.tmp-lmpipe-*`), then swapped with the old one in one step
(see `lmpipe.serving.directory_swap`), so that the path holds the complete old or the
complete new pipeline at every instant, whenever the process is killed."""

import contextlib
import json
import os
import zipfile

import keras
import tensorflow as tf

from lmpipe.serving import directory_swap
from lmpipe.tokenizers.registry import load_tokenizer

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


def model_path(directory):
    """Where a saved pipeline's Keras model is, in `directory`."""
    return os.path.join(directory, MODEL_FILE)


def save_pipeline(directory, kind, description, tokenizers, write_model):
    """Write a trained pipeline to `directory`, replacing what is there atomically.

    Args:
        directory: the folder (created if needed; a local path).
        kind: the pipeline's family (its class name), which `load` reads first.
        description: JSON-serializable dict of what `load` needs besides the tokenizers and
            the model (the options, the model's configuration).
        tokenizers: `{subfolder name: tokenizer}` (each with `save(folder)`).
        write_model: `(folder) -> None`, writes the trained model into the folder.
    """
    with replacing_directory(directory) as temporary:
        for name, tokenizer in tokenizers.items():
            tokenizer.save(os.path.join(temporary, name))
        with open(os.path.join(temporary, PIPELINE_FILE), "w", encoding="utf-8") as file:
            json.dump({"pipeline": kind, **description}, file, indent=2)
        write_model(temporary)


class SavedPipeline:
    """A folder written by `save_pipeline`, opened for a pipeline's `load`.

    Args:
        directory: the folder.

    Attributes:
        kind: the pipeline's family, as saved.
        path: the path of its `pipeline.json` (for error messages).
        description: the `description` given to `save_pipeline` (a new dict, free to change).
    """

    def __init__(self, directory):
        description = read_description(directory)
        self.directory = os.fspath(directory)
        self.path = os.path.join(self.directory, PIPELINE_FILE)
        self.kind = description.pop("pipeline", None)
        self.description = description

    def file(self, name):
        """The path of `name` in the folder."""
        return os.path.join(self.directory, name)

    def tokenizer(self, name="tokenizer"):
        """The tokenizer saved under `name` (WordPiece or SentencePiece)."""
        return load_tokenizer(self.file(name))

    def keras_model(self):
        """The trained Keras model (its classes must be registered, i.e. imported).

        Raises:
            ValueError: naming `model.keras` when it is missing or damaged (Keras says "File
                not found" for a truncated archive).
        """
        path = model_path(self.directory)
        if not tf.io.gfile.exists(path):
            raise ValueError(f"{path} is missing: the saved pipeline has no trained model.")
        try:
            return keras.models.load_model(path)
        except Exception as error:
            damage = archive_damage(path)
            if damage is None:
                raise
            raise ValueError(
                f"{path} is damaged ({damage}): it is not a complete Keras archive (a save cut "
                "short, or a copy truncated). Save the pipeline again, or restore the file from "
                "a copy."
            ) from error


def archive_damage(path):
    """What is wrong with the zip archive at `path` (a `.keras` file), or None if every
    member reads back with its checksum."""
    try:
        with _open_binary(path) as file, zipfile.ZipFile(file) as archive:
            bad = archive.testzip()
    except (zipfile.BadZipFile, EOFError, OSError, ValueError, tf.errors.OpError) as error:
        return str(error) or type(error).__name__
    return None if bad is None else f"its member {bad} fails its checksum"


def _open_binary(path):
    # Python's own file for a local path: zipfile's errors on it say what is wrong (a
    # `GFile` fails a seek first).
    if "://" in path:
        return tf.io.gfile.GFile(path, "rb")
    return open(path, "rb")


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
