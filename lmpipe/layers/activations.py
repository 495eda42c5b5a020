"""Activations by name, including the tanh-approximated GELU that Keras has no name for.

The GELUs compute in float32 when their input is 16-bit (mixed precision) and return the
input's dtype: TensorFlow's CPU kernels work through bfloat16 element by element, and a
BERT-mini layer's GELU, forward and backward, took 25 ms in bfloat16 against 15 ms in float32
with the casts (2-core AVX-512 CPU); the result is also the float32 GELU rounded once, rather
than rounded at every step of the formula.

The exact GELU, `x Phi(x)`, has its derivative written out, `Phi(x) + x phi(x)` (phi the
normal density), where autodiff would differentiate each op of the formula: forward and
backward over a BERT-mini layer's 32 x 128 x 1024 activations take 25% less time in float32
and 13% less in bfloat16. Under XLA, which fuses Keras' ops into one pass itself (and is slower
with the written-out derivative), it is Keras' GELU (see `lmpipe.backend.compiling_with_xla`).

Outside XLA, a tensor of 2**20 elements or more (static shapes: BERT-mini's 32 x 128 x 1024
FFN activations have 4M) goes through the same formulas XLA-compiled on their own, forward
and derivative each one pass over memory (casts included) rather than 4 and 7 of TensorFlow's
ops: 40% less time forward and backward in float32 on a 2-core AVX-512 CPU. Smaller or
unknown shapes keep TensorFlow's ops, which need no compilation per shape.
"""

import math

import keras
import tensorflow as tf
from keras import ops

from lmpipe.backend import compiling_with_xla

_LOW_PRECISION = ("bfloat16", "float16")


def _in_float32(function, x):
    if keras.backend.standardize_dtype(x.dtype) in _LOW_PRECISION:
        return ops.cast(function(ops.cast(x, "float32")), x.dtype)
    return function(x)


@keras.saving.register_keras_serializable(package="lmpipe")
def gelu(x):
    """GELU, `x * Phi(x)` with the exact normal CDF (BERT's, and Hugging Face's "gelu")."""
    if compiling_with_xla():
        return _in_float32(keras.activations.gelu, x)
    size = x.shape.num_elements() if isinstance(x, tf.Tensor) else None
    if size is not None and size >= _SMALLEST_COMPILED_SIZE:
        return _gelu_compiled(x)
    return _in_float32(_gelu_with_derivative, x)


@tf.custom_gradient
def _gelu_with_derivative(x):
    """The exact GELU of a float32 `x`, as Keras computes it, with its derivative
    `Phi(x) + x phi(x)` written out."""
    cdf = _normal_cdf(x)
    return x * cdf, lambda upstream: upstream * _gelu_derivative(x, cdf)


@tf.custom_gradient
def _gelu_compiled(x):
    """`_gelu_with_derivative` (in float32 for 16-bit `x`), forward and derivative each one
    XLA-compiled function."""
    return _gelu_forward(x), lambda upstream: _gelu_backward(x, upstream)


@tf.function(jit_compile=True, autograph=False, reduce_retracing=True)
def _gelu_forward(x):
    wide = tf.cast(x, _at_least_float32(x.dtype))
    return tf.cast(wide * _normal_cdf(wide), x.dtype)


@tf.function(jit_compile=True, autograph=False, reduce_retracing=True)
def _gelu_backward(x, upstream):
    wide = tf.cast(x, _at_least_float32(x.dtype))
    derivative = _gelu_derivative(wide, _normal_cdf(wide))
    return tf.cast(tf.cast(upstream, wide.dtype) * derivative, upstream.dtype)


def _at_least_float32(dtype):
    """float32 for 16-bit floats, else `dtype` (float64 stays float64)."""
    return keras.backend.result_type(dtype, "float32")


def _normal_cdf(x):
    """Phi(x), as Keras' exact GELU computes it."""
    return 0.5 * tf.math.erfc(x * -_SQRT_HALF)


def _gelu_derivative(x, cdf):
    """`Phi(x) + x phi(x)`, given `cdf = Phi(x)`."""
    return cdf + x * (tf.exp(-0.5 * tf.square(x)) * _INVERSE_SQRT_2PI)


_SQRT_HALF = math.sqrt(0.5)
_INVERSE_SQRT_2PI = 1 / math.sqrt(2 * math.pi)
# Tensors this large or larger take the XLA-compiled GELU outside XLA (see the docstring).
_SMALLEST_COMPILED_SIZE = 2**20


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
