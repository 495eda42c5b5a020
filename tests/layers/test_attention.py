import keras
import numpy as np
import pytest
import tensorflow as tf

from lmpipe.layers import MultiHeadAttention, ScaledDotProductAttention, attention_mask
from lmpipe.layers.multi_head_attention import HeadProjection, contract_rows
from tests.layer_checks import check_layer

RNG = np.random.default_rng(0)


def random_inputs(batch=2, length=7, dim=16):
    return RNG.normal(size=(batch, length, dim)).astype("float32")


def numpy_attention(q, k, v, mask):
    """softmax(QK^T/sqrt(d)) V for one head, with a boolean [Q, K] mask."""
    logits = q @ k.T / np.sqrt(q.shape[-1])
    logits = np.where(mask, logits, -np.inf)
    weights = np.exp(logits - logits.max(axis=-1, keepdims=True))
    weights /= weights.sum(axis=-1, keepdims=True)
    return weights @ v


def test_scaled_dot_product_attention_equals_numpy_with_padding_and_causal_masks():
    q, k, v = random_inputs(), random_inputs(), random_inputs(dim=16)
    padding = np.ones((2, 7), "int32")
    padding[1, 5:] = 0
    layer = ScaledDotProductAttention()
    output = keras.ops.convert_to_numpy(layer(q, k, v, padding_mask=padding, use_causal_mask=True))
    causal = np.tril(np.ones((7, 7), bool))
    for b in range(2):
        expected = numpy_attention(q[b], k[b], v[b], causal & padding[b].astype(bool)[None, :])
        np.testing.assert_allclose(output[b], expected, atol=1e-5)


def test_explicit_and_fused_paths_agree():
    q = RNG.normal(size=(2, 5, 3, 4)).astype("float32")
    layer = ScaledDotProductAttention(window=2)
    fused = layer(q, q, q, use_causal_mask=True)
    explicit, scores = layer(q, q, q, use_causal_mask=True, return_attention_scores=True)
    np.testing.assert_allclose(fused, explicit, atol=1e-5)
    assert scores.shape == (2, 3, 5, 5)
    np.testing.assert_allclose(np.sum(scores, axis=-1), 1.0, atol=1e-5)


def test_attention_mask_local_window_allows_exactly_the_neighbourhood():
    mask = keras.ops.convert_to_numpy(attention_mask(6, 6, window=2))[0]
    i, j = np.indices((6, 6))
    np.testing.assert_array_equal(mask, np.abs(i - j) <= 2)
    causal_local = keras.ops.convert_to_numpy(attention_mask(6, 6, window=2, causal=True))[0]
    np.testing.assert_array_equal(causal_local, (i - j >= 0) & (i - j <= 2))


def test_attention_mask_with_query_offset_matches_the_rows_of_the_full_mask():
    full = keras.ops.convert_to_numpy(attention_mask(8, 8, causal=True, window=3))[0]
    rows = keras.ops.convert_to_numpy(attention_mask(2, 8, causal=True, window=3, query_offset=5))[
        0
    ]
    np.testing.assert_array_equal(rows, full[5:7])


@pytest.mark.parametrize("window", [None, 2])
def test_causal_attention_never_sees_the_future(window):
    layer = MultiHeadAttention(num_heads=4, window=window)
    x = random_inputs(length=9, dim=16)
    reference = keras.ops.convert_to_numpy(layer(x, use_causal_mask=True))
    for t in range(8):
        changed = x.copy()
        changed[:, t + 1 :] = RNG.normal(size=changed[:, t + 1 :].shape)
        output = keras.ops.convert_to_numpy(layer(changed, use_causal_mask=True))
        np.testing.assert_allclose(output[:, : t + 1], reference[:, : t + 1], atol=1e-5)
        assert not np.allclose(output[:, t + 1 :], reference[:, t + 1 :], atol=1e-3)


def test_padded_keys_never_change_real_positions():
    layer = MultiHeadAttention(num_heads=2)
    x = random_inputs(length=8)
    padding = np.ones((2, 8), "int32")
    padding[0, 5:] = 0
    padding[1, 2:] = 0
    reference = keras.ops.convert_to_numpy(layer(x, padding_mask=padding))
    changed = x.copy()
    changed[padding == 0] = RNG.normal(size=changed[padding == 0].shape) * 10
    output = keras.ops.convert_to_numpy(layer(changed, padding_mask=padding))
    real = padding.astype(bool)
    np.testing.assert_allclose(output[real], reference[real], atol=1e-5)


