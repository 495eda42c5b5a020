import keras
import numpy as np
import pytest
from scipy.special import erf

from lmpipe.layers import (
    BertEmbedding,
    PositionEmbedding,
    SinusoidalPositionEncoding,
    TransformerEncoderBlock,
)
from tests.layer_checks import check_layer

RNG = np.random.default_rng(1)


def layer_norm(x, gamma, beta, epsilon):
    mean = x.mean(-1, keepdims=True)
    variance = x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + epsilon) * gamma + beta


def gelu(x):
    return 0.5 * x * (1 + erf(x / np.sqrt(2)))


def numpy_encoder_block(layer, x, padding, normalize_first):
    """The paper's equations, written out with the layer's own weights."""
    attention = layer.self_attention
    wq, bq = (np.asarray(w) for w in attention.query_dense.weights)
    wk, bk = (np.asarray(w) for w in attention.key_dense.weights)
    wv, bv = (np.asarray(w) for w in attention.value_dense.weights)
    wo, bo = (np.asarray(w) for w in attention.output_dense.weights)
    g1, b1 = (np.asarray(w) for w in layer.attention_layer_norm.weights)
    w_1, c_1 = (np.asarray(w) for w in layer.intermediate_dense.weights)
    w_2, c_2 = (np.asarray(w) for w in layer.output_dense.weights)
    g2, b2 = (np.asarray(w) for w in layer.output_layer_norm.weights)
    eps = layer.layer_norm_epsilon

    def multi_head(h):
        q = np.einsum("sd,dnh->nsh", h, wq) + bq[:, None, :]
        k = np.einsum("sd,dnh->nsh", h, wk) + bk[:, None, :]
        v = np.einsum("sd,dnh->nsh", h, wv) + bv[:, None, :]
        logits = q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1])
        logits = np.where(padding[None, None, :] > 0, logits, -np.inf)
        weights = np.exp(logits - logits.max(-1, keepdims=True))
        weights /= weights.sum(-1, keepdims=True)
        heads = weights @ v  # [n, s, h]
        return np.einsum("nsh,nhd->sd", heads, wo) + bo

    def ffn(h):
        return gelu(h @ w_1 + c_1) @ w_2 + c_2

    if normalize_first:
        x = x + multi_head(layer_norm(x, g1, b1, eps))
        return x + ffn(layer_norm(x, g2, b2, eps))
    x = layer_norm(x + multi_head(x), g1, b1, eps)
    return layer_norm(x + ffn(x), g2, b2, eps)


@pytest.mark.parametrize("normalize_first", [False, True])
def test_encoder_block_equals_numpy_reference_of_the_paper(normalize_first):
    x = RNG.normal(size=(2, 6, 16)).astype("float32")
    padding = np.ones((2, 6), "int32")
    padding[1, 3:] = 0
    layer = TransformerEncoderBlock(4, 32, normalize_first=normalize_first)
    output = keras.ops.convert_to_numpy(layer(x, padding_mask=padding))
    for b in range(2):
        expected = numpy_encoder_block(layer, x[b].astype("float64"), padding[b], normalize_first)
        np.testing.assert_allclose(output[b], expected, atol=1e-4)


def test_encoder_block_padding_and_causality():
    layer = TransformerEncoderBlock(2, 32, activation="relu")
    x = RNG.normal(size=(1, 8, 16)).astype("float32")
    padding = np.array([[1, 1, 1, 1, 1, 0, 0, 0]])
    reference = keras.ops.convert_to_numpy(layer(x, padding_mask=padding, use_causal_mask=True))
    changed = x.copy()
    changed[:, 3:] += RNG.normal(size=changed[:, 3:].shape)
    output = keras.ops.convert_to_numpy(layer(changed, padding_mask=padding, use_causal_mask=True))
    np.testing.assert_allclose(output[:, :3], reference[:, :3], atol=1e-5)
    padded_only = x.copy()
    padded_only[:, 5:] = 100.0
    output = keras.ops.convert_to_numpy(layer(padded_only, padding_mask=padding))
    np.testing.assert_allclose(
        output[:, :5],
        keras.ops.convert_to_numpy(layer(x, padding_mask=padding))[:, :5],
        atol=1e-5,
    )


def test_encoder_block_returns_attention_scores_that_ignore_padding():
    layer = TransformerEncoderBlock(2, 32)
    padding = np.array([[1, 1, 1, 0]])
    _, scores = layer(
        RNG.normal(size=(1, 4, 8)).astype("float32"),
        padding_mask=padding,
        return_attention_scores=True,
    )
    scores = np.asarray(scores)
    np.testing.assert_allclose(scores.sum(-1), 1.0, atol=1e-6)
    assert np.all(scores[..., 3] == 0)


