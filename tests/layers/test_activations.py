from math import erf

import keras
import numpy as np
import pytest
import tensorflow as tf

from lmpipe.layers import TransformerEncoderBlock
from lmpipe.layers.activations import gelu, gelu_approximate, get_activation

VALUES = np.linspace(-6.0, 6.0, 997, dtype=np.float32)


@pytest.mark.parametrize(("activation", "approximate"), [(gelu, False), (gelu_approximate, True)])
def test_gelu_is_keras_gelu_in_float32_and_rounded_once_in_16_bits(activation, approximate):
    exact = keras.ops.convert_to_numpy(keras.activations.gelu(VALUES, approximate=approximate))
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(activation(VALUES)), exact)
    for dtype in ("bfloat16", "float16"):
        low = tf.cast(VALUES, dtype)
        result = activation(low)
        assert result.dtype == dtype
        # The float32 GELU of the 16-bit input, rounded to 16 bits once.
        expected = keras.activations.gelu(tf.cast(low, tf.float32), approximate=approximate)
        np.testing.assert_array_equal(result.numpy(), tf.cast(expected, dtype).numpy())


def test_gelu_gradient_flows_through_the_float32_computation():
    x = tf.Variable(tf.cast(VALUES, tf.bfloat16))
    with tf.GradientTape() as tape:
        y = tf.reduce_sum(tf.cast(gelu(x), tf.float32))
    gradient = tape.gradient(y, x).numpy().astype(np.float32)
    expected = 0.5 * (1 + tf.math.erf(VALUES / np.sqrt(2.0))) + VALUES * np.exp(
        -(VALUES**2) / 2
    ) / np.sqrt(2 * np.pi)
    np.testing.assert_allclose(gradient, expected, atol=0.02)  # bfloat16: 8 bits of mantissa


@pytest.mark.parametrize("jit_compile", [False, True], ids=["written-out", "xla-keras"])
def test_gelu_gradient_is_keras_autodiff_in_float32(jit_compile):
    """The written-out derivative (Keras' GELU under XLA) against autodiff through Keras' GELU
    and the float64 formula, tails included."""
    x = tf.constant(np.linspace(-10.0, 10.0, 2001, dtype=np.float32))

    def gradient(activation):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = activation(x)
        return tape.gradient(y, x, output_gradients=tf.ones_like(x))

    ours = tf.function(lambda: gradient(gelu), jit_compile=jit_compile, autograph=False)()
    keras_gradient = gradient(keras.activations.gelu)
    np.testing.assert_allclose(ours, keras_gradient, rtol=1e-6, atol=1e-6)
    values = np.linspace(-10.0, 10.0, 2001)
    exact = [
        0.5 * (1 + erf(v / np.sqrt(2))) + v * np.exp(-(v**2) / 2) / np.sqrt(2 * np.pi)
        for v in values
    ]
    np.testing.assert_allclose(ours, exact, rtol=1e-5, atol=1e-6)


def test_a_block_with_gelu_keeps_it_through_its_config():
    block = TransformerEncoderBlock(2, 16, activation="gelu")
    assert block.activation is gelu is get_activation("gelu")
    restored = TransformerEncoderBlock.from_config(block.get_config())
    assert restored.activation is gelu
