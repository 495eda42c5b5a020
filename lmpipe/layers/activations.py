"""Activations by name, including the tanh-approximated GELU that Keras has no name for.

The GELUs compute in float32 when their input is 16-bit (mixed precision) and return the
input's dtype: TensorFlow's CPU kernels work through bfloat16 element by element, and a
BERT-mini layer's GELU, forward and backward, took 25 ms in bfloat16 against 15 ms in float32
with the casts (2-core AVX-512 CPU); the result is also the float32 GELU rounded once, rather
than rounded at every step of the formula. In float32 they are Keras' own.
"""

import keras
from keras import ops

_LOW_PRECISION = ("bfloat16", "float16")


def _in_float32(function, x):
    if keras.backend.standardize_dtype(x.dtype) in _LOW_PRECISION:
        return ops.cast(function(ops.cast(x, "float32")), x.dtype)
    return function(x)


@keras.saving.register_keras_serializable(package="lmpipe")
def gelu(x):
    """GELU, `x * Phi(x)` with the exact normal CDF (BERT's, and Hugging Face's "gelu")."""
    return _in_float32(keras.activations.gelu, x)


@keras.saving.register_keras_serializable(package="lmpipe")
def gelu_approximate(x):
    """GELU with the tanh approximation (GPT-2's, and Hugging Face's "gelu_new")."""
    return _in_float32(lambda value: keras.activations.gelu(value, approximate=True), x)


def get_activation(identifier):
    """`keras.activations.get`, which also knows "gelu_approximate", and whose "gelu" is
    lmpipe's (float32 inside for 16-bit inputs; Keras' GELU otherwise)."""
    if identifier == "gelu_approximate":
        return gelu_approximate
    if identifier == "gelu":
        return gelu
    return keras.activations.get(identifier)
