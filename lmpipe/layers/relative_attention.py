"""Multi-head attention with relative position and segment terms (Transformer-XL, XLNet)."""

import keras
from keras import ops

from lmpipe.arguments import check_dropout, check_positive_int
from lmpipe.layers.dropout import Dropout
from lmpipe.layers.initializers import bert_initializer, clone_initializer
from lmpipe.layers.multi_head_attention import contract_rows

# Logit of a hidden key: low enough to vanish after softmax, finite so that sums stay finite.
MASKED_LOGIT = -1e30


def relative_shift(scores, key_length):
    """Turn scores against position rows into scores against keys.

    `scores[..., i, p]` scores query `i` against row `p` of a `RelativePositionEncoding`
    (distance `K - p`); the result `[..., i, j]` is `scores[..., i, Q - i + j]`, the score
    of the distance `(M + i) - j` from query `i` (after `M` memory positions) to key `j`.
    The reshapes do the per-row shift without a gather: dropping the first `Q` entries of the
    flattened `[R, Q]` view moves row `i` of the `[Q, R - 1]` view left by `Q - i`.

    Args:
        scores: `[B, N, Q, R]` with `R = K + Q`.
        key_length: `K`.

    Returns:
        `[B, N, Q, K]`.
    """
    batch, heads, query_length, rows = (ops.shape(scores)[axis] for axis in range(4))
    scores = ops.reshape(scores, (batch, heads, rows, query_length))[:, :, 1:, :]
    scores = ops.reshape(scores, (batch, heads, query_length, rows - 1))
    return scores[:, :, :, :key_length]