def test_local_window_positions_outside_have_no_influence():
    window = 2
    layer = MultiHeadAttention(num_heads=2, window=window)
    x = random_inputs(length=10)
    reference = keras.ops.convert_to_numpy(layer(x))
    position = 5
    changed = x.copy()
    changed[:, position] += 5.0
    output = keras.ops.convert_to_numpy(layer(changed))
    influenced = np.abs(output - reference).max(axis=(0, 2)) > 1e-6
    np.testing.assert_array_equal(influenced, np.abs(np.arange(10) - position) <= window)


@pytest.mark.parametrize("causal", [False, True])
def test_multi_head_attention_equals_keras_given_the_same_weights(causal):
    query, value = random_inputs(length=6, dim=24), random_inputs(length=9, dim=24)
    ours = MultiHeadAttention(num_heads=4)
    keras_mha = keras.layers.MultiHeadAttention(num_heads=4, key_dim=6)
    if causal:
        value = random_inputs(length=6, dim=24)
    ours(query, value)
    keras_mha(query, value)
    ours.set_weights(keras_mha.get_weights())
    padding = np.ones((2, value.shape[1]), "int32")
    padding[1, -2:] = 0
    expected, expected_scores = keras_mha(
        query,
        value,
        attention_mask=np.repeat(padding[:, None, :], 6, axis=1).astype(bool),
        use_causal_mask=causal,
        return_attention_scores=True,
    )
    output, scores = ours(
        query, value, padding_mask=padding, use_causal_mask=causal, return_attention_scores=True
    )
    np.testing.assert_allclose(output, expected, atol=1e-5)
    np.testing.assert_allclose(scores, expected_scores, atol=1e-6)


def test_cached_self_attention_equals_full_causal_attention():
    layer = MultiHeadAttention(num_heads=2, window=3)
    x = random_inputs(length=6)
    full = keras.ops.convert_to_numpy(layer(x, use_causal_mask=True))
    cache = np.zeros((2, 2, 6, 2, 8), "float32")

    @tf.function
    def step(token, cache, index):
        return layer(token, cache=cache, cache_update_index=index, use_causal_mask=True)

    for t in range(6):
        output, cache = step(x[:, t : t + 1], cache, tf.constant(t))
        np.testing.assert_allclose(output[:, 0], full[:, t], atol=1e-5)


def test_cross_attention_cache_equals_projecting_the_encoder_output():
    layer = MultiHeadAttention(num_heads=2)
    query, encoder = random_inputs(length=3), random_inputs(length=5)
    expected = layer(query, encoder)
    output, _ = layer(query, cache=layer.compute_cache(encoder))
    np.testing.assert_allclose(output, expected, atol=1e-6)


def test_layers_pass_the_standard_checks(tmp_path):
    x = random_inputs(length=6)
    padding = np.ones((2, 6), "int32")
    padding[0, 4:] = 0
    check_layer(
        MultiHeadAttention,
        {"num_heads": 4, "window": 3, "dropout": 0.1},
        {"query": x, "padding_mask": padding},
        call_kwargs={"use_causal_mask": True},
        expected_output_shape=(2, 6, 16),
        tmp_path=tmp_path,
        expected_num_trainable_weights=8,  # query, key, value, output: kernel and bias
        expected_num_non_trainable_weights=0,
    )
    heads = RNG.normal(size=(2, 6, 2, 8)).astype("float32")
    check_layer(
        ScaledDotProductAttention,
        {"window": 2},
        {"query": heads, "key": heads, "value": heads, "padding_mask": padding},
        expected_output_shape=(2, 6, 2, 8),
        tmp_path=tmp_path,
        expected_num_trainable_weights=0,
    )


def test_output_kernel_initializer_draws_only_the_output_projection():
    layer = MultiHeadAttention(num_heads=2, output_kernel_initializer="ones")
    restored = MultiHeadAttention.from_config(layer.get_config())
    for attention in (layer, restored):
        attention.build((2, 3, 8))
        assert np.all(keras.ops.convert_to_numpy(attention.output_dense.kernel) == 1.0)
        assert np.all(keras.ops.convert_to_numpy(attention.query_dense.kernel) != 1.0)
    assert MultiHeadAttention(num_heads=2).get_config()["output_kernel_initializer"] is None


