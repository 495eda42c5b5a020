import numpy as np
import pytest

from lmpipe.layers.rnn_attention import RnnAttention
from tests.layer_checks import check_layer

RNG = np.random.default_rng(5)
SCORES = ["dot", "general", "additive"]


def attention_inputs(query_shape=(3, 8), source_length=6):
    batch = query_shape[0]
    padding_mask = np.ones((batch, source_length), "int32")
    padding_mask[1, 4:] = 0
    padding_mask[2, 1:] = 0
    return {
        "query": RNG.normal(size=query_shape).astype("float32"),
        "value": RNG.normal(size=(batch, source_length, 8)).astype("float32"),
        "padding_mask": padding_mask,
    }


@pytest.mark.parametrize("score", SCORES)
@pytest.mark.parametrize("query_shape", [(3, 8), (3, 5, 8)], ids=["one_step", "sequence"])
def test_rnn_attention_passes_the_standard_layer_checks(score, query_shape, tmp_path):
    inputs = attention_inputs(query_shape)
    check_layer(
        RnnAttention,
        {"score": score},
        inputs,
        expected_output_shape=query_shape,
        tmp_path=tmp_path,
    )


@pytest.mark.parametrize("score", SCORES)
def test_weights_sum_to_one_over_real_positions_and_are_zero_on_padding(score):
    inputs = attention_inputs((3, 5, 8))
    _, weights = RnnAttention(score=score)(**inputs)
    weights = np.asarray(weights)  # [B, T, S]
    real = inputs["padding_mask"].astype(bool)[:, None, :].repeat(5, axis=1)
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-6)
    assert np.all(weights[~real] == 0.0)
    assert np.all(weights[real] > 0.0)


@pytest.mark.parametrize("score", SCORES)
def test_context_ignores_the_content_of_padded_positions(score):
    inputs = attention_inputs()
    layer = RnnAttention(score=score)
    context, _ = layer(**inputs)
    changed = dict(inputs)
    changed["value"] = np.where(
        inputs["padding_mask"][:, :, None] == 1, inputs["value"], 100.0
    ).astype("float32")
    changed_context, _ = layer(**changed)
    np.testing.assert_allclose(changed_context, context, atol=1e-6)


@pytest.mark.parametrize("score", SCORES)
def test_scores_follow_the_papers_formulas(score):
    inputs = attention_inputs()
    layer = RnnAttention(score=score)
    context, weights = layer(**inputs)
    s, h, mask = inputs["query"], inputs["value"], inputs["padding_mask"]
    if score == "dot":  # s^T h
        scores = np.einsum("bq,bsq->bs", s, h)
    elif score == "general":  # s^T W_a h
        w_a = np.asarray(layer.key_dense.kernel)  # [H, H_q]
        scores = np.einsum("bq,bsq->bs", s, h @ w_a)
    else:  # v^T tanh(W_1 h + W_2 s)
        w_1 = np.asarray(layer.key_dense.kernel)
        w_2 = np.asarray(layer.query_dense.kernel)
        v = np.asarray(layer.score_vector)
        scores = np.tanh(h @ w_1 + (s @ w_2)[:, None, :]) @ v
    scores = np.where(mask == 1, scores, -np.inf)
    expected = np.exp(scores - scores.max(-1, keepdims=True))
    expected /= expected.sum(-1, keepdims=True)
    np.testing.assert_allclose(weights, expected, atol=1e-5)
    np.testing.assert_allclose(context, np.einsum("bs,bsh->bh", expected, h), atol=1e-5)


@pytest.mark.parametrize("score", SCORES)
def test_precomputed_keys_give_the_same_result(score):
    inputs = attention_inputs()
    layer = RnnAttention(score=score)
    context, weights = layer(**inputs)
    keys = layer.compute_keys(inputs["value"])
    cached_context, cached_weights = layer(**inputs, keys=keys)
    np.testing.assert_allclose(cached_context, context, atol=1e-6)
    np.testing.assert_allclose(cached_weights, weights, atol=1e-6)


def test_additive_and_general_scores_accept_different_query_and_source_sizes():
    value = RNG.normal(size=(2, 4, 12)).astype("float32")
    query = RNG.normal(size=(2, 8)).astype("float32")
    for score in ("general", "additive"):
        context, weights = RnnAttention(score=score, units=6)(query, value)
        assert context.shape == (2, 12) and weights.shape == (2, 4)


def test_bad_arguments_raise_naming_the_parameter():
    with pytest.raises(ValueError, match="score"):
        RnnAttention(score="cosine")
    with pytest.raises(ValueError, match="units"):
        RnnAttention(score="additive", units=0)
    with pytest.raises(ValueError, match="dot"):
        RnnAttention(score="dot")(np.zeros((2, 8), "float32"), np.zeros((2, 4, 12), "float32"))
