import keras
import numpy as np
import pytest
import tensorflow as tf

from lmpipe.layers import TransformerDecoderBlock
from tests.layer_checks import check_layer

BATCH, DECODER_LENGTH, ENCODER_LENGTH, HIDDEN, HEADS = 2, 6, 5, 8, 2
# Encoder positions 3 and 4 of the second example are padding.
ENCODER_PADDING_MASK = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], dtype="int32")


def _normal(*shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


def _block(encoder=True, **kwargs):
    """A built block without dropout; decoder-only unless `encoder`.

    Glorot kernels rather than BERT's 0.02 make attention far from uniform, so that a
    position attending to the wrong keys shows in the outputs.
    """
    kwargs = {
        "num_heads": HEADS,
        "intermediate_dim": 16,
        "dropout": 0.0,
        "kernel_initializer": keras.initializers.GlorotUniform(seed=0),
        **kwargs,
    }
    block = TransformerDecoderBlock(**kwargs)
    decoder_shape = (BATCH, DECODER_LENGTH, HIDDEN)
    block.build(decoder_shape, (BATCH, ENCODER_LENGTH, HIDDEN) if encoder else None)
    return block


def _inputs(encoder=True):
    inputs = {"decoder_sequence": _normal(BATCH, DECODER_LENGTH, HIDDEN, seed=1)}
    if encoder:
        inputs["encoder_sequence"] = _normal(BATCH, ENCODER_LENGTH, HIDDEN, seed=2)
        inputs["encoder_padding_mask"] = ENCODER_PADDING_MASK
    return inputs


def _full_pass(block, inputs):
    return keras.ops.convert_to_numpy(block(**inputs))


def _decode_eagerly(block, inputs, chunks):
    """Feed the decoder sequence through the cache in chunks of the given lengths."""
    decoder_sequence = inputs["decoder_sequence"]
    cache = block.initial_cache(BATCH, DECODER_LENGTH)
    cross_cache = None
    if "encoder_sequence" in inputs:
        cross_cache = block.compute_cross_attention_cache(inputs["encoder_sequence"])
    outputs, start = [], 0
    for length in chunks:
        output, cache, cross_cache = block(
            decoder_sequence[:, start : start + length],
            decoder_padding_mask=inputs.get("decoder_padding_mask"),
            encoder_padding_mask=inputs.get("encoder_padding_mask"),
            self_attention_cache=cache,
            self_attention_cache_update_index=start,
            cross_attention_cache=cross_cache,
        )
        outputs.append(keras.ops.convert_to_numpy(output))
        start += length
    return np.concatenate(outputs, axis=1)


def _decode_in_graph(block, inputs, jit_compile):
    """One token per step in a tf.while_loop, the cache index a tensor, inside tf.function."""
    has_encoder = "encoder_sequence" in inputs

    @tf.function(jit_compile=jit_compile)
    def decode(decoder_sequence, encoder_sequence, encoder_padding_mask):
        cache = block.initial_cache(BATCH, DECODER_LENGTH)
        cross_cache = block.compute_cross_attention_cache(encoder_sequence) if has_encoder else None
        outputs = tf.TensorArray(tf.float32, size=DECODER_LENGTH)

        def step(index, cache, outputs):
            token = tf.slice(decoder_sequence, [0, index, 0], [BATCH, 1, HIDDEN])
            output, cache, _ = block(
                token,
                encoder_padding_mask=encoder_padding_mask if has_encoder else None,
                self_attention_cache=cache,
                self_attention_cache_update_index=index,
                cross_attention_cache=cross_cache,
            )
            return index + 1, cache, outputs.write(index, output[:, 0])

        _, _, outputs = tf.while_loop(
            lambda index, *_: index < DECODER_LENGTH, step, (tf.constant(0), cache, outputs)
        )
        return tf.transpose(outputs.stack(), [1, 0, 2])  # [B, T, H]

    encoder_sequence = inputs.get("encoder_sequence", np.zeros((BATCH, 1, HIDDEN), "float32"))
    encoder_padding_mask = inputs.get("encoder_padding_mask", np.ones((BATCH, 1), "int32"))
    return decode(inputs["decoder_sequence"], encoder_sequence, encoder_padding_mask).numpy()


VARIANTS = {
    "decoder_only": ({}, False),
    "encoder_decoder": ({}, True),
    "pre_ln": ({"normalize_first": True}, True),
    "local_window": ({"window": 2}, False),
    "local_window_encoder_decoder_pre_ln": ({"window": 1, "normalize_first": True}, True),
}


def test_check_layer_decoder_only(tmp_path):
    inputs = {
        "decoder_sequence": _normal(BATCH, DECODER_LENGTH, HIDDEN),
        "decoder_padding_mask": np.array([[1] * 6, [1, 1, 1, 1, 0, 0]], dtype="int32"),
    }
    block = check_layer(
        TransformerDecoderBlock,
        {"num_heads": HEADS, "intermediate_dim": 16, "window": 3},
        inputs,
        expected_output_shape=(BATCH, DECODER_LENGTH, HIDDEN),
        tmp_path=tmp_path,
    )
    assert block.cross_attention is None
    assert len(block.weights) == 16  # 4 attention projections x 2, 2 LayerNorms x 2, 2 Dense x 2


def test_check_layer_encoder_decoder(tmp_path):
    block = check_layer(
        TransformerDecoderBlock,
        {"num_heads": HEADS, "intermediate_dim": 16, "normalize_first": True},
        _inputs(),
        expected_output_shape=(BATCH, DECODER_LENGTH, HIDDEN),
        tmp_path=tmp_path,
    )
    assert block.cross_attention is not None
    assert len(block.weights) == 26


def test_check_layer_cached_step_returns_output_and_both_caches(tmp_path):
    inputs = {
        "decoder_sequence": _normal(BATCH, 1, HIDDEN),
        "encoder_sequence": _normal(BATCH, ENCODER_LENGTH, HIDDEN, seed=2),
        "encoder_padding_mask": ENCODER_PADDING_MASK,
        "self_attention_cache": _normal(BATCH, 2, DECODER_LENGTH, HEADS, HIDDEN // HEADS, seed=3),
    }
    call_kwargs = {"self_attention_cache_update_index": 2}
    block = check_layer(
        TransformerDecoderBlock,
        {"num_heads": HEADS, "intermediate_dim": 16},
        inputs,
        call_kwargs=call_kwargs,
        expected_output_shape=(BATCH, 1, HIDDEN),
        # Decoding, not training: the cache update (XlaDynamicUpdateSlice) has no gradient.
        run_training_step=False,
    )
    # check_layer's .keras round trip compares structures strictly, and Keras restores a
    # functional model's tuple of outputs as a list: do that round trip here.
    symbolic = {
        name: keras.Input(batch_shape=value.shape, dtype=str(value.dtype), name=name)
        for name, value in inputs.items()
    }
    model = keras.Model(symbolic, block(**symbolic, **call_kwargs))
    model.save(tmp_path / "cached_step.keras")
    restored = keras.models.load_model(tmp_path / "cached_step.keras")
    for actual, expected in zip(restored(inputs), model(inputs), strict=True):
        np.testing.assert_allclose(actual, expected, atol=1e-6)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_token_by_token_cached_decoding_equals_full_causal_pass(variant):
    kwargs, encoder = VARIANTS[variant]
    block, inputs = _block(encoder, **kwargs), _inputs(encoder)
    expected = _full_pass(block, inputs)
    stepped = _decode_eagerly(block, inputs, chunks=[1] * DECODER_LENGTH)
    np.testing.assert_allclose(stepped, expected, atol=1e-5)


@pytest.mark.parametrize("jit_compile", [False, True], ids=["tf_function", "jit"])
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_cached_decoding_in_while_loop_with_tensor_index_equals_full_pass(variant, jit_compile):
    kwargs, encoder = VARIANTS[variant]
    block, inputs = _block(encoder, **kwargs), _inputs(encoder)
    expected = _full_pass(block, inputs)
    np.testing.assert_allclose(_decode_in_graph(block, inputs, jit_compile), expected, atol=1e-5)


@pytest.mark.parametrize("encoder", [False, True], ids=["decoder_only", "encoder_decoder"])
def test_prompt_chunk_then_single_steps_equals_full_pass(encoder):
    block, inputs = _block(encoder, window=3), _inputs(encoder)
    stepped = _decode_eagerly(block, inputs, chunks=[3, 1, 2])
    np.testing.assert_allclose(stepped, _full_pass(block, inputs), atol=1e-5)


def test_cached_decoding_with_left_padded_prompt_equals_full_pass_at_real_positions():
    block, inputs = _block(), _inputs()
    # The cache is as long as the sequence, so one [B, max_length] mask serves both calls.
    inputs["decoder_padding_mask"] = np.array([[1] * 6, [0, 0, 1, 1, 1, 1]], dtype="int32")
    expected = _full_pass(block, inputs)
    stepped = _decode_eagerly(block, inputs, chunks=[4, 1, 1])
    np.testing.assert_allclose(stepped[0], expected[0], atol=1e-5)
    np.testing.assert_allclose(stepped[1, 2:], expected[1, 2:], atol=1e-5)


def test_cached_step_projects_encoder_sequence_when_no_cross_cache_given():
    block, inputs = _block(), _inputs()
    cache = block.initial_cache(BATCH, DECODER_LENGTH)
    output, cache, cross_cache = block(
        inputs["decoder_sequence"][:, :1],
        encoder_sequence=inputs["encoder_sequence"],
        encoder_padding_mask=ENCODER_PADDING_MASK,
        self_attention_cache=cache,
        self_attention_cache_update_index=0,
    )
    expected_cross_cache = block.compute_cross_attention_cache(inputs["encoder_sequence"])
    np.testing.assert_allclose(cross_cache, expected_cross_cache, atol=1e-6)
    np.testing.assert_allclose(output, _full_pass(block, inputs)[:, :1], atol=1e-5)
    assert tuple(cache.shape) == (BATCH, 2, DECODER_LENGTH, HEADS, HIDDEN // HEADS)
    # Only the first slot of the cache is written.
    assert np.abs(keras.ops.convert_to_numpy(cache)[:, :, 1:]).max() == 0.0


def test_decoder_only_cached_step_returns_no_cross_cache():
    block = _block(encoder=False)
    output, cache, cross_cache = block(
        _normal(BATCH, 1, HIDDEN),
        self_attention_cache=block.initial_cache(BATCH, 4),
        self_attention_cache_update_index=0,
    )
    assert cross_cache is None
    assert tuple(output.shape) == (BATCH, 1, HIDDEN)
    assert tuple(cache.shape) == (BATCH, 2, 4, HEADS, HIDDEN // HEADS)


@pytest.mark.parametrize("encoder", [False, True], ids=["decoder_only", "encoder_decoder"])
def test_changing_later_decoder_tokens_never_changes_earlier_outputs(encoder):
    block, inputs = _block(encoder, normalize_first=True), _inputs(encoder)
    original = _full_pass(block, inputs)
    for t in range(DECODER_LENGTH - 1):
        changed = dict(inputs)
        changed["decoder_sequence"] = inputs["decoder_sequence"].copy()
        changed["decoder_sequence"][:, t + 1 :] = _normal(BATCH, DECODER_LENGTH - t - 1, HIDDEN)
        outputs = _full_pass(block, changed)
        np.testing.assert_allclose(outputs[:, : t + 1], original[:, : t + 1], atol=1e-6)
        assert np.abs(outputs[:, t + 1 :] - original[:, t + 1 :]).max() > 1e-3


def test_changing_padded_encoder_positions_never_changes_outputs():
    block, inputs = _block(), _inputs()
    original = _full_pass(block, inputs)
    changed = dict(inputs)
    changed["encoder_sequence"] = inputs["encoder_sequence"].copy()
    changed["encoder_sequence"][1, 3:] = 100.0 * _normal(2, HIDDEN, seed=7)
    np.testing.assert_allclose(_full_pass(block, changed), original, atol=1e-6)


def test_changing_a_real_encoder_position_changes_every_decoder_output():
    block, inputs = _block(), _inputs()
    original = _full_pass(block, inputs)
    changed = dict(inputs)
    changed["encoder_sequence"] = inputs["encoder_sequence"].copy()
    changed["encoder_sequence"][1, 0] = _normal(HIDDEN, seed=7)
    outputs = _full_pass(block, changed)
    np.testing.assert_allclose(outputs[0], original[0], atol=1e-6)  # other example untouched
    assert np.abs(outputs[1] - original[1]).max(axis=-1).min() > 1e-3


def test_padded_decoder_keys_never_change_real_outputs():
    block = _block(encoder=False)
    decoder_sequence = _normal(BATCH, DECODER_LENGTH, HIDDEN)
    left_padding = np.array([[1] * 6, [0, 0, 1, 1, 1, 1]], dtype="int32")
    original = _full_pass(
        block, {"decoder_sequence": decoder_sequence, "decoder_padding_mask": left_padding}
    )
    changed = decoder_sequence.copy()
    changed[1, :2] = _normal(2, HIDDEN, seed=7)
    outputs = _full_pass(block, {"decoder_sequence": changed, "decoder_padding_mask": left_padding})
    np.testing.assert_allclose(outputs[1, 2:], original[1, 2:], atol=1e-6)


def _layer_norm(x, norm, epsilon=1e-5):
    gamma, beta = (keras.ops.convert_to_numpy(w) for w in norm.weights)
    mean, variance = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    return gamma * (x - mean) / np.sqrt(variance + epsilon) + beta


def _attention(mha, query, memory, mask):
    """MultiHead(Q, K, V) spelled out in NumPy; `mask` is [B, Q, K], True = may attend."""
    wq, bq, wk, bk, wv, bv, wo, bo = (keras.ops.convert_to_numpy(w) for w in mha.weights)
    q = np.einsum("btc,chd->bthd", query, wq) + bq
    k = np.einsum("bsc,chd->bshd", memory, wk) + bk
    v = np.einsum("bsc,chd->bshd", memory, wv) + bv
    logits = np.einsum("bthd,bshd->bhts", q, k) / np.sqrt(q.shape[-1])
    logits = np.where(mask[:, None], logits, -np.inf)
    probabilities = np.exp(logits - logits.max(-1, keepdims=True))
    probabilities /= probabilities.sum(-1, keepdims=True)
    attended = np.einsum("bhts,bshd->bthd", probabilities, v)
    return np.einsum("bthd,hdc->btc", attended, wo) + bo


@pytest.mark.parametrize("normalize_first", [False, True], ids=["post_ln", "pre_ln"])
def test_output_matches_the_paper_equations_in_numpy(normalize_first):
    block, inputs = _block(normalize_first=normalize_first, activation="relu"), _inputs()
    # Non-trivial LayerNorm and bias weights, so that misplaced terms show.
    block.set_weights(
        [w + _normal(*w.shape, seed=i) * 0.1 for i, w in enumerate(block.get_weights())]
    )
    x, memory = inputs["decoder_sequence"], inputs["encoder_sequence"]
    causal = np.tril(np.ones((DECODER_LENGTH, DECODER_LENGTH), bool))[None]
    encoder_mask = np.broadcast_to(
        ENCODER_PADDING_MASK[:, None, :].astype(bool), (BATCH, DECODER_LENGTH, ENCODER_LENGTH)
    )
    w1, b1, w2, b2 = (
        keras.ops.convert_to_numpy(w)
        for w in block.intermediate_dense.weights + block.output_dense.weights
    )
    sublayers = [
        (lambda h: _attention(block.self_attention, h, h, causal), block.self_attention_layer_norm),
        (
            lambda h: _attention(block.cross_attention, h, memory, encoder_mask),
            block.cross_attention_layer_norm,
        ),
        (lambda h: np.maximum(h @ w1 + b1, 0.0) @ w2 + b2, block.output_layer_norm),
    ]
    for sublayer, norm in sublayers:
        if normalize_first:
            x = x + sublayer(_layer_norm(x, norm))
        else:
            x = _layer_norm(x + sublayer(x), norm)
    np.testing.assert_allclose(_full_pass(block, inputs), x, atol=1e-4)


def test_dropout_applies_only_in_training():
    block = _block(dropout=0.5)
    inputs = _inputs()
    inference = _full_pass(block, inputs)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(block(**inputs)), inference)
    trained = keras.ops.convert_to_numpy(block(**inputs, training=True))
    assert np.abs(trained - inference).max() > 1e-3


def test_config_stores_every_argument_and_defaults():
    block = TransformerDecoderBlock(num_heads=4, intermediate_dim=32, dropout=0.2)
    config = block.get_config()
    assert config["attention_dropout"] == 0.2
    assert config["activation"] == "relu"
    assert config["layer_norm_epsilon"] == 1e-5
    assert config["normalize_first"] is False
    assert config["window"] is None
    assert config["kernel_initializer"]["class_name"] == "TruncatedNormal"
    assert config["kernel_initializer"]["config"]["stddev"] == 0.02
    assert config["residual_kernel_initializer"] is None


def test_residual_kernel_initializer_draws_only_the_projections_into_the_residual_stream():
    block = _block(residual_kernel_initializer=keras.initializers.Constant(0.5))
    restored = TransformerDecoderBlock.from_config(block.get_config())
    restored.build((BATCH, DECODER_LENGTH, HIDDEN), (BATCH, ENCODER_LENGTH, HIDDEN))
    for layer in (block, restored):
        residual = [
            layer.self_attention.output_dense.kernel,
            layer.cross_attention.output_dense.kernel,
            layer.output_dense.kernel,
        ]
        for kernel in residual:
            assert np.all(keras.ops.convert_to_numpy(kernel) == 0.5)
        others = [layer.intermediate_dense.kernel, layer.self_attention.query_dense.kernel]
        others.append(layer.cross_attention.value_dense.kernel)
        for kernel in others:
            assert np.abs(keras.ops.convert_to_numpy(kernel) - 0.5).min() > 0  # Glorot draws


def test_mixed_precision_cache_uses_compute_dtype():
    block = TransformerDecoderBlock(
        num_heads=HEADS, intermediate_dim=16, dropout=0.0, dtype="mixed_float16"
    )
    block.build((BATCH, DECODER_LENGTH, HIDDEN))
    cache = block.initial_cache(BATCH, DECODER_LENGTH)
    assert cache.dtype == "float16"
    output, cache, _ = block(
        _normal(BATCH, 1, HIDDEN), self_attention_cache=cache, self_attention_cache_update_index=0
    )
    assert output.dtype == "float16" and cache.dtype == "float16"


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"dropout": -0.1}, "dropout"),
        ({"attention_dropout": 1.0}, "attention_dropout"),
        ({"window": 0}, "window"),
        ({"num_heads": 0}, "num_heads"),
        ({"intermediate_dim": 2.5}, "intermediate_dim"),
        ({"layer_norm_epsilon": 0.0}, "layer_norm_epsilon"),
    ],
)
def test_bad_constructor_arguments_raise_naming_the_argument(kwargs, name):
    kwargs = {"num_heads": HEADS, "intermediate_dim": 16, **kwargs}
    with pytest.raises(ValueError, match=f"`{name}`"):
        TransformerDecoderBlock(**kwargs)


