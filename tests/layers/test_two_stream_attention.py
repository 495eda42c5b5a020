import keras
import numpy as np
import pytest

from lmpipe.layers.relative_position_encoding import RelativePositionEncoding
from lmpipe.layers.two_stream_relative_attention import TwoStreamRelativeAttention
from tests.layer_checks import check_layer

RNG = np.random.default_rng(1)
B, S, P, M, H = 2, 6, 2, 3, 16


def order_perm_mask(order):
    """perm[i, j] = 1 iff j comes before i in the factorization `order` (a list of positions)."""
    rank = np.empty(len(order), int)
    rank[order] = np.arange(len(order))
    return (rank[None, :] < rank[:, None]).astype("float32")


def layer_inputs():
    perm = np.stack([order_perm_mask([2, 0, 5, 1, 4, 3]), order_perm_mask([1, 3, 0, 2, 4, 5])])
    # Targets: the last two positions of each order.
    mapping = np.zeros((B, P, S), "float32")
    mapping[0, 0, 4], mapping[0, 1, 3] = 1, 1
    mapping[1, 0, 4], mapping[1, 1, 5] = 1, 1
    content = RNG.normal(size=(B, S, H)).astype("float32")
    memory = RNG.normal(size=(B, M, H)).astype("float32")
    return {
        "content": content,
        "position_encoding": keras.ops.convert_to_numpy(
            RelativePositionEncoding(H)(content, memory=memory)
        ),
        "query": np.repeat(RNG.normal(size=(1, 1, H)).astype("float32"), B, 0).repeat(P, 1),
        "target_mapping": mapping,
        "segment_ids": np.array([[0, 0, 0, 1, 1, 2], [0, 0, 1, 1, 1, 2]], "int32"),
        "padding_mask": np.ones((B, S), "int32"),
        "perm_mask": perm,
        "memory": memory,
        "memory_mask": np.array([[1, 1, 1], [0, 1, 1]], "int32"),
    }


def make_layer():
    return TwoStreamRelativeAttention(
        num_heads=2,
        intermediate_dim=32,
        dropout=0.0,
        kernel_initializer=keras.initializers.RandomNormal(stddev=0.3, seed=3),
    )


def run(layer, inputs):
    inputs = dict(inputs)
    content, encoding = inputs.pop("content"), inputs.pop("position_encoding")
    h, g = layer(content, encoding, **inputs)
    return keras.ops.convert_to_numpy(h), keras.ops.convert_to_numpy(g)


def test_query_stream_never_sees_own_content_and_content_stream_does():
    inputs = layer_inputs()
    layer = make_layer()
    h, g = run(layer, inputs)
    changed = dict(inputs, content=inputs["content"].copy())
    changed["content"][0, 4] += 1.0  # position 4 is row 0's first target
    h2, g2 = run(layer, changed)
    assert np.abs(h2[0, 4] - h[0, 4]).max() > 1e-3
    np.testing.assert_allclose(g2[0, 0], g[0, 0], atol=1e-6)
    # Position 3 (target 1, last in the order) may attend to position 4: its query changes.
    assert np.abs(g2[0, 1] - g[0, 1]).max() > 1e-3


def test_positions_hidden_by_perm_mask_change_neither_stream():
    inputs = layer_inputs()
    layer = make_layer()
    h, g = run(layer, inputs)
    changed = dict(inputs, content=inputs["content"].copy())
    changed["content"][0, 3] += 1.0  # last in row 0's order: hidden from every other position
    h2, g2 = run(layer, changed)
    hidden_from = [i for i in range(S) if inputs["perm_mask"][0, i, 3] == 0 and i != 3]
    np.testing.assert_allclose(h2[0, hidden_from], h[0, hidden_from], atol=1e-6)
    np.testing.assert_allclose(g2[0, 0], g[0, 0], atol=1e-6)  # target at position 4
    np.testing.assert_allclose(h2[1], h[1], atol=1e-6)  # other rows are untouched


def test_memory_is_visible_to_every_query_unless_masked():
    inputs = layer_inputs()
    inputs["perm_mask"] = np.zeros((B, S, S), "float32")  # the sequence hides everything
    inputs["memory_mask"] = np.array([[1, 1, 1], [0, 0, 0]], "int32")
    layer = make_layer()
    h, g = run(layer, inputs)
    changed = dict(inputs, memory=inputs["memory"] + 1.0)
    h2, g2 = run(layer, changed)
    assert np.abs(h2[0] - h[0]).max(axis=-1).min() > 1e-4  # every position of row 0
    assert np.abs(g2[0] - g[0]).max(axis=-1).min() > 1e-4
    np.testing.assert_allclose(h2[1], h[1], atol=1e-6)  # row 1 dropped its memory
    np.testing.assert_allclose(g2[1], g[1], atol=1e-6)


def test_target_mapping_equals_query_stream_at_all_positions_then_gathered():
    inputs = layer_inputs()
    layer = make_layer()
    _, g = run(layer, inputs)
    everywhere = dict(inputs, target_mapping=None)
    everywhere["query"] = np.repeat(inputs["query"][:, :1], S, 1)
    _, g_all = run(layer, everywhere)
    gathered = np.einsum("bps,bsh->bph", inputs["target_mapping"], g_all)
    np.testing.assert_allclose(g, gathered, atol=1e-5)


def test_padded_keys_are_invisible_to_both_streams():
    inputs = layer_inputs()
    inputs["padding_mask"] = np.array([[1, 1, 1, 1, 1, 0], [1] * S], "int32")
    inputs["perm_mask"] = np.ones((B, S, S), "float32")
    layer = make_layer()
    h, g = run(layer, inputs)
    changed = dict(inputs, content=inputs["content"].copy())
    changed["content"][0, 5] += 1.0
    h2, g2 = run(layer, changed)
    np.testing.assert_allclose(h2[0, :5], h[0, :5], atol=1e-6)
    np.testing.assert_allclose(g2[0], g[0], atol=1e-6)


def test_content_stream_alone_returns_one_tensor():
    inputs = layer_inputs()
    layer = make_layer()
    h = layer(inputs["content"], inputs["position_encoding"], segment_ids=inputs["segment_ids"])
    assert tuple(h.shape) == (B, S, H)


def test_two_stream_layer_checks(tmp_path):
    check_layer(
        TwoStreamRelativeAttention,
        {"num_heads": 2, "intermediate_dim": 32, "dropout": 0.1, "activation": "gelu"},
        layer_inputs(),
        expected_output_shape=(B, S, H),
        tmp_path=tmp_path,
    )


def test_two_stream_layer_rejects_indivisible_width():
    with pytest.raises(ValueError, match="num_heads"):
        TwoStreamRelativeAttention(num_heads=3, intermediate_dim=8)(
            np.zeros((1, 2, 16), "float32"), np.zeros((4, 16), "float32")
        )
