"""XLNet's layer: two-stream relative self-attention and a position-wise feed-forward network."""

import keras
from keras import ops

from lmpipe.arguments import check_dropout, check_positive_int
from lmpipe.layers.activations import get_activation
from lmpipe.layers.dropout import Dropout
from lmpipe.layers.initializers import bert_initializer, clone_initializer
from lmpipe.layers.layer_normalization import LayerNormalization
from lmpipe.layers.relative_attention import RelativeAttention


@keras.saving.register_keras_serializable(package="lmpipe")
class TwoStreamRelativeAttention(keras.layers.Layer):
    """One XLNet layer: the content stream h and the query stream g, sharing all weights.

        h = FFN(LayerNorm(h + Dropout(RelAttn(Q = h, KV = [mem, h], mask = c))))
        g = FFN(LayerNorm(g + Dropout(RelAttn(Q = g, KV = [mem, h], mask = perm))))
        FFN(x) = LayerNorm(x + Dropout(W_2 Dropout(act(W_1 x + b_1)) + b_2))

    Both streams take their keys and values from the content stream (and the memory), so the
    key/value projections are computed once. Masks (1 = may attend): position `i` of the query
    stream sees sequence position `j` iff `perm_mask[b, i, j] = 1` and `j` is a real token; the
    content stream also sees itself (`c = perm_mask` with the diagonal set; every position,
    even a padded one, sees itself, so no content row is empty). Without `perm_mask` every
    real token is visible (fine-tuning and serving). Memory positions are visible to all
    queries of both streams where `memory_mask` is 1 (everywhere when it is not given).

    The query stream: with `target_mapping` `[B, P, S]` (one-hot rows, zero rows for padded
    predictions), `query` holds the `P` prediction states `[B, P, d]`; they are scattered to
    their sequence positions, attend there (so relative distances are those of their positions)
    and are gathered back, as XLNet does. Scattering and gathering commute with the bias-free
    projections, so this equals attending with the `P` queries at their positions; rows at
    positions without a target are computed and dropped. Without `target_mapping`, `query` is
    `[B, S, d]`, one state per sequence position.

    Args:
        num_heads: number of attention heads.
        intermediate_dim: width of the feed-forward layer (d_inner).
        dropout: dropout rate on the residual branches and inside the feed-forward network.
        attention_dropout: dropout on the attention probabilities; defaults to `dropout`.
        activation: activation of the feed-forward network ("gelu" in XLNet).
        layer_norm_epsilon: epsilon of the LayerNorms.
        kernel_initializer: initializer of all kernels (and the attention's biases).
        bias_initializer: initializer of the feed-forward biases.

    Call arguments:
        content: `[B, S, d]` content stream h.
        position_encoding: `[M + 2S, d]` from `RelativePositionEncoding`, or `[B, M + 2S, d]`
            (one per example, its `bi_data=True`).
        query: query stream g, `[B, P, d]` with `target_mapping`, else `[B, S, d]`; None for
            the content stream alone.
        target_mapping: `[B, P, S]` float, see above.
        segment_ids: `[B, S]` int segment ids.
        padding_mask: `[B, S]`, 1 = real token.
        perm_mask: `[B, S, S]` float or bool, 1 = position i may attend to position j.
        memory: `[B, M, d]` cached states of the previous segment for this layer.
        memory_mask: `[B, M]`, 1 = memory position may be attended to.
        training: enables dropout.

    Returns:
        The new content stream `[B, S, d]`, or `(content, query)` when `query` is given.

    Example:

    >>> from lmpipe.layers.relative_position_encoding import RelativePositionEncoding
    >>> h = keras.random.normal((2, 6, 16))
    >>> g = keras.random.normal((2, 2, 16))
    >>> mapping = keras.ops.one_hot(keras.ops.array([[4, 5], [3, 5]]), 6)
    >>> perm = keras.ops.tril(keras.ops.ones((2, 6, 6)), -1)  # left-to-right order
    >>> layer = TwoStreamRelativeAttention(num_heads=2, intermediate_dim=32)
    >>> h, g = layer(h, RelativePositionEncoding(16)(h), query=g, target_mapping=mapping,
    ...              perm_mask=perm)
    >>> tuple(h.shape), tuple(g.shape)
    ((2, 6, 16), (2, 2, 16))

    Reference: Yang et al., "XLNet: Generalized Autoregressive Pretraining for Language
    Understanding", 2019, section 2.3 (two-stream self-attention) and the open-source
    `two_stream_rel_attn` and `positionwise_ffn`.
    """

    def __init__(
        self,
        num_heads,
        intermediate_dim,
        dropout=0.1,
        attention_dropout=None,
        activation="gelu",
        layer_norm_epsilon=1e-12,
        kernel_initializer=None,
        bias_initializer="zeros",
        **kwargs,
    ):
        super().__init__(**kwargs)
        check_positive_int("num_heads", num_heads)
        check_positive_int("intermediate_dim", intermediate_dim)
        check_dropout("dropout", dropout)
        attention_dropout = dropout if attention_dropout is None else attention_dropout
        check_dropout("attention_dropout", attention_dropout)
        self.num_heads = num_heads
        self.intermediate_dim = intermediate_dim
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.activation = get_activation(activation)
        self.layer_norm_epsilon = layer_norm_epsilon
        self.kernel_initializer = keras.initializers.get(kernel_initializer or bert_initializer())
        self.bias_initializer = keras.initializers.get(bias_initializer)

    def build(self, content_shape):
        hidden_dim = content_shape[-1]
        if hidden_dim % self.num_heads:
            raise ValueError(
                f"The hidden size ({hidden_dim}) must be divisible by `num_heads` "
                f"({self.num_heads})."
            )
        self.attention = RelativeAttention(
            self.num_heads,
            dropout=self.attention_dropout,
            kernel_initializer=clone_initializer(self.kernel_initializer),
            bias_initializer=clone_initializer(self.kernel_initializer),
            dtype=self.dtype_policy,
            name="attention",
        )
        self.attention.build(content_shape)

        def layer_norm(name):
            norm = LayerNormalization(
                epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name=name
            )
            norm.build(content_shape)
            return norm

        def dense(units, name, activation=None):
            return keras.layers.Dense(
                units,
                activation=activation,
                kernel_initializer=clone_initializer(self.kernel_initializer),
                bias_initializer=clone_initializer(self.bias_initializer),
                dtype=self.dtype_policy,
                name=name,
            )

        self.attention_layer_norm = layer_norm("attention_layer_norm")
        self.intermediate_dense = dense(
            self.intermediate_dim, "intermediate_dense", self.activation
        )
        self.intermediate_dense.build(content_shape)
        self.output_dense = dense(hidden_dim, "output_dense")
        self.output_dense.build(tuple(content_shape[:-1]) + (self.intermediate_dim,))
        self.output_layer_norm = layer_norm("output_layer_norm")
        self.dropout_layer = Dropout(self.dropout, dtype=self.dtype_policy)
        self.built = True

    def _masks(self, content, padding_mask, perm_mask):
        """(content-stream mask, query-stream mask), `[B, S, S]` bool, or (None, None)."""
        if padding_mask is None and perm_mask is None:
            return None, None
        length = ops.shape(content)[1]
        if perm_mask is None:
            visible = ops.ones((ops.shape(content)[0], length, length), "bool")
        else:
            visible = ops.cast(perm_mask, "bool")
        if padding_mask is not None:
            visible = ops.logical_and(visible, ops.cast(padding_mask, "bool")[:, None, :])
        itself = ops.eye(length, dtype="bool")[None]
        return ops.logical_or(visible, itself), visible

    def _post_attention(self, stream, attended, training):
        x = self.attention_layer_norm(stream + self.dropout_layer(attended, training=training))
        hidden = self.dropout_layer(self.intermediate_dense(x), training=training)
        hidden = self.dropout_layer(self.output_dense(hidden), training=training)
        return self.output_layer_norm(x + hidden)

    def call(
        self,
        content,
        position_encoding,
        query=None,
        target_mapping=None,
        segment_ids=None,
        padding_mask=None,
        perm_mask=None,
        memory=None,
        memory_mask=None,
        training=None,
    ):
        content_mask, query_mask = self._masks(content, padding_mask, perm_mask)
        context_heads = self.attention.compute_context_heads(content, position_encoding, memory)
        shared = {
            "segment_ids": segment_ids,
            "memory": memory,
            "memory_mask": memory_mask,
            "context_heads": context_heads,
            "training": training,
        }
        attended = self.attention(
            content, position_encoding, value=content, attention_mask=content_mask, **shared
        )
        content_output = self._post_attention(content, attended, training)
        if query is None:
            return content_output

        query_at_positions = query
        if target_mapping is not None:
            target_mapping = ops.cast(target_mapping, query.dtype)
            query_at_positions = ops.einsum("bps,bph->bsh", target_mapping, query)  # [B, S, d]
        attended = self.attention(
            query_at_positions,
            position_encoding,
            value=content,
            attention_mask=query_mask,
            **shared,
        )
        if target_mapping is not None:
            attended = ops.einsum("bps,bsh->bph", target_mapping, attended)  # [B, P, d]
        return content_output, self._post_attention(query, attended, training)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "intermediate_dim": self.intermediate_dim,
                "dropout": self.dropout,
                "attention_dropout": self.attention_dropout,
                "activation": keras.activations.serialize(self.activation),
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
            }
        )
        return config
