"""Activations by name, including the tanh-approximated GELU that Keras has no name for."""

import keras


@keras.saving.register_keras_serializable(package="lmpipe")
def gelu_approximate(x):
    """GELU with the tanh approximation (GPT-2's, and Hugging Face's "gelu_new")."""
    return keras.activations.gelu(x, approximate=True)


def get_activation(identifier):
    """`keras.activations.get`, which also knows "gelu_approximate"."""
    if identifier == "gelu_approximate":
        return gelu_approximate
    return keras.activations.get(identifier)
