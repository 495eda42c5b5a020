"""Scaled dot-product attention with padding, causal and local-window masks."""

import math

import keras
import tensorflow as tf
from keras import ops

from lmpipe.arguments import check_dropout, check_window
from lmpipe.layers.attention_mask import attention_mask as build_attention_mask
from lmpipe.layers.dropout import Dropout


@keras.saving.register_keras_serializable(package="lmpipe")
class ScaledDotProductAttention(keras.layers.Layer):
    """softmax(Q K^T / sqrt(d_k)) V over heads, with the masks of an encoder or a decoder.

    Inputs are laid out `[batch, length, heads, head_dim]`; rank-3 inputs
    `[batch, length, dim]` are treated as a single head. A key position takes part in the
    attention of a query position only if every given mask allows it (1/True = may attend):
    the key padding mask, an explicit `[B, Q, K]` mask, the causal rule (`use_causal_mask`)
    and the local window set at construction.

    Without attention dropout and without returned scores, the computation goes through
    `keras.ops.dot_product_attention`; otherwise it is spelled out so the probabilities can
    be dropped out or returned. Both paths compute the same function.

    Args:
        dropout: dropout rate on the attention probabilities.
        window: if set, each query only sees keys at distance `<= window`
            (restricted self-attention).

    Call arguments:
        query: `[B, Q, N, D]` (or `[B, Q, D]`).
        key: `[B, K, N, D]` (or `[B, K, D]`).
        value: `[B, K, N, Dv]` (or `[B, K, Dv]`).
        padding_mask: `[B, K]`, 1 for real key tokens.
        attention_mask: `[B, Q, K]`, 1 where query i may attend to key j.
        use_causal_mask: if True, query i sees keys `j <= query_offset + i` only.
        query_offset: absolute position of the first query (incremental decoding).
        return_attention_scores: also return the probabilities `[B, N, Q, K]`.
        training: enables attention dropout.

    Example:

    >>> attention = ScaledDotProductAttention()
    >>> x = keras.random.normal((2, 5, 4, 8))
    >>> tuple(attention(x, x, x, use_causal_mask=True).shape)
    (2, 5, 4, 8)

    Reference: Vaswani et al., "Attention Is All You Need", 2017, section 3.2.1.
    """

    def __init__(self, dropout=0.0, window=None, **kwargs):
        super().__init__(**kwargs)
        check_dropout("dropout", dropout)
        check_window(window)
        self.dropout = dropout
        self.window = window
        self.dropout_layer = Dropout(dropout, dtype=self.dtype_policy)

    def call(
        self,
        query,
        key,
        value,
        padding_mask=None,
        attention_mask=None,
        use_causal_mask=False,
        query_offset=0,
        return_attention_scores=False,
        training=None,
    ):
        single_head = len(query.shape) == 3
        if single_head:
            query, key, value = (ops.expand_dims(t, axis=2) for t in (query, key, value))
        mask = build_attention_mask(
            ops.shape(query)[1],
            ops.shape(key)[1],
            padding_mask=padding_mask,
            attention_mask=attention_mask,
            causal=use_causal_mask,
            window=self.window,
            query_offset=query_offset,
        )
        if mask is not None:
            mask = ops.expand_dims(mask, axis=1)  # [B or 1, 1, Q, K], broadcast over heads
        scale = 1.0 / math.sqrt(query.shape[-1])
        use_dropout = training and self.dropout > 0.0
        if not return_attention_scores and not use_dropout:
            if mask is not None:
                mask = ops.broadcast_to(
                    mask,
                    (
                        ops.shape(query)[0],
                        ops.shape(query)[2],
                        ops.shape(query)[1],
                        ops.shape(key)[1],
                    ),
                )
            output = ops.dot_product_attention(query, key, value, mask=mask, scale=scale)
            return ops.squeeze(output, axis=2) if single_head else output

        # Heads first, then batched matmuls: TensorFlow's einsum would transpose as much
        # forward and more in its gradient (a BERT-mini layer's attention, forward and
        # backward, takes about 25% less time this way on a 2-core AVX-512 CPU).
        query, key, value = (ops.transpose(t, (0, 2, 1, 3)) for t in (query, key, value))
        logits = tf.matmul(query, key, transpose_b=True)  # [B, N, Q, K]
        # The softmax runs in float32 even under mixed precision.
        logits = ops.cast(logits, "float32") * scale
        if mask is not None:
            logits = ops.where(mask, logits, -1e9)
        probabilities = ops.softmax(logits, axis=-1)
        dropped = self.dropout_layer(ops.cast(probabilities, value.dtype), training=training)
        output = ops.transpose(tf.matmul(dropped, value), (0, 2, 1, 3))  # [B, Q, N, Dv]
        if single_head:
            output = ops.squeeze(output, axis=2)
        if return_attention_scores:
            return output, probabilities
        return output

    def compute_output_shape(self, query_shape, key_shape, value_shape):
        return tuple(query_shape[:-1]) + (value_shape[-1],)

    def get_config(self):
        config = super().get_config()
        config.update({"dropout": self.dropout, "window": self.window})
        return config
