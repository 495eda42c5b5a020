"""Initializer handling shared by the layers."""

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
