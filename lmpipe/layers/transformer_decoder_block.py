"""The Transformer decoder block of Vaswani et al., with key/value caches for decoding."""

import numbers

import keras
from keras import ops

from lmpipe.arguments import check_dropout, check_number, check_positive_int, check_window
from lmpipe.layers.activations import get_activation
from lmpipe.layers.dropout import Dropout
from lmpipe.layers.initializers import bert_initializer, clone_initializer
from lmpipe.layers.layer_normalization import LayerNormalization
from lmpipe.layers.multi_head_attention import MultiHeadAttention


@keras.saving.register_keras_serializable(package="lmpipe")
class TransformerDecoderBlock(keras.layers.Layer):
    """Masked self-attention, encoder-decoder attention and a feed-forward network.

    Each sublayer has a residual connection and a LayerNorm. Post-LN (the paper's order,
    the default):
        x = LayerNorm(x + Dropout(MultiHead(x, x, x)))              # causal self-attention
        x = LayerNorm(x + Dropout(MultiHead(x, enc, enc)))          # encoder-decoder attention
        x = LayerNorm(x + Dropout(W_2 act(W_1 x + b_1) + b_2))      # position-wise FFN
    Pre-LN (`normalize_first=True`, as in GPT-2): `x = x + Dropout(Sublayer(LN(x)))`.
    The encoder-decoder attention exists only if the block is built with an encoder sequence
    shape (called with `encoder_sequence`); without one it is a decoder-only (GPT) block.

    Masks (1 = may attend): the self-attention is always causal, and `window` further
    restricts each position to the `window` previous positions and itself, as
    `decoder_attention_mask` does to the positions it allows. `decoder_padding_mask`
    hides padded decoder keys; `encoder_padding_mask` hides padded encoder positions from the
    encoder-decoder attention, so outputs never depend on the content of padded encoder
    positions. Outputs at padded decoder positions are computed but carry no meaning.

    Incremental decoding: pass `self_attention_cache` `[B, 2, max_length, heads, head_dim]`
    (start from `initial_cache`) and `self_attention_cache_update_index`; the keys and values
    of the new decoder step(s) are written into the cache at that index and the step(s) attend
    to every cached position up to their own. The encoder output is then projected once, by
    `compute_cross_attention_cache`, and passed back as `cross_attention_cache` at every step.
    Return convention: without `self_attention_cache` the call returns the output
    `[B, T, H]`; with it, the tuple `(output, self_attention_cache, cross_attention_cache)`
    of the output, the updated self-attention cache and the cross-attention cache (computed
    from `encoder_sequence` if it was not given; None for a decoder-only block).

    Args:
        num_heads: number of attention heads; the hidden size must be divisible by it.
        intermediate_dim: width of the feed-forward layer (d_ff).
        dropout: dropout rate on the residual branches.
        attention_dropout: dropout rate on the attention probabilities; defaults to `dropout`.
        activation: activation of the feed-forward layer, e.g. "relu" (paper) or "gelu" (GPT).
        normalize_first: pre-LN instead of post-LN.
        layer_norm_epsilon: epsilon of the LayerNorms.
        window: if set, local self-attention with this radius.
        kernel_initializer: initializer of all kernels; defaults to a truncated normal with
            standard deviation 0.02.
        bias_initializer: initializer of all biases.
        residual_kernel_initializer: initializer of the kernels of the projections that
            write into the residual stream (the attention output projections and the FFN's
            `W_2`); defaults to `kernel_initializer`. GPT-2 gives them the standard
            deviation 0.02 / sqrt(2 * num_layers), so that the residual stream's variance
            does not grow with depth.

    Call arguments:
        decoder_sequence: `[B, T, H]`.
        encoder_sequence: `[B, S, H]`, the encoder output; required for an encoder-decoder
            block unless `cross_attention_cache` is given.
        decoder_padding_mask: 1 for real decoder tokens; `[B, T]`, or `[B, max_length]` over
            the cache positions when `self_attention_cache` is given.
        encoder_padding_mask: `[B, S]`, 1 for real encoder tokens.
        decoder_attention_mask: `[B, T, T]`, 1 where decoder position `i` may attend to `j`,
            on top of the causal rule (GPT's attention within a document).
        self_attention_cache: `[B, 2, max_length, heads, head_dim]`, see above.
        self_attention_cache_update_index: where the new steps go in the cache (int or scalar
            int tensor); required with `self_attention_cache`.
        cross_attention_cache: `[B, 2, S, heads, head_dim]` from `compute_cross_attention_cache`,
            used instead of projecting `encoder_sequence`.
        training: enables dropout.

    Example:

    >>> block = TransformerDecoderBlock(num_heads=4, intermediate_dim=64)
    >>> decoder_sequence = keras.random.normal((2, 6, 32))
    >>> encoder_sequence = keras.random.normal((2, 9, 32))
    >>> tuple(block(decoder_sequence, encoder_sequence).shape)
    (2, 6, 32)
    >>> cache = block.initial_cache(batch_size=2, max_length=6)
    >>> cross_cache = block.compute_cross_attention_cache(encoder_sequence)
    >>> output, cache, cross_cache = block(
    ...     decoder_sequence[:, :1],
    ...     self_attention_cache=cache,
    ...     self_attention_cache_update_index=0,
    ...     cross_attention_cache=cross_cache,
    ... )
    >>> tuple(output.shape), tuple(cache.shape)
    ((2, 1, 32), (2, 2, 6, 4, 8))

    Reference: Vaswani et al., "Attention Is All You Need", 2017, section 3.1;
    Xiong et al., "On Layer Normalization in the Transformer Architecture", 2020 (pre-LN).
    """

    def __init__(
        self,
        num_heads,
        intermediate_dim,
        dropout=0.1,
        attention_dropout=None,
        activation="relu",
        normalize_first=False,
        layer_norm_epsilon=1e-5,
        window=None,
        kernel_initializer=None,
        bias_initializer="zeros",
        residual_kernel_initializer=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        check_positive_int("num_heads", num_heads)
        check_positive_int("intermediate_dim", intermediate_dim)
        check_dropout("dropout", dropout)
        attention_dropout = dropout if attention_dropout is None else attention_dropout
        check_dropout("attention_dropout", attention_dropout)
        check_window(window)
        check_number("layer_norm_epsilon", layer_norm_epsilon, above=0)
        self.num_heads = num_heads
        self.intermediate_dim = intermediate_dim
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.activation = get_activation(activation)
        self.normalize_first = normalize_first
        self.layer_norm_epsilon = layer_norm_epsilon
        self.window = window
        self.kernel_initializer = keras.initializers.get(kernel_initializer or bert_initializer())
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.residual_kernel_initializer = (
            None
            if residual_kernel_initializer is None
            else keras.initializers.get(residual_kernel_initializer)
        )

    def build(self, decoder_sequence_shape, encoder_sequence_shape=None):
        hidden_dim = decoder_sequence_shape[-1]
        if hidden_dim % self.num_heads:
            raise ValueError(
                f"The hidden size ({hidden_dim}) must be divisible by `num_heads` "
                f"({self.num_heads})."
            )
        self.head_dim = hidden_dim // self.num_heads

        def dense_arguments(kernel_initializer=None):
            # A copy of the initializers per sublayer: one initializer object draws the same
            # values at every call, which would start W_2 as a reshaped copy of W_1.
            if kernel_initializer is None:
                kernel_initializer = self.kernel_initializer
            return {
                "kernel_initializer": clone_initializer(kernel_initializer),
                "bias_initializer": clone_initializer(self.bias_initializer),
                "dtype": self.dtype_policy,
            }

        def layer_norm(name):
            norm = LayerNormalization(
                epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name=name
            )
            norm.build(decoder_sequence_shape)
            return norm

        self.self_attention = MultiHeadAttention(
            self.num_heads,
            dropout=self.attention_dropout,
            window=self.window,
            output_kernel_initializer=self.residual_kernel_initializer,
            name="self_attention",
            **dense_arguments(),
        )
        self.self_attention.build(decoder_sequence_shape)
        self.self_attention_layer_norm = layer_norm("self_attention_layer_norm")
        # Decoder-only blocks (GPT) have no encoder to attend to, hence no weights for it.
        self.cross_attention = None
        self.cross_attention_layer_norm = None
        if encoder_sequence_shape is not None:
            self.cross_attention = MultiHeadAttention(
                self.num_heads,
                dropout=self.attention_dropout,
                output_kernel_initializer=self.residual_kernel_initializer,
                name="cross_attention",
                **dense_arguments(),
            )
            self.cross_attention.build(decoder_sequence_shape, encoder_sequence_shape)
            self.cross_attention_layer_norm = layer_norm("cross_attention_layer_norm")
        self.intermediate_dense = keras.layers.Dense(
            self.intermediate_dim,
            activation=self.activation,
            name="intermediate_dense",
            **dense_arguments(),
        )
        self.intermediate_dense.build(decoder_sequence_shape)
        self.output_dense = keras.layers.Dense(
            hidden_dim,
            name="output_dense",
            **dense_arguments(self.residual_kernel_initializer),
        )
        self.output_dense.build(tuple(decoder_sequence_shape[:-1]) + (self.intermediate_dim,))
        self.output_layer_norm = layer_norm("output_layer_norm")
        self.dropout_layer = Dropout(self.dropout, dtype=self.dtype_policy)
        self.built = True

    def initial_cache(self, batch_size, max_length):
        """An empty self-attention cache, zeros `[batch_size, 2, max_length, heads, head_dim]`."""
        self._check_built("initial_cache")
        shape = (batch_size, 2, max_length, self.num_heads, self.head_dim)
        return ops.zeros(shape, dtype=self.compute_dtype)

    def compute_cross_attention_cache(self, encoder_sequence):
        """Keys and values of the encoder output, `[B, 2, S, heads, head_dim]`.

        Computed once per source sequence and passed as `cross_attention_cache` at every
        decoding step, so that the encoder output is not projected again at each step.
        """
        self._check_built("compute_cross_attention_cache")
        if self.cross_attention is None:
            raise ValueError(
                "This block has no encoder-decoder attention: it was built without "
                "`encoder_sequence`, so there is no cross-attention cache to compute."
            )
        return self.cross_attention.compute_cache(encoder_sequence)

    def _check_built(self, method):
        if not self.built:
            raise ValueError(
                f"Call the block (or `build()` it) before `{method}()`: the cache shape "
                "depends on the hidden size."
            )

    def _check_cache(self, cache, update_index, decoder_sequence):
        # A write past the end of the cache would be clamped into its last slots, silently
        # overwriting earlier steps: refuse it wherever the index is known when tracing.
        expected = (2, None, self.num_heads, self.head_dim)
        if len(cache.shape) != 5 or any(
            e is not None and s is not None and s != e
            for s, e in zip(cache.shape[1:], expected, strict=True)
        ):
            raise ValueError(
                "`self_attention_cache` must have shape [batch, 2, max_length, "
                f"{self.num_heads}, {self.head_dim}], got {tuple(cache.shape)}."
            )
        max_length, steps = cache.shape[2], decoder_sequence.shape[1]
        known = isinstance(update_index, numbers.Integral) and None not in (max_length, steps)
        if known and not 0 <= update_index <= max_length - steps:
            raise ValueError(
                f"`self_attention_cache_update_index` ({update_index}) plus the number of "
                f"new steps ({steps}) must fit in the cache's max_length ({max_length})."
            )

    def call(
        self,
        decoder_sequence,
        encoder_sequence=None,
        decoder_padding_mask=None,
        encoder_padding_mask=None,
        decoder_attention_mask=None,
        self_attention_cache=None,
        self_attention_cache_update_index=None,
        cross_attention_cache=None,
        training=None,
    ):
        has_encoder = encoder_sequence is not None or cross_attention_cache is not None
        if self.cross_attention is None and has_encoder:
            raise ValueError(
                "`encoder_sequence` or `cross_attention_cache` was given, but this block was "
                "built without `encoder_sequence` and has no encoder-decoder attention."
            )
        if self.cross_attention is not None and not has_encoder:
            raise ValueError(
                "This block has encoder-decoder attention: pass `encoder_sequence` or "
                "`cross_attention_cache`."
            )
        if (self_attention_cache is None) != (self_attention_cache_update_index is None):
            raise ValueError(
                "`self_attention_cache` and `self_attention_cache_update_index` must be "
                "given together."
            )
        decoding = self_attention_cache is not None
        if decoding:
            self._check_cache(
                self_attention_cache, self_attention_cache_update_index, decoder_sequence
            )
        if decoding and self.cross_attention is not None and cross_attention_cache is None:
            cross_attention_cache = self.compute_cross_attention_cache(encoder_sequence)

        x = decoder_sequence  # [B, T, H]
        residual = x
        if self.normalize_first:
            x = self.self_attention_layer_norm(x)
        attended = self.self_attention(
            x,
            padding_mask=decoder_padding_mask,
            attention_mask=decoder_attention_mask,
            use_causal_mask=True,
            cache=self_attention_cache,
            cache_update_index=self_attention_cache_update_index,
            training=training,
        )
        if decoding:
            attended, self_attention_cache = attended
        x = residual + self.dropout_layer(attended, training=training)
        if not self.normalize_first:
            x = self.self_attention_layer_norm(x)

        if self.cross_attention is not None:
            residual = x
            if self.normalize_first:
                x = self.cross_attention_layer_norm(x)
            # Queries from the decoder; keys and values from the encoder (or its cache).
            attended = self.cross_attention(
                x,
                value=encoder_sequence,
                padding_mask=encoder_padding_mask,
                cache=cross_attention_cache,
                training=training,
            )
            if cross_attention_cache is not None:
                attended, _ = attended
            x = residual + self.dropout_layer(attended, training=training)
            if not self.normalize_first:
                x = self.cross_attention_layer_norm(x)

        residual = x
        if self.normalize_first:
            x = self.output_layer_norm(x)
        x = self.output_dense(self.intermediate_dense(x))  # W_2 act(W_1 x + b_1) + b_2
        x = residual + self.dropout_layer(x, training=training)
        if not self.normalize_first:
            x = self.output_layer_norm(x)
        if decoding:
            return x, self_attention_cache, cross_attention_cache
        return x

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "intermediate_dim": self.intermediate_dim,
                "dropout": self.dropout,
                "attention_dropout": self.attention_dropout,
                "activation": keras.activations.serialize(self.activation),
                "normalize_first": self.normalize_first,
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "window": self.window,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
                "residual_kernel_initializer": (
                    None
                    if self.residual_kernel_initializer is None
                    else keras.initializers.serialize(self.residual_kernel_initializer)
                ),
            }
        )
        return config
