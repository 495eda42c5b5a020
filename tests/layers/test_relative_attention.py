import keras
import numpy as np
import pytest

from lmpipe.layers.relative_attention import RelativeAttention, relative_shift
from lmpipe.layers.relative_position_encoding import RelativePositionEncoding
from tests.layer_checks import check_layer

RNG = np.random.default_rng(0)


def numpy_encoding(distance, dim):
    """XLNet's encoding of one distance: sines in the first half, cosines in the second."""
    inverse_frequency = 1.0 / 10000 ** (np.arange(0, dim, 2) / dim)
    return np.concatenate(
        [np.sin(distance * inverse_frequency), np.cos(distance * inverse_frequency)]
    )


def test_position_encoding_rows_run_from_key_length_down_to_minus_query_length_plus_one():
    encoding = keras.ops.convert_to_numpy(
        RelativePositionEncoding(8)(np.zeros((1, 3, 8)), memory=np.zeros((1, 2, 8)))
    )
    distances = np.arange(5, -3, -1)  # K = 5 keys, Q = 3 queries: 5, 4, ..., -2
    assert encoding.shape == (8, 8)
    for row, distance in enumerate(distances):
        np.testing.assert_allclose(encoding[row], numpy_encoding(distance, 8), atol=1e-6)


def test_position_encoding_clamps_long_distances():
    clamped = keras.ops.convert_to_numpy(
        RelativePositionEncoding(8, clamp_len=2)(np.zeros((1, 4, 8)))
    )
    expected = [numpy_encoding(np.clip(d, -2, 2), 8) for d in np.arange(4, -4, -1)]
    np.testing.assert_allclose(clamped, np.stack(expected), atol=1e-6)


@pytest.mark.parametrize("batch", [4, 3])
def test_bi_data_gives_the_second_half_of_the_batch_the_negated_distances(batch):
    # K = 5 keys (2 in memory), Q = 3 queries: forward rows encode 5, 4, ..., -2 and
    # backward rows -5, -4, ..., 2 (Hugging Face's `bi_data`), clamped to [-4, 4].
    encoding = keras.ops.convert_to_numpy(
        RelativePositionEncoding(8, clamp_len=4)(
            np.zeros((batch, 3, 8)), memory=np.zeros((batch, 2, 8)), bi_data=True
        )
    )
    distances = np.clip(np.arange(5, -3, -1), -4, 4)
    forward = np.stack([numpy_encoding(d, 8) for d in distances])
    backward = np.stack([numpy_encoding(-d, 8) for d in distances])
    assert encoding.shape == (batch, 8, 8)
    for row in range(batch):  # an odd batch gives the backward half the extra row
        expected = forward if row < batch // 2 else backward
        np.testing.assert_allclose(encoding[row], expected, atol=1e-6)


def test_relative_attention_with_one_encoding_per_example_treats_each_row_alone():
    batch, length, mlen, dim = 4, 5, 3, 8
    query = RNG.normal(size=(batch, length, dim)).astype("float32")
    memory = RNG.normal(size=(batch, mlen, dim)).astype("float32")
    segment_ids = RNG.integers(0, 3, size=(batch, length)).astype("int32")
    position = RelativePositionEncoding(dim)
    per_example = keras.ops.convert_to_numpy(position(query, memory=memory, bi_data=True))
    layer = RelativeAttention(
        num_heads=2,
        kernel_initializer=keras.initializers.RandomNormal(stddev=0.5, seed=3),
        bias_initializer=keras.initializers.RandomNormal(stddev=0.5, seed=4),
    )
    together = layer(query, per_example, segment_ids=segment_ids, memory=memory)
    for row in range(batch):
        alone = layer(
            query[row : row + 1],
            per_example[row],  # the shared [M + 2S, d] form
            segment_ids=segment_ids[row : row + 1],
            memory=memory[row : row + 1],
        )
        np.testing.assert_allclose(
            keras.ops.convert_to_numpy(together)[row : row + 1],
            keras.ops.convert_to_numpy(alone),
            atol=1e-5,
            rtol=1e-5,
        )
    # The backward rows really are encoded otherwise: the forward encoding changes them.
    shared = layer(query, per_example[0], segment_ids=segment_ids, memory=memory)
    difference = np.abs(keras.ops.convert_to_numpy(shared - together))
    assert difference[:2].max() < 1e-5 and difference[2:].max() > 1e-3


def test_relative_shift_matches_an_explicit_loop_over_distances():
    """score(i, j) = q_i . R[(M + i) - j], computed directly, equals the shifted scores."""
    batch, heads, queries, memory, dim = 2, 3, 5, 3, 6
    keys = memory + queries
    q = RNG.normal(size=(batch, heads, queries, dim)).astype("float32")
    encoding = keras.ops.convert_to_numpy(
        RelativePositionEncoding(dim)(
            np.zeros((batch, queries, dim)), np.zeros((batch, memory, dim))
        )
    )  # [K + Q, d]
    against_rows = np.einsum("bnid,rd->bnir", q, encoding)
    shifted = keras.ops.convert_to_numpy(relative_shift(against_rows, keys))
    direct = np.zeros((batch, heads, queries, keys), "float32")
    for i in range(queries):
        for j in range(keys):
            direct[:, :, i, j] = q[:, :, i] @ numpy_encoding((memory + i) - j, dim)
    np.testing.assert_allclose(shifted, direct, atol=1e-5)


