"""The Transformer encoder block of Vaswani et al. and BERT."""

import keras

from lmpipe.arguments import check_dropout, check_positive_int, check_window
from lmpipe.layers.activations import get_activation
from lmpipe.layers.dropout import Dropout
from lmpipe.layers.initializers import bert_initializer, clone_initializer
from lmpipe.layers.layer_normalization import LayerNormalization
from lmpipe.layers.multi_head_attention import MultiHeadAttention


@keras.saving.register_keras_serializable(package="lmpipe")
class TransformerEncoderBlock(keras.layers.Layer):
    """Self-attention and a position-wise feed-forward network, each with residual and LayerNorm.

    Post-LN (the paper's and BERT's order, the default):
        x = LayerNorm(x + Dropout(MultiHead(x, x, x)))
        x = LayerNorm(x + Dropout(W_2 act(W_1 x + b_1) + b_2))
    Pre-LN (`normalize_first=True`, as in GPT-2 and later models):
        x = x + Dropout(MultiHead(LN(x))); x = x + Dropout(FFN(LN(x)))

    Masks (1 = may attend): `padding_mask` `[B, S]` hides padded keys; `attention_mask`
    `[B, S, S]` is applied as given; `use_causal_mask` makes the block causal and `window`
    restricts attention to a local neighbourhood. Outputs at padded positions are computed but
    carry no meaning; real positions never depend on the content of padded ones.

    Args:
        num_heads: number of attention heads; the hidden size must be divisible by it.
        intermediate_dim: width of the feed-forward layer (d_ff).
        dropout: dropout rate on the residual branches.
        attention_dropout: dropout rate on the attention probabilities; defaults to `dropout`.
        activation: activation of the feed-forward layer, e.g. "relu" (paper) or "gelu" (BERT).
        normalize_first: pre-LN instead of post-LN.
        layer_norm_epsilon: epsilon of the LayerNorms.
        window: if set, local self-attention with this radius.
        kernel_initializer: initializer of all kernels.
        bias_initializer: initializer of all biases.

    Call arguments:
        inputs: `[B, S, H]`.
        padding_mask: `[B, S]`, 1 for real tokens.
        attention_mask: `[B, S, S]`.
        use_causal_mask: causal self-attention.
        return_attention_scores: also return `[B, heads, S, S]` probabilities.
        training: enables dropout.

    Example:

    >>> block = TransformerEncoderBlock(num_heads=4, intermediate_dim=64)
    >>> x = keras.random.normal((2, 10, 32))
    >>> tuple(block(x, padding_mask=keras.ops.ones((2, 10))).shape)
    (2, 10, 32)

    Reference: Vaswani et al., "Attention Is All You Need", 2017, section 3.1;
    Xiong et al., "On Layer Normalization in the Transformer Architecture", 2020 (pre-LN).
    """

    def __init__(
        self,
        num_heads,
        intermediate_dim,
        dropout=0.1,
        attention_dropout=None,
        activation="gelu",
        normalize_first=False,
        layer_norm_epsilon=1e-12,
        window=None,
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
        check_window(window)
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

    def build(self, inputs_shape):
        hidden_dim = inputs_shape[-1]
        if hidden_dim % self.num_heads:
            raise ValueError(
                f"The hidden size ({hidden_dim}) must be divisible by `num_heads` "
                f"({self.num_heads})."
            )

        def dense_arguments():
            # A copy of the initializers per sublayer: one initializer object draws the same
            # values at every call, which would start W_2 as a reshaped copy of W_1.
            return {
                "kernel_initializer": clone_initializer(self.kernel_initializer),
                "bias_initializer": clone_initializer(self.bias_initializer),
                "dtype": self.dtype_policy,
            }

        self.self_attention = MultiHeadAttention(
            self.num_heads,
            dropout=self.attention_dropout,
            window=self.window,
            name="self_attention",
            **dense_arguments(),
        )
        self.self_attention.build(inputs_shape)
        self.attention_layer_norm = LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name="attention_layer_norm"
        )
        self.attention_layer_norm.build(inputs_shape)
        self.intermediate_dense = keras.layers.Dense(
            self.intermediate_dim,
            activation=self.activation,
            name="intermediate_dense",
            **dense_arguments(),
        )
        self.intermediate_dense.build(inputs_shape)
        self.output_dense = keras.layers.Dense(hidden_dim, name="output_dense", **dense_arguments())
        self.output_dense.build(tuple(inputs_shape[:-1]) + (self.intermediate_dim,))
        self.output_layer_norm = LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name="output_layer_norm"
        )
        self.output_layer_norm.build(inputs_shape)
        self.dropout_layer = Dropout(self.dropout, dtype=self.dtype_policy)
        self.built = True

    def call(
        self,
        inputs,
        padding_mask=None,
        attention_mask=None,
        use_causal_mask=False,
        return_attention_scores=False,
        training=None,
    ):
        x = inputs
        residual = x
        if self.normalize_first:
            x = self.attention_layer_norm(x)
        attended = self.self_attention(
            x,
            padding_mask=padding_mask,
            attention_mask=attention_mask,
            use_causal_mask=use_causal_mask,
            return_attention_scores=return_attention_scores,
            training=training,
        )
        if return_attention_scores:
            attended, scores = attended
        x = residual + self.dropout_layer(attended, training=training)
        if not self.normalize_first:
            x = self.attention_layer_norm(x)

        residual = x
        if self.normalize_first:
            x = self.output_layer_norm(x)
        x = self.output_dense(self.intermediate_dense(x))  # W_2 act(W_1 x + b_1) + b_2
        x = residual + self.dropout_layer(x, training=training)
        if not self.normalize_first:
            x = self.output_layer_norm(x)
        if return_attention_scores:
            return x, scores
        return x

    def compute_output_shape(self, inputs_shape):
        return inputs_shape

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
            }
        )
        return config
