"""Attention of a recurrent decoder over the encoder states: dot, general and additive scores."""

import keras
from keras import ops

from lmpipe.arguments import check_positive_int
from lmpipe.layers.initializers import clone_initializer

SCORES = ("dot", "general", "additive")


@keras.saving.register_keras_serializable(package="lmpipe")
class RnnAttention(keras.layers.Layer):
    """Scores every encoder state h_j against a decoder state s, softmax, weighted sum.

    score(s, h_j) is, by `score`:
        "dot":       s^T h_j                        (Luong et al.; needs equal sizes)
        "general":   s^T W_a h_j                    (Luong et al.)
        "additive":  v_a^T tanh(W_1 h_j + W_2 s)    (Bahdanau et al.)
    a_j = softmax_j(score(s, h_j)) over the real source positions (`padding_mask` 1); the
    weights of padded positions are exactly 0, and the context is c = sum_j a_j h_j.

    The query may be one state per sequence `[B, H_q]` (one decoding step) or a sequence of
    them `[B, T, H_q]`. The parts that depend only on the encoder states (W_a h or W_1 h) can
    be computed once per source with `compute_keys` and passed as `keys` at every step.

    Args:
        score: "dot", "general" or "additive".
        units: size of the additive score's hidden layer; defaults to the query size.
        kernel_initializer: initializer of W_a, W_1, W_2 and v_a.

    Call arguments:
        query: the decoder state(s), `[B, H_q]` or `[B, T, H_q]`.
        value: the encoder states `[B, S, H]`.
        padding_mask: `[B, S]`, 1 for real source positions; None = all real.
        keys: `compute_keys(value)`, if already computed.

    Returns:
        `(context, weights)`: `[B, H]` and `[B, S]` for a `[B, H_q]` query, `[B, T, H]` and
        `[B, T, S]` for a `[B, T, H_q]` one.

    Example:

    >>> attention = RnnAttention(score="additive")
    >>> states = keras.random.normal((2, 7, 16))
    >>> context, weights = attention(keras.random.normal((2, 16)), states)
    >>> tuple(context.shape), tuple(weights.shape)
    ((2, 16), (2, 7))

    Reference: Bahdanau et al., "Neural Machine Translation by Jointly Learning to Align and
    Translate", 2015; Luong et al., "Effective Approaches to Attention-based Neural Machine
    Translation", 2015, section 3.1.
    """

    def __init__(self, score="dot", units=None, kernel_initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        if score not in SCORES:
            raise ValueError(f"`score` must be one of {SCORES}, got score={score!r}.")
        check_positive_int("units", units, none=True)
        self.score = score
        self.units = units
        self.kernel_initializer = keras.initializers.get(kernel_initializer)

    def _dense(self, units, name):
        return keras.layers.Dense(
            units,
            use_bias=False,
            kernel_initializer=clone_initializer(self.kernel_initializer),
            dtype=self.dtype_policy,
            name=name,
        )

    def build(self, query_shape, value_shape, padding_mask_shape=None, keys_shape=None):
        query_dim, value_dim = query_shape[-1], value_shape[-1]
        if self.score == "dot" and query_dim != value_dim:
            raise ValueError(
                f'score="dot" needs queries and encoder states of one size, got {query_dim} '
                f'and {value_dim}: use score="general" or "additive".'
            )
        if self.score == "general":
            self.key_dense = self._dense(query_dim, "key_dense")  # W_a
            self.key_dense.build(value_shape)
        if self.score == "additive":
            units = self.units or query_dim
            self.key_dense = self._dense(units, "key_dense")  # W_1
            self.key_dense.build(value_shape)
            self.query_dense = self._dense(units, "query_dense")  # W_2
            self.query_dense.build(query_shape)
            self.score_vector = self.add_weight(
                shape=(units,),
                initializer=clone_initializer(self.kernel_initializer),
                name="score_vector",
            )  # v_a
        self.built = True

    def compute_keys(self, value):
        """The encoder-side part of the scores: h, W_a h or W_1 h, `[B, S, *]`."""
        if self.score == "dot":
            return value
        return self.key_dense(value)

    def call(self, query, value, padding_mask=None, keys=None):
        keys = self.compute_keys(value) if keys is None else keys
        one_step = len(query.shape) == 2
        if one_step:
            query = query[:, None, :]  # [B, 1, H_q]
        if self.score == "additive":
            hidden = ops.tanh(keys[:, None, :, :] + self.query_dense(query)[:, :, None, :])
            scores = ops.einsum("btsu,u->bts", hidden, self.score_vector)  # [B, T, S]
        else:
            scores = ops.einsum("btq,bsq->bts", query, keys)  # [B, T, S]
        if padding_mask is not None:
            real = ops.cast(padding_mask, "bool")[:, None, :]  # [B, 1, S]
            # A large negative score underflows to a weight of exactly 0 in the softmax; the
            # final where also zeroes rows without any real position.
            scores = ops.where(real, scores, ops.cast(-1e9, scores.dtype))
            weights = ops.where(real, ops.softmax(scores, axis=-1), 0.0)
        else:
            weights = ops.softmax(scores, axis=-1)
        context = ops.einsum("bts,bsh->bth", weights, value)  # [B, T, H]
        if one_step:
            return context[:, 0], weights[:, 0]
        return context, weights

    def compute_output_shape(
        self, query_shape, value_shape, padding_mask_shape=None, keys_shape=None
    ):
        context_shape = tuple(query_shape[:-1]) + (value_shape[-1],)
        return context_shape, tuple(query_shape[:-1]) + (value_shape[1],)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "score": self.score,
                "units": self.units,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            }
        )
        return config