def test_attention_dropout_applies_only_in_training():
    layer = MultiHeadAttention(num_heads=2, dropout=0.5)
    x = random_inputs()
    np.testing.assert_allclose(layer(x), layer(x), atol=0)
    assert not np.allclose(layer(x, training=True), layer(x), atol=1e-4)


def test_bad_arguments_raise_errors_naming_them():
    with pytest.raises(ValueError, match="divisible by `num_heads`"):
        MultiHeadAttention(num_heads=3)(random_inputs(dim=16))
    with pytest.raises(ValueError, match="dropout"):
        MultiHeadAttention(num_heads=2, dropout=-0.1)
    with pytest.raises(ValueError, match="window"):
        MultiHeadAttention(num_heads=2, window=0)
    with pytest.raises(ValueError, match="window"):
        ScaledDotProductAttention(window=0)
    with pytest.raises(ValueError, match="padding_mask"):
        MultiHeadAttention(num_heads=2)(random_inputs(), padding_mask=np.ones((2, 1, 7)))
    with pytest.raises(ValueError, match="attention_mask"):
        MultiHeadAttention(num_heads=2)(random_inputs(), attention_mask=np.ones((2, 7)))


@pytest.mark.parametrize("dtype", ["float32", "mixed_bfloat16"])
@pytest.mark.parametrize(
    ("equation", "output_shape", "bias_axes", "input_shape"),
    [
        ("abc,cde->abde", (None, 4, 6), "de", (3, 5, 16)),
        ("abcd,cde->abe", (None, 16), "e", (3, 5, 4, 6)),
    ],
)
def test_head_projection_is_einsum_dense_as_one_matmul(
    dtype, equation, output_shape, bias_axes, input_shape
):
    arguments = {"output_shape": output_shape, "bias_axes": bias_axes, "dtype": dtype}
    ours = HeadProjection(equation, bias_initializer="normal", **arguments)
    keras_layer = keras.layers.EinsumDense(equation, **arguments)
    ours.build(input_shape)
    keras_layer.build(input_shape)
    keras_layer.set_weights(ours.get_weights())
    x = tf.random.normal(input_shape)
    results = []
    for layer in (ours, keras_layer):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = layer(x)
            total = tf.reduce_sum(tf.cast(y, "float32") ** 2)
        results.append((y, *tape.gradient(total, [x, *layer.trainable_variables])))
    # bfloat16 sums in another order: a few roundings of 2**-8 of the largest value apart.
    tolerance = 1e-5 if dtype == "float32" else 2e-2
    for mine, theirs in zip(*results, strict=True):
        assert mine.dtype == theirs.dtype and mine.shape == theirs.shape
        theirs = tf.cast(theirs, "float32").numpy()
        scale = tolerance * np.abs(theirs).max()
        np.testing.assert_allclose(tf.cast(mine, "float32"), theirs, rtol=0, atol=scale)

    @tf.function(autograph=False)
    def gradient(x):
        with tf.GradientTape() as tape:
            y = ours(x)
        return tape.gradient(y, ours.trainable_variables)

    types = {op.type for op in gradient.get_concrete_function(x).graph.get_operations()}
    assert "MatMul" in types and "BatchMatMulV2" not in types


def test_contract_rows_is_the_einsum_of_either_kernel_side():
    x = tf.random.normal((2, 3, 4, 5))
    leading = tf.random.normal((4, 5, 6, 7))  # "abcd,cdef->abef"
    trailing = tf.random.normal((6, 4, 5))  # "abcd,ecd->abe"
    np.testing.assert_allclose(
        contract_rows(x, leading, 2), tf.einsum("abcd,cdef->abef", x, leading), atol=1e-5
    )
    np.testing.assert_allclose(
        contract_rows(x, trailing, 2, kernel_last=True),
        tf.einsum("abcd,ecd->abe", x, trailing),
        atol=1e-5,
    )
    bias = tf.range(42, dtype=tf.float32)
    np.testing.assert_allclose(
        contract_rows(x[0], leading[0], 1, bias=bias),
        tf.einsum("bcd,def->bcef", x[0], leading[0]) + tf.reshape(bias, (6, 7)),
        atol=1e-5,
    )