def test_sinusoidal_encoding_follows_the_formula():
    encoding = np.asarray(SinusoidalPositionEncoding()(np.zeros((1, 50, 12), "float32")))[0]
    position = np.arange(50)[:, None]
    i = np.arange(6)[None, :]
    angle = position / 10000 ** (2 * i / 12)
    np.testing.assert_allclose(encoding[:, 0::2], np.sin(angle), atol=1e-5)
    np.testing.assert_allclose(encoding[:, 1::2], np.cos(angle), atol=1e-5)
    shifted = np.asarray(SinusoidalPositionEncoding()(np.zeros((1, 3, 12)), start_index=7))[0]
    np.testing.assert_allclose(shifted, encoding[7:10], atol=1e-5)


def test_position_embedding_returns_its_table_rows():
    layer = PositionEmbedding(sequence_length=10)
    output = np.asarray(layer(np.zeros((2, 4, 6)), start_index=3))
    table = np.asarray(layer.position_embeddings)
    np.testing.assert_array_equal(output[0], table[3:7])
    np.testing.assert_array_equal(output[1], table[3:7])
    with pytest.raises(ValueError, match="sequence_length"):
        layer(np.zeros((1, 11, 6)))


def test_bert_embedding_sums_the_three_tables_then_normalizes():
    layer = BertEmbedding(50, 8, max_sequence_length=16, dropout=0.0)
    tokens = np.array([[2, 7, 9, 3]])
    segments = np.array([[0, 0, 1, 1]])
    output = np.asarray(layer(tokens, segments))
    summed = (
        np.asarray(layer.token_embedding.embeddings)[tokens[0]]
        + np.asarray(layer.segment_embedding.embeddings)[segments[0]]
        + np.asarray(layer.position_embedding.position_embeddings)[:4]
    )
    gamma, beta = (np.asarray(w) for w in layer.layer_norm.weights)
    np.testing.assert_allclose(output[0], layer_norm(summed, gamma, beta, 1e-12), atol=1e-5)


def test_factorized_embedding_has_v_by_e_then_e_by_h_weights():
    layer = BertEmbedding(1000, 64, embedding_dim=8, max_sequence_length=16)
    output = layer(np.ones((2, 5), "int32"))
    assert output.shape == (2, 5, 64)
    assert layer.token_embedding.embeddings.shape == (1000, 8)
    assert layer.projection.kernel.shape == (8, 64)
    assert layer.segment_embedding.embeddings.shape == (2, 8)


def test_layers_pass_the_standard_checks(tmp_path):
    x = RNG.normal(size=(2, 6, 16)).astype("float32")
    padding = np.ones((2, 6), "int32")
    padding[1, 4:] = 0
    for normalize_first in (False, True):
        check_layer(
            TransformerEncoderBlock,
            {
                "num_heads": 4,
                "intermediate_dim": 32,
                "normalize_first": normalize_first,
                "window": 2,
                "activation": "relu",
            },
            {"inputs": x, "padding_mask": padding},
            expected_output_shape=(2, 6, 16),
            tmp_path=tmp_path,
        )
    check_layer(
        SinusoidalPositionEncoding,
        {},
        {"inputs": x},
        expected_output_shape=(2, 6, 16),
        tmp_path=tmp_path,
    )
    check_layer(
        PositionEmbedding,
        {"sequence_length": 8},
        {"inputs": x},
        expected_output_shape=(2, 6, 16),
        tmp_path=tmp_path,
    )
    tokens = RNG.integers(0, 30, size=(2, 6)).astype("int32")
    segments = np.zeros((2, 6), "int32")
    check_layer(
        BertEmbedding,
        {"vocabulary_size": 30, "hidden_dim": 16, "embedding_dim": 4, "max_sequence_length": 8},
        {"token_ids": tokens, "segment_ids": segments},
        expected_output_shape=(2, 6, 16),
        tmp_path=tmp_path,
    )


def test_bad_arguments_raise_errors_naming_them():
    with pytest.raises(ValueError, match="divisible by `num_heads`"):
        TransformerEncoderBlock(3, 32)(np.zeros((1, 2, 16), "float32"))
    with pytest.raises(ValueError, match="dropout"):
        TransformerEncoderBlock(2, 32, dropout=-0.5)
    with pytest.raises(ValueError, match="attention_dropout"):
        TransformerEncoderBlock(2, 32, attention_dropout=1.5)
    with pytest.raises(ValueError, match="window"):
        TransformerEncoderBlock(2, 32, window=0)
    with pytest.raises(ValueError, match="intermediate_dim"):
        TransformerEncoderBlock(2, 0)
    with pytest.raises(ValueError, match="embedding_dim"):
        BertEmbedding(10, 8, embedding_dim=0)
    with pytest.raises(ValueError, match="padding_mask"):
        TransformerEncoderBlock(2, 32)(
            np.zeros((1, 2, 16), "float32"), padding_mask=np.ones((1, 2, 2))
        )
