"""lmpipe's LayerNormalization: LayerNorm's values and gradients (a float64 transcription of
the formula, and Keras' layer), through a closed-form gradient."""

import functools

import keras
import numpy as np
import pytest
import tensorflow as tf

from lmpipe.layers import LayerNormalization

EPSILON = 1e-6


def reference(x, gamma, beta, upstream):
    """y = gamma * x_hat + beta and the gradients of sum(y * upstream), in float64."""
    x, upstream = x.astype("float64"), upstream.astype("float64")
    centered = x - x.mean(-1, keepdims=True)
    inverse = 1 / np.sqrt((centered**2).mean(-1, keepdims=True) + EPSILON)
    normalized = centered * inverse
    d_normalized = upstream * gamma
    d_x = inverse * (
        d_normalized
        - d_normalized.mean(-1, keepdims=True)
        - normalized * (d_normalized * normalized).mean(-1, keepdims=True)
    )
    sums = tuple(range(x.ndim - 1))
    return [
        gamma * normalized + beta,
        d_x,
        (upstream * normalized).sum(sums),
        upstream.sum(sums),
    ]


def values_and_gradients(layer, x, upstream):
    x = tf.cast(tf.constant(x, "float32"), layer.compute_dtype)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = layer(x)
        total = tf.reduce_sum(tf.cast(y, "float32") * upstream)
    gradients = tape.gradient(total, [x, layer.gamma, layer.beta])
    assert y.dtype == layer.compute_dtype and gradients[0].dtype == x.dtype
    return [np.array(tf.cast(t, "float32")) for t in [y, *gradients]]


def layer_of(cls, dtype, gamma, beta):
    layer = cls(epsilon=EPSILON, dtype=dtype)
    layer.build((None, None, len(gamma)))
    layer.gamma.assign(gamma)
    layer.beta.assign(beta)
    return layer


@pytest.mark.parametrize("dtype", ["float32", "mixed_bfloat16"])
def test_layer_normalization_values_and_gradients(dtype):
    rng = np.random.default_rng(0)
    # Rows of very different scales and offsets, one nearly constant (epsilon matters there).
    x = rng.normal(size=(3, 5, 16)) * rng.uniform(0.01, 30, size=(3, 5, 1)) + 7.0
    x[0, 0] = 0.5 + 1e-4 * rng.normal(size=16)
    x = x.astype("float32")
    gamma = rng.normal(size=16).astype("float32")
    beta = rng.normal(size=16).astype("float32")
    upstream = rng.normal(size=(3, 5, 16)).astype("float32")
    ours = values_and_gradients(layer_of(LayerNormalization, dtype, gamma, beta), x, upstream)
    theirs = values_and_gradients(
        layer_of(keras.layers.LayerNormalization, dtype, gamma, beta), x, upstream
    )
    # Under mixed_bfloat16 the layer sees the input rounded to bfloat16.
    inputs = np.array(
        tf.cast(tf.cast(x, "float32" if dtype == "float32" else "bfloat16"), "float32")
    )
    # bfloat16 outputs and input gradients are rounded to 8 bits of mantissa.
    tolerance = 2e-5 if dtype == "float32" else 1e-2
    for index, (value, expected, keras_value) in enumerate(
        zip(ours, reference(inputs, gamma, beta, upstream), theirs, strict=True)
    ):
        scale = np.abs(expected).max()
        np.testing.assert_allclose(value, expected, atol=tolerance * scale, err_msg=str(index))
        # As close to the float64 values as Keras' layer is (or closer).
        ours_error = np.abs(value - expected).max()
        keras_error = np.abs(keras_value - expected).max()
        assert ours_error <= 2 * keras_error + 1e-6 * scale, (index, ours_error, keras_error)


def test_other_settings_are_keras_own_and_the_config_round_trips():
    x = tf.random.normal((2, 3, 4))
    uncentred = LayerNormalization(center=False)
    np.testing.assert_allclose(uncentred(x), keras.layers.LayerNormalization(center=False)(x))
    two_axes = LayerNormalization(axis=[1, 2])
    np.testing.assert_allclose(
        two_axes(x), keras.layers.LayerNormalization(axis=[1, 2])(x), atol=1e-6
    )
    layer = LayerNormalization(epsilon=1e-12, name="norm")
    restored = keras.layers.deserialize(keras.layers.serialize(layer))
    assert type(restored) is LayerNormalization and restored.epsilon == 1e-12


def test_under_xla_the_layer_is_keras_own():
    """XLA fuses Keras' ops itself (lmpipe.backend): the same values and gradients
    as Keras' layer compiled the same way, and as lmpipe's without XLA."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, 3, 8)).astype("float32") * 5 + 2
    gamma, beta = rng.normal(size=(2, 8)).astype("float32")
    upstream = rng.normal(size=(2, 3, 8)).astype("float32")
    results = {}
    for name, cls, jit_compile in (
        ("ours, XLA", LayerNormalization, True),
        ("keras, XLA", keras.layers.LayerNormalization, True),
        ("ours", LayerNormalization, False),
    ):
        layer = layer_of(cls, "float32", gamma, beta)
        traced = tf.function(
            functools.partial(_traced, layer, x, upstream),
            jit_compile=jit_compile,
            autograph=False,
        )
        results[name] = [np.array(t) for t in traced()]
    for ours, keras_values, unfused in zip(*results.values(), strict=True):
        np.testing.assert_allclose(ours, keras_values, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(ours, unfused, rtol=1e-5, atol=1e-5)


def _traced(layer, x, upstream):
    """The layer's output and the gradients of sum(y * upstream), traced inside a function."""
    x = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = layer(x)
        total = tf.reduce_sum(y * upstream)
    return [y, *tape.gradient(total, [x, layer.gamma, layer.beta])]


@pytest.mark.parametrize("policy", ["dtype-argument", "global-policy"])
def test_float64_layers_normalize_in_float64(policy):
    """Under a float64 policy the values and gradients are float64 ones: Keras' layer to
    1e-12, where a float32 computation would be 1e-7 away."""
    rng = np.random.default_rng(2)
    x = rng.normal(size=(3, 5, 16)) * rng.uniform(0.1, 30, size=(3, 5, 1)) + 7.0
    gamma, beta = rng.normal(size=(2, 16))
    upstream = rng.normal(size=(3, 5, 16))
    results = []
    for cls in (LayerNormalization, keras.layers.LayerNormalization):
        if policy == "global-policy":
            previous = keras.config.dtype_policy()
            keras.config.set_dtype_policy("float64")
            try:
                layer = cls(epsilon=EPSILON)
            finally:
                keras.config.set_dtype_policy(previous)
        else:
            layer = cls(epsilon=EPSILON, dtype="float64")
        layer.build((None, None, 16))
        layer.gamma.assign(gamma)
        layer.beta.assign(beta)
        inputs = tf.constant(x)
        with tf.GradientTape() as tape:
            tape.watch(inputs)
            y = layer(inputs)
            total = tf.reduce_sum(y * upstream)
        gradients = tape.gradient(total, [inputs, layer.gamma, layer.beta])
        assert y.dtype == gradients[0].dtype == tf.float64
        results.append([t.numpy() for t in [y, *gradients]])
    for index, (ours, theirs) in enumerate(zip(*results, strict=True)):
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-12, err_msg=str(index))
    for value, expected in zip(results[0], reference(x, gamma, beta, upstream), strict=True):
        np.testing.assert_allclose(value, expected, rtol=0, atol=1e-12)