def numpy_relative_attention(layer, query, encoding, segment_ids, mask, memory, memory_mask):
    """The layer's equation, one query and one key at a time."""
    w = {
        name: keras.ops.convert_to_numpy(getattr(layer, name))
        for name in (
            "query_kernel",
            "key_kernel",
            "value_kernel",
            "position_kernel",
            "output_kernel",
            "content_bias",
            "position_bias",
            "segment_bias",
            "segment_embedding",
        )
    }
    batch, length, _ = query.shape
    mlen = memory.shape[1]
    context = np.concatenate([memory, query], axis=1)
    key_segments = np.concatenate([np.zeros((batch, mlen), int), segment_ids], axis=1)
    full_mask = np.concatenate([np.repeat(memory_mask[:, None, :], length, 1), mask], axis=2)
    scale = 1 / np.sqrt(w["query_kernel"].shape[-1])
    output = np.zeros_like(query)
    for b in range(batch):
        q = np.einsum("sh,hnd->snd", query[b], w["query_kernel"])
        k = np.einsum("sh,hnd->snd", context[b], w["key_kernel"])
        v = np.einsum("sh,hnd->snd", context[b], w["value_kernel"])
        for i in range(length):
            scores = np.zeros((q.shape[1], context.shape[1]))
            for j in range(context.shape[1]):
                r = numpy_encoding((mlen + i) - j, query.shape[-1]) @ w["position_kernel"].reshape(
                    query.shape[-1], -1
                )
                r = r.reshape(q.shape[1], -1)
                s = w["segment_embedding"][int(segment_ids[b, i] != key_segments[b, j])]
                scores[:, j] = (
                    ((q[i] + w["content_bias"]) * k[j]).sum(-1)
                    + ((q[i] + w["position_bias"]) * r).sum(-1)
                    + ((q[i] + w["segment_bias"]) * s).sum(-1)
                ) * scale
            scores = np.where(full_mask[b, i][None, :], scores, -np.inf)
            probabilities = np.exp(scores - scores.max(-1, keepdims=True))
            probabilities /= probabilities.sum(-1, keepdims=True)
            attended = np.einsum("nj,jnd->nd", probabilities, v)
            output[b, i] = np.einsum("nd,hnd->h", attended, w["output_kernel"])
    return output


def test_relative_attention_equals_the_equation_with_memory_segments_and_masks():
    batch, length, mlen, dim = 2, 5, 3, 8
    query = RNG.normal(size=(batch, length, dim)).astype("float32")
    memory = RNG.normal(size=(batch, mlen, dim)).astype("float32")
    segment_ids = RNG.integers(0, 3, size=(batch, length)).astype("int32")
    mask = RNG.random((batch, length, length)) < 0.6
    mask |= np.eye(length, dtype=bool)[None]
    memory_mask = np.array([[1, 0, 1], [0, 1, 1]], "int32")
    layer = RelativeAttention(
        num_heads=2,
        kernel_initializer=keras.initializers.RandomNormal(stddev=0.5, seed=1),
        bias_initializer=keras.initializers.RandomNormal(stddev=0.5, seed=2),
    )
    encoding = RelativePositionEncoding(dim)(query, memory=memory)
    output = layer(
        query,
        encoding,
        segment_ids=segment_ids,
        attention_mask=mask,
        memory=memory,
        memory_mask=memory_mask,
    )
    expected = numpy_relative_attention(
        layer, query, keras.ops.convert_to_numpy(encoding), segment_ids, mask, memory, memory_mask
    )
    np.testing.assert_allclose(keras.ops.convert_to_numpy(output), expected, atol=1e-4)


def test_query_without_any_visible_key_gets_a_zero_output():
    x = RNG.normal(size=(1, 4, 8)).astype("float32")
    mask = np.ones((1, 4, 4), bool)
    mask[0, 2] = False
    layer = RelativeAttention(num_heads=2)
    output = keras.ops.convert_to_numpy(
        layer(x, RelativePositionEncoding(8)(x), attention_mask=mask)
    )
    np.testing.assert_array_equal(output[0, 2], 0.0)
    assert np.abs(output[0, [0, 1, 3]]).min() > 0


def test_relative_attention_layer_checks(tmp_path):
    batch, length, mlen, dim = 2, 5, 3, 8
    query = RNG.normal(size=(batch, length, dim)).astype("float32")
    memory = RNG.normal(size=(batch, mlen, dim)).astype("float32")
    encoding = keras.ops.convert_to_numpy(RelativePositionEncoding(dim)(query, memory=memory))
    check_layer(
        RelativeAttention,
        {"num_heads": 2, "dropout": 0.1},
        {
            "query": query,
            "position_encoding": encoding,
            "segment_ids": RNG.integers(0, 2, size=(batch, length)).astype("int32"),
            "attention_mask": (RNG.random((batch, length, length)) < 0.7).astype("int32"),
            "memory": memory,
            "memory_mask": np.ones((batch, mlen), "int32"),
        },
        expected_output_shape=(batch, length, dim),
        tmp_path=tmp_path,
    )


@pytest.mark.parametrize("bi_data, shape", [(False, (10, 8)), (True, (2, 10, 8))])
def test_position_encoding_layer_checks(tmp_path, bi_data, shape):
    check_layer(
        RelativePositionEncoding,
        {"hidden_dim": 8, "clamp_len": 3},
        {"inputs": np.zeros((2, 4, 8), "float32"), "memory": np.zeros((2, 2, 8), "float32")},
        call_kwargs={"bi_data": bi_data},
        expected_output_shape=shape,
        tmp_path=tmp_path,
    )


@pytest.mark.parametrize(
    "kwargs", [{"num_heads": 0}, {"num_heads": 2, "dropout": 1.5}, {"num_heads": 2, "key_dim": -1}]
)
def test_relative_attention_rejects_bad_arguments(kwargs):
    with pytest.raises(ValueError, match="num_heads|dropout|key_dim"):
        RelativeAttention(**kwargs)


def test_position_encoding_rejects_odd_width():
    with pytest.raises(ValueError, match="hidden_dim"):
        RelativePositionEncoding(7)
