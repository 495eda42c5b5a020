"""The folder a pipeline's `save` writes and its `load` reads back: its tokenizer(s), the
pipeline's description in `pipeline.json`, and the trained model in `model.keras`."""

import json
import os

import keras
import tensorflow as tf

from lmpipe.datasets.wordpiece import WordPieceTokenizer

PIPELINE_FILE = "pipeline.json"
MODEL_FILE = "model.keras"


def save_pipeline(directory, pipeline, model, description, tokenizers):
    """Write a trained pipeline to `directory`.

    Args:
        directory: the folder (created if needed; local or any `tf.io.gfile` path).
        pipeline: the pipeline; its class name is recorded, for `SavedPipeline` to check.
        model: its trained Keras model, or None (an error: nothing to save yet).
        description: JSON-serializable dict of what the pipeline's `load` needs besides the
            tokenizers and the model (its constructor's options, the model's configuration).
        tokenizers: `{subfolder name: WordPieceTokenizer}`.
    """
    if model is None:
        raise ValueError("The pipeline has no model yet: call fit() or load() first.")
    tf.io.gfile.makedirs(directory)
    for name, tokenizer in tokenizers.items():
        tokenizer.save(os.path.join(directory, name))
    with tf.io.gfile.GFile(os.path.join(directory, PIPELINE_FILE), "w") as file:
        json.dump({"pipeline": type(pipeline).__name__, **description}, file, indent=2)
    model.save(os.path.join(directory, MODEL_FILE))


class SavedPipeline:
    """A folder written by `save_pipeline`, opened for `pipeline_class.load`.

    Args:
        directory: the folder.
        pipeline_class: the class loading it; the folder must hold a pipeline of this class.

    Attributes:
        description: the `description` given to `save_pipeline` (a new dict, free to change).
    """

    def __init__(self, directory, pipeline_class):
        path = os.path.join(directory, PIPELINE_FILE)
        if not tf.io.gfile.exists(path):
            raise ValueError(f"{directory!r} holds no saved pipeline ({PIPELINE_FILE} missing).")
        with tf.io.gfile.GFile(path) as file:
            description = json.load(file)
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