@keras.saving.register_keras_serializable(package="lmpipe")
class RelativeAttention(keras.layers.Layer):
    """Multi-head attention whose logits add content, position and segment terms.

    For query position `i` and key `j` (`M` memory positions come first among the keys),
    per head, with `q_i = W_q x_i`, `k_j = W_k c_j`, `r = W_r R_{(M+i)-j}`:

        score(i, j) = [(q_i + u)^T k_j + (q_i + v)^T r + (q_i + b_s)^T s_ij] / sqrt(d_head)

    where `u` (`r_w_bias`), `v` (`r_r_bias`) and `b_s` (`r_s_bias`) are learned per head,
    `R` comes from `RelativePositionEncoding` and `s_ij` is the learned segment embedding of
    "same segment" or "different segments" (queries and keys in different segments). The
    output is `W_o sum_j softmax_j(score(i, j)) W_v c_j`; residual and LayerNorm are left to
    the caller (`TwoStreamRelativeAttention`). There are no projection biases, as in XLNet.

    Queries and values cover the same `S` sequence positions (self-attention); the queries may
    carry other content than the values (XLNet's query stream). Masks (1 = may attend):
    `attention_mask` `[B, S, S]` over the sequence keys, `memory_mask` `[B, M]` over the
    memory keys (all visible when not given). As in XLNet, memory positions count as segment
    0. A query that may attend to no key gets a zero attention output, never a uniform average
    over hidden keys, so a fully masked query stream row cannot see its own content.

    Args:
        num_heads: number of heads `N`.
        key_dim: size of each head; defaults to `d_model / N`.
        dropout: dropout rate on the attention probabilities.
        kernel_initializer: initializer of the projection kernels `W_q, W_k, W_v, W_r, W_o`.
        bias_initializer: initializer of `u`, `v`, `b_s` and the segment embedding (XLNet
            draws them from the same normal distribution as the kernels).

    Call arguments:
        query: `[B, S, d_model]`, the stream whose queries attend.
        position_encoding: `[M + 2 S, d_model]` from `RelativePositionEncoding`, shared by the
            batch, or `[B, M + 2 S, d_model]`, one per example (its `bi_data=True`).
        value: `[B, S, d_model]`, the content attended to; defaults to `query`.
        segment_ids: `[B, S]` int segment ids; no segment term when not given.
        attention_mask: `[B, S, S]`, 1 = query `i` may attend to sequence key `j`.
        memory: `[B, M, d_model]` states prepended to the keys and values.
        memory_mask: `[B, M]`, 1 = this memory position may be attended to.
        context_heads: the result of `compute_context_heads` for the same `value`, `memory`
            and `position_encoding`, to reuse the key/value projections across streams.
        training: enables dropout.

    Returns:
        `[B, S, d_model]`.

    Example:

    >>> from lmpipe.layers.relative_position_encoding import RelativePositionEncoding
    >>> x = keras.random.normal((2, 6, 16))
    >>> r = RelativePositionEncoding(16)(x)
    >>> attention = RelativeAttention(num_heads=2)
    >>> tuple(attention(x, r, segment_ids=keras.ops.zeros((2, 6), "int32")).shape)
    (2, 6, 16)

    Reference: Dai et al., "Transformer-XL", 2019, section 3.3; Yang et al., "XLNet", 2019,
    section 2.5 (relative segment encodings).
    """

    def __init__(
        self,
        num_heads,
        key_dim=None,
        dropout=0.0,
        kernel_initializer=None,
        bias_initializer=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        check_positive_int("num_heads", num_heads)
        if key_dim is not None:
            check_positive_int("key_dim", key_dim)
        check_dropout("dropout", dropout)
        self.num_heads = num_heads
        self.key_dim = key_dim
        self.dropout = dropout
        self.kernel_initializer = keras.initializers.get(kernel_initializer or bert_initializer())
        self.bias_initializer = keras.initializers.get(bias_initializer or bert_initializer())

    def build(self, query_shape):
        d_model = query_shape[-1]
        if self.key_dim is None:
            if d_model % self.num_heads:
                raise ValueError(
                    f"The hidden size ({d_model}) must be divisible by `num_heads` "
                    f"({self.num_heads}) when `key_dim` is not given."
                )
            self._key_dim = d_model // self.num_heads
        else:
            self._key_dim = self.key_dim
        heads = (self.num_heads, self._key_dim)

        def kernel(name, shape, initializer):
            return self.add_weight(
                name=name, shape=shape, initializer=clone_initializer(initializer)
            )

        # [d_model, N, d_head] kernels, laid out as XLNet's q, k, v, r and o.
        self.query_kernel = kernel("query_kernel", (d_model, *heads), self.kernel_initializer)
        self.key_kernel = kernel("key_kernel", (d_model, *heads), self.kernel_initializer)
        self.value_kernel = kernel("value_kernel", (d_model, *heads), self.kernel_initializer)
        self.position_kernel = kernel("position_kernel", (d_model, *heads), self.kernel_initializer)
        self.output_kernel = kernel("output_kernel", (d_model, *heads), self.kernel_initializer)
        self.content_bias = kernel("content_bias", heads, self.bias_initializer)  # u
        self.position_bias = kernel("position_bias", heads, self.bias_initializer)  # v
        self.segment_bias = kernel("segment_bias", heads, self.bias_initializer)  # b_s
        self.segment_embedding = kernel("segment_embedding", (2, *heads), self.bias_initializer)
        self.dropout_layer = Dropout(self.dropout, dtype=self.dtype_policy)
        self.built = True

    def compute_context_heads(self, value, position_encoding, memory=None):
        """Keys `[B, K, N, d]`, values `[B, K, N, d]` and position keys `[M + 2S, N, d]` (or
        `[B, M + 2S, N, d]` for per-example encodings)."""
        context = value if memory is None else ops.concatenate([memory, value], axis=1)
        # The projections as 2-D matmuls (`contract_rows`: see `HeadProjection`).
        key_heads = contract_rows(context, self.key_kernel, 1)  # [B, K, N, d]
        value_heads = contract_rows(context, self.value_kernel, 1)
        position_heads = contract_rows(
            ops.cast(position_encoding, self.compute_dtype), self.position_kernel, 1
        )
        return key_heads, value_heads, position_heads

    def call(
        self,
        query,
        position_encoding,
        value=None,
        segment_ids=None,
        attention_mask=None,
        memory=None,
        memory_mask=None,
        context_heads=None,
        training=None,
    ):
        value = query if value is None else value
        if context_heads is None:
            context_heads = self.compute_context_heads(value, position_encoding, memory)
        key_heads, value_heads, position_heads = context_heads
        key_length = ops.shape(key_heads)[1]
        query_heads = contract_rows(query, self.query_kernel, 1)  # [B, S, N, d]

        content = ops.einsum("bind,bjnd->bnij", query_heads + self.content_bias, key_heads)
        rows = "brnd" if len(position_heads.shape) == 4 else "rnd"
        position = ops.einsum(
            f"bind,{rows}->bnir", query_heads + self.position_bias, position_heads
        )  # [B, N, S, M + 2S]
        position = relative_shift(position, key_length)  # [B, N, S, K]
        scores = content + position
        if segment_ids is not None:
            # [B, N, S, 2]: each query's score for "same" (0) and "different" (1) segments.
            segment = ops.einsum(
                "bind,snd->bnis", query_heads + self.segment_bias, self.segment_embedding
            )
            key_segments = ops.cast(segment_ids, "int32")
            if memory is not None:
                memory_segments = ops.zeros_like(memory[:, :, 0], dtype="int32")
                # Memory counts as segment 0, as in XLNet.
                key_segments = ops.concatenate([memory_segments, key_segments], axis=1)
            different = ops.cast(segment_ids, "int32")[:, :, None] != key_segments[:, None, :]
            scores = scores + ops.where(
                different[:, None, :, :], segment[..., 1:2], segment[..., 0:1]
            )
        scores = ops.cast(scores, "float32") / ops.sqrt(float(self._key_dim))

        mask = self._full_mask(query, attention_mask, memory, memory_mask)  # [B, S, K]
        if mask is not None:
            mask = mask[:, None, :, :]  # [B, 1, S, K]
            scores = ops.where(mask, scores, MASKED_LOGIT)
        probabilities = ops.softmax(scores, axis=-1)
        if mask is not None:
            # Zero for rows without any visible key (softmax alone would average them all).
            probabilities = probabilities * ops.cast(mask, probabilities.dtype)
        probabilities = self.dropout_layer(
            ops.cast(probabilities, self.compute_dtype), training=training
        )
        attended = ops.einsum("bnij,bjnd->bind", probabilities, value_heads)  # [B, S, N, d]
        # [B, S, d_model]: "bind,hnd->bih"
        return contract_rows(attended, self.output_kernel, 2, kernel_last=True)

    @staticmethod
    def _full_mask(query, attention_mask, memory, memory_mask):
        if attention_mask is None and memory_mask is None:
            return None
        batch, length = ops.shape(query)[0], ops.shape(query)[1]
        if attention_mask is None:
            attention_mask = ops.ones((batch, length, length), "bool")
        attention_mask = ops.cast(attention_mask, "bool")
        if memory is None:
            return attention_mask
        memory_length = ops.shape(memory)[1]
        if memory_mask is None:
            memory_mask = ops.ones((batch, memory_length), "bool")
        memory_mask = ops.broadcast_to(
            ops.cast(memory_mask, "bool")[:, None, :], (batch, length, memory_length)
        )
        return ops.concatenate([memory_mask, attention_mask], axis=-1)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "key_dim": self.key_dim,
                "dropout": self.dropout,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
            }
        )
        return config
