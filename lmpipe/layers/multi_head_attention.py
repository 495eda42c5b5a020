"""Multi-head attention for self- and cross-attention, with a key/value cache."""

import math

import keras
import tensorflow as tf
from keras import ops

from lmpipe.arguments import check_dropout, check_positive_int, check_window
from lmpipe.layers.initializers import clone_initializer
from lmpipe.layers.scaled_dot_product_attention import ScaledDotProductAttention


@keras.saving.register_keras_serializable(package="lmpipe")
class MultiHeadAttention(keras.layers.Layer):
    """MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W_O, head_i = Attention(Q W_i^Q, ...).

    `h` heads of size `d_model / h` by default. The projection weights are laid out as in
    `keras.layers.MultiHeadAttention` (`[d_model, heads, head_dim]` kernels, `[heads,
    head_dim]` biases, output kernel `[heads, head_dim, d_model]`, created in the order
    query, key, value, output), so weights move between the two with `set_weights`.

    Masks (1/True = may attend): `padding_mask` marks the real key tokens, `attention_mask`
    is a full `[B, Q, K]` mask, `use_causal_mask` applies the decoder's causal rule and the
    constructor's `window` restricts every query to keys at distance `<= window`.

    Incremental decoding: pass `cache` `[B, 2, max_length, heads, head_dim]` (keys at index 0,
    values at index 1) and `cache_update_index`; the keys and values of the new query steps
    are written at `cache_update_index`, the queries attend to every cached position up to
    their own, and the call returns `(output, updated_cache)`. For cross-attention, pass the
    precomputed `cache` of the encoder (see `compute_cache`) without `cache_update_index`.
    An integer `cache_update_index` is checked against the cache's length when both lengths
    are static; a tensor index cannot be checked while tracing and must lie in
    `[0, max_length - new_steps]`.

    Args:
        num_heads: number of heads `h`.
        key_dim: size of each query/key head; defaults to `d_model / h`, and `d_model` must
            then be divisible by `h`.
        value_dim: size of each value head; defaults to `key_dim`.
        output_dim: size of the output; defaults to the query's last dimension.
        dropout: dropout rate on the attention probabilities.
        window: if set, local attention with this radius.
        use_bias: whether the projections have biases.
        kernel_initializer: initializer of the projection kernels.
        bias_initializer: initializer of the projection biases.
        output_kernel_initializer: initializer of the output projection's kernel `W_O`;
            defaults to `kernel_initializer` (GPT-2 scales it down, see
            `TransformerDecoderBlock`).

    Call arguments:
        query: `[B, Q, d_model]`.
        value: `[B, K, d_model]`; defaults to `query` (self-attention).
        key: `[B, K, d_model]`; defaults to `value`.
        padding_mask: `[B, K]` key padding mask.
        attention_mask: `[B, Q, K]` mask.
        use_causal_mask: causal (decoder) masking.
        cache: key/value cache, see above.
        cache_update_index: where the new steps go in `cache` (int or scalar tensor).
        return_attention_scores: also return the probabilities `[B, h, Q, K]`.
        training: enables attention dropout.

    Example:

    >>> mha = MultiHeadAttention(num_heads=4)
    >>> x = keras.random.normal((2, 6, 32))
    >>> output, scores = mha(x, use_causal_mask=True, return_attention_scores=True)
    >>> tuple(output.shape), tuple(scores.shape)
    ((2, 6, 32), (2, 4, 6, 6))

    Reference: Vaswani et al., "Attention Is All You Need", 2017, section 3.2.2.
    """

    def __init__(
        self,
        num_heads,
        key_dim=None,
        value_dim=None,
        output_dim=None,
        dropout=0.0,
        window=None,
        use_bias=True,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        output_kernel_initializer=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        check_positive_int("num_heads", num_heads)
        check_dropout("dropout", dropout)
        check_window(window)
        self.num_heads = num_heads
        self.key_dim = key_dim
        self.value_dim = value_dim
        self.output_dim = output_dim
        self.dropout = dropout
        self.window = window
        self.use_bias = use_bias
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.output_kernel_initializer = (
            None
            if output_kernel_initializer is None
            else keras.initializers.get(output_kernel_initializer)
        )

    def _projection(self, name, equation, output_shape, bias_axes, kernel_initializer=None):
        return HeadProjection(
            equation,
            output_shape=output_shape,
            bias_axes=bias_axes if self.use_bias else None,
            kernel_initializer=clone_initializer(
                self.kernel_initializer if kernel_initializer is None else kernel_initializer
            ),
            bias_initializer=clone_initializer(self.bias_initializer),
            dtype=self.dtype_policy,
            name=name,
        )

    def build(self, query_shape, value_shape=None, key_shape=None):
        value_shape = query_shape if value_shape is None else value_shape
        key_shape = value_shape if key_shape is None else key_shape
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
        self._value_dim = self.value_dim or self._key_dim
        output_dim = self.output_dim or d_model
        h = self.num_heads
        self.query_dense = self._projection(
            "query", "abc,cde->abde", (None, h, self._key_dim), "de"
        )
        self.query_dense.build(query_shape)
        self.key_dense = self._projection("key", "abc,cde->abde", (None, h, self._key_dim), "de")
        self.key_dense.build(key_shape)
        self.value_dense = self._projection(
            "value", "abc,cde->abde", (None, h, self._value_dim), "de"
        )
        self.value_dense.build(value_shape)
        self.output_dense = self._projection(
            "attention_output",
            "abcd,cde->abe",
            (None, output_dim),
            "e",
            kernel_initializer=self.output_kernel_initializer,
        )
        self.output_dense.build((query_shape[0], query_shape[1], h, self._value_dim))
        self.attention = ScaledDotProductAttention(
            dropout=self.dropout, window=self.window, dtype=self.dtype_policy, name="attention"
        )
        self.built = True

    def compute_cache(self, value, key=None):
        """Keys and values of `value` (and `key`) as a cache `[B, 2, K, heads, head_dim]`.

        Used for cross-attention during decoding: the encoder output is projected once and
        reused at every step.
        """
        key = value if key is None else key
        return ops.stack([self.key_dense(key), self.value_dense(value)], axis=1)

    def call(
        self,
        query,
        value=None,
        key=None,
        padding_mask=None,
        attention_mask=None,
        use_causal_mask=False,
        cache=None,
        cache_update_index=None,
        return_attention_scores=False,
        training=None,
    ):
        value = query if value is None else value
        key = value if key is None else key
        query_heads = self.query_dense(query)  # [B, Q, h, d_k]
        query_offset = 0
        if cache is not None and cache_update_index is None:
            key_heads, value_heads = cache[:, 0], cache[:, 1]
        else:
            key_heads = self.key_dense(key)  # [B, K, h, d_k]
            value_heads = self.value_dense(value)  # [B, K, h, d_v]
        if cache is not None and cache_update_index is not None:
            # An out-of-range start would overwrite a real slot (or write nothing).
            lengths_known = cache.shape[2] is not None and query.shape[1] is not None
            if (
                isinstance(cache_update_index, int)
                and lengths_known
                and not 0 <= cache_update_index <= cache.shape[2] - query.shape[1]
            ):
                raise ValueError(
                    f"`cache_update_index`={cache_update_index} does not fit {query.shape[1]} "
                    f"new steps into a cache of length {cache.shape[2]}."
                )
            key_heads = _write_steps(cache[:, 0], key_heads, cache_update_index)
            value_heads = _write_steps(cache[:, 1], value_heads, cache_update_index)
            cache = ops.stack([key_heads, value_heads], axis=1)
            query_offset = cache_update_index
            # Cache slots past the newest step hold nothing yet: hide them from every query.
            filled = ops.arange(ops.shape(key_heads)[1]) < (
                ops.cast(cache_update_index, "int32") + ops.shape(query)[1]
            )
            filled = ops.broadcast_to(
                filled[None, :], (ops.shape(query)[0], ops.shape(key_heads)[1])
            )
            padding_mask = (
                filled
                if padding_mask is None
                else ops.logical_and(filled, ops.cast(padding_mask, "bool"))
            )
        attended = self.attention(
            query_heads,
            key_heads,
            value_heads,
            padding_mask=padding_mask,
            attention_mask=attention_mask,
            use_causal_mask=use_causal_mask,
            query_offset=query_offset,
            return_attention_scores=return_attention_scores,
            training=training,
        )
        if return_attention_scores:
            attended, scores = attended
        output = self.output_dense(attended)  # [B, Q, output_dim]
        results = (output,)
        if cache is not None:
            results += (cache,)
        if return_attention_scores:
            results += (scores,)
        return results[0] if len(results) == 1 else results

    def compute_output_shape(self, query_shape, value_shape=None, key_shape=None):
        return tuple(query_shape[:-1]) + (self.output_dim or query_shape[-1],)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "key_dim": self.key_dim,
                "value_dim": self.value_dim,
                "output_dim": self.output_dim,
                "dropout": self.dropout,
                "window": self.window,
                "use_bias": self.use_bias,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
                "output_kernel_initializer": (
                    None
                    if self.output_kernel_initializer is None
                    else keras.initializers.serialize(self.output_kernel_initializer)
                ),
            }
        )
        return config


