"""A model's architecture with new random weights: the from-scratch baseline of fine-tuning."""

import keras

from lmpipe.layers.initializers import seeded


def untrained_copy(model, seed=None):
    """A model of the same architecture as `model` (a functional Keras model, e.g. an
    encoder from `bert_from_pretrained`), with new random weights from its initializers:
    what fine-tuning from scratch starts from, the baseline that shows what pretraining buys.
    The same `seed` gives the same weights; `model` is not changed."""
    with seeded(seed):
        return keras.models.clone_model(model)