def test_hidden_size_not_divisible_by_heads_raises_at_build():
    block = TransformerDecoderBlock(num_heads=3, intermediate_dim=16)
    with pytest.raises(ValueError, match="divisible by `num_heads`"):
        block(_normal(BATCH, DECODER_LENGTH, HIDDEN))


def test_bad_call_arguments_raise():
    decoder_only, encoder_decoder = _block(encoder=False), _block()
    x, encoder_sequence = _normal(BATCH, 1, HIDDEN), _normal(BATCH, ENCODER_LENGTH, HIDDEN)
    cache = decoder_only.initial_cache(BATCH, DECODER_LENGTH)
    with pytest.raises(ValueError, match="self_attention_cache_update_index"):
        decoder_only(x, self_attention_cache=cache)
    with pytest.raises(ValueError, match="self_attention_cache_update_index"):
        decoder_only(x, self_attention_cache_update_index=0)
    with pytest.raises(ValueError, match="must fit in the cache's max_length"):
        decoder_only(
            x, self_attention_cache=cache, self_attention_cache_update_index=DECODER_LENGTH
        )
    with pytest.raises(ValueError, match="must fit in the cache's max_length"):
        decoder_only(x, self_attention_cache=cache, self_attention_cache_update_index=-1)
    with pytest.raises(ValueError, match=r"\[batch, 2, max_length, 2, 4\]"):
        decoder_only(
            x, self_attention_cache=cache[:, :, :, :1], self_attention_cache_update_index=0
        )
    with pytest.raises(ValueError, match="no encoder-decoder attention"):
        decoder_only(x, encoder_sequence)
    with pytest.raises(ValueError, match="no encoder-decoder attention"):
        decoder_only.compute_cross_attention_cache(encoder_sequence)
    with pytest.raises(ValueError, match="pass `encoder_sequence`"):
        encoder_decoder(x)
    with pytest.raises(ValueError, match="initial_cache"):
        TransformerDecoderBlock(num_heads=HEADS, intermediate_dim=16).initial_cache(BATCH, 4)