def _write_steps(cache, steps, index):
    """`cache` `[B, L, h, d]` with positions `index .. index + Q - 1` replaced by `steps`
    `[B, Q, h, d]`, in elementwise ops. (Keras' `slice_update` is TensorFlow's
    `XlaDynamicUpdateSlice`, one of XLA's own ops, which run only where XLA compiles them:
    elementwise ops keep exported decoders to the ops every supported TF Serving release
    registers, see `lmpipe.serving.op_check`.)"""
    steps = ops.cast(steps, cache.dtype)
    positions = ops.arange(ops.shape(cache)[1]) - ops.cast(index, "int32")  # [L]
    inside = ops.logical_and(positions >= 0, positions < ops.shape(steps)[1])
    aligned = ops.take(steps, ops.clip(positions, 0, ops.shape(steps)[1] - 1), axis=1)
    return ops.where(inside[None, :, None, None], aligned, cache)


@keras.saving.register_keras_serializable(package="lmpipe")
class HeadProjection(keras.layers.EinsumDense):
    """`keras.layers.EinsumDense` (same arguments, weights and config) for the attention
    projections' equations, which contract the input's last axes with the kernel's first
    (`"abc,cde->abde"`, `"abcd,cde->abe"`), computed as one 2-D matmul of the input's rows.

    TensorFlow runs Keras' einsum for these as a batched matmul that broadcasts the kernel, and
    its kernel gradient as one product per batch row summed afterwards; a 2-D matmul's
    gradient is one product over all rows. On a 2-core AVX-512 CPU a BERT-mini layer's query,
    key and value projections, forward and backward, take about 15% less time.
    """

    def call(self, inputs, training=None):
        kernel = self.kernel
        contracted = _contracted_axes(self.equation)
        outer = kernel.shape[contracted:] if contracted else None
        if contracted is None or (self.bias is not None and tuple(self.bias.shape) != tuple(outer)):
            return super().call(inputs, training=training)
        bias = None if self.bias is None else ops.reshape(self.bias, (-1,))
        x = contract_rows(inputs, kernel, contracted, bias)
        return x if self.activation is None else self.activation(x)


