"""Initializer handling shared by the layers, and seeding of a model's initial weights."""

import contextlib
import random

import keras


def clone_initializer(initializer):
    """A fresh copy of `initializer`, so that sublayers draw independent values.

    Keras initializers with a fixed seed return the same values on every call; each sublayer
    gets its own copy so that e.g. the query and key kernels are not initialized identically.
    """
    initializer = keras.initializers.get(initializer)
    return initializer.__class__.from_config(initializer.get_config())


def bert_initializer(stddev=0.02):
    """The truncated normal initializer of BERT and ALBERT (standard deviation 0.02)."""
    return keras.initializers.TruncatedNormal(stddev=stddev)


def gpt2_initializer(stddev=0.02):
    """GPT-2's plain (untruncated) normal initializer, mean 0 and standard deviation `stddev`.

    Not `bert_initializer`: a normal truncated at 2 standard deviations has a spread of only
    0.88 times `stddev` (0.0176 for 0.02), so GPT-2's scales need the plain normal.
    """
    return keras.initializers.RandomNormal(stddev=stddev)


@contextlib.contextmanager
def seeded(seed):
    """Build models with initial weights and dropout seeds drawn from `seed`, without
    reseeding the caller's process.

    Keras draws the seed of every initializer and dropout layer made without one from
    Python's `random`; inside this block that generator starts from `seed`, and it is given
    its previous state back afterwards. numpy's and TensorFlow's global states are untouched.
    None leaves everything as it is.
    """
    if seed is None:
        yield
        return
    state = random.getstate()
    random.seed(seed)
    try:
        yield
    finally:
        random.setstate(state)
