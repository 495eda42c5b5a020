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


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_large_gelu_is_xla_compiled_outside_xla_with_the_same_values_and_derivative(dtype):
    """From 2**20 elements of a static shape, the GELU and its derivative are each one
    XLA-compiled function: Keras' values (XLA's erfc within a float32 rounding) and dtype."""
    values = np.linspace(-10.0, 10.0, 2**20, dtype=np.float32).reshape(1024, 1024)
    x = tf.cast(values, dtype)

    @tf.function(autograph=False)
    def forward_and_gradient(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = gelu(x)
        return y, tape.gradient(y, x, output_gradients=tf.ones_like(y))

    graph = forward_and_gradient.get_concrete_function(x).graph
    calls = ("PartitionedCall", "StatefulPartitionedCall")
    compiled = [op for op in graph.get_operations() if op.type in calls]
    assert len(compiled) == 2 and all(op.get_attr("_XlaMustCompile") for op in compiled)
    y, gradient = forward_and_gradient(x)
    assert y.dtype == gradient.dtype == dtype
    x32 = tf.cast(x, tf.float32)
    expected = keras.activations.gelu(x32, approximate=False)
    with tf.GradientTape() as tape:
        tape.watch(x32)
        reference = keras.activations.gelu(x32, approximate=False)
    expected_gradient = tape.gradient(reference, x32)
    if dtype == "float32":
        np.testing.assert_allclose(y, expected, rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(gradient, expected_gradient, rtol=1e-6, atol=1e-6)
    else:  # the float32 values rounded to bfloat16 once (a rounding apart at most)
        spacing = 2.0**-7 * np.maximum(np.abs(expected.numpy()), 2.0**-126)
        assert np.all(np.abs(tf.cast(y, tf.float32) - expected) <= spacing)
    # Below the size, or of an unknown shape, TensorFlow's ops: no compilation per shape.
    small = forward_and_gradient.get_concrete_function(tf.TensorSpec([None, 1024], dtype))
    assert not any(op.type.endswith("PartitionedCall") for op in small.graph.get_operations())


@pytest.mark.parametrize("size", [997, 2**20], ids=["tensorflow-ops", "xla-compiled"])
def test_float64_gelu_and_its_derivative_are_float64(size):
    """float64 in, float64 computation: the exact GELU and derivative to 1e-13 (a float32
    computation is 1e-7 away), below and above the size that takes the compiled GELU."""
    values = np.linspace(-10.0, 10.0, size).reshape(-1, 997 if size == 997 else 1024)
    x = tf.constant(values)

    @tf.function(autograph=False)
    def forward_and_gradient(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = gelu(x)
        return y, tape.gradient(y, x, output_gradients=tf.ones_like(y))

    y, gradient = forward_and_gradient(x)
    assert y.dtype == gradient.dtype == tf.float64
    sample = values.ravel()[:: max(1, size // 2000)]  # the exact formula in Python, per value
    exact = [0.5 * v * (1 + erf(v / np.sqrt(2))) for v in sample]
    exact_derivative = [
        0.5 * (1 + erf(v / np.sqrt(2))) + v * np.exp(-(v**2) / 2) / np.sqrt(2 * np.pi)
        for v in sample
    ]
    step = max(1, size // 2000)
    np.testing.assert_allclose(y.numpy().ravel()[::step], exact, rtol=0, atol=1e-13)
    np.testing.assert_allclose(gradient.numpy().ravel()[::step], exact_derivative, atol=1e-13)