def contract_rows(inputs, kernel, contracted, bias=None, kernel_last=False):
    """`inputs`' trailing `contracted` axes contracted with `kernel`'s leading ones (its
    trailing ones with `kernel_last`), as one 2-D matmul of the rows: the output has `inputs`'
    other axes, then `kernel`'s; `bias`, flat, is added to the 2-D product."""
    shape = tuple(kernel.shape)
    if kernel_last:
        outer, inner = shape[: len(shape) - contracted], math.prod(shape[len(shape) - contracted :])
    else:
        outer, inner = shape[contracted:], math.prod(shape[:contracted])
    width = math.prod(outer)
    leading = ops.shape(inputs)[: len(inputs.shape) - contracted]
    rows = ops.reshape(inputs, (-1, inner))
    # tf.matmul: Keras' matmul gives TensorFlow's batched op even for 2-D operands.
    matrix = ops.reshape(kernel, (width, inner) if kernel_last else (inner, width))
    x = tf.matmul(rows, matrix, transpose_b=kernel_last)
    if bias is not None:
        x = ops.add(x, bias)
    return ops.reshape(x, (*leading, *outer))


def _contracted_axes(equation):
    """How many trailing input axes `equation` contracts with the kernel's leading axes, where
    its output is the input's other axes followed by the kernel's others; None otherwise."""
    inputs, output = equation.split("->")
    source, kernel = inputs.split(",")
    for count in range(1, min(len(source), len(kernel))):
        if (
            source[-count:] == kernel[:count]
            and output == source[:-count] + kernel[count:]
            and len(set(source + kernel)) == len(source) + len(kernel) - count
        ):
            return count
    return None
