"""The masked language model head of BERT and ALBERT, with output weights tied to the input."""

import keras
import tensorflow as tf
from keras import ops

from lmpipe.arguments import check_positive_int
from lmpipe.layers.activations import get_activation
from lmpipe.layers.initializers import bert_initializer, clone_initializer
from lmpipe.layers.layer_normalization import LayerNormalization


@keras.saving.register_keras_serializable(package="lmpipe")
class MaskedLMHead(keras.layers.Layer):
    """Vocabulary logits for the hidden states at the masked positions.

        x = LayerNorm(act(gather(sequence_output, mask_positions) W_t + b_t))   # [B, P, E]
        logits = x E_tok^T + b_out                                              # [B, P, V]

    With `token_embedding` the output weights are tied to the input embedding: `E_tok` is
    `token_embedding.embeddings` itself (the same variable, not a copy), so the masked-LM loss
    trains the input table and the head holds no `V x E` weights of its own. The transform maps
    the hidden size `H` to the table's width `E`, which is smaller than `H` in ALBERT's factorized
    embedding. Without `token_embedding` the head owns an `E x V` output kernel, with `E = H`.

    Masks: `mask_positions` selects the predicted positions; padded predictions (weight 0 in the
    loss) may point anywhere in the sequence, e.g. at position 0. Every position must be in
    `[0, S)`. Logits are float32 even under a mixed-precision dtype policy, for the loss.

    Serialization: `get_config` stores the embedding's own config (as keras-hub's head does), so a
    standalone `MaskedLMHead.from_config` builds its own copy of the embedding, no longer tied to
    the encoder's. The models built by lmpipe re-tie the head to the encoder's embedding when they
    are rebuilt from their config.

    Args:
        vocabulary_size: number of token ids `V`; must equal `token_embedding.input_dim`.
        token_embedding: a `keras.layers.Embedding` whose table is the output projection, e.g.
            `BertEmbedding(...).token_embedding`; `None` for an untied head.
        activation: activation of the transform, "gelu" in BERT.
        layer_norm_epsilon: epsilon of the transform's LayerNorm.
        kernel_initializer: initializer of the transform (and the untied output kernel);
            BERT's truncated normal by default.
        bias_initializer: initializer of the biases.

    Call arguments:
        sequence_output: `[B, S, H]` encoder output.
        mask_positions: `[B, P]` int positions to predict.

    Example:

    >>> embedding = keras.layers.Embedding(100, 16)
    >>> head = MaskedLMHead(vocabulary_size=100, token_embedding=embedding)
    >>> sequence_output = keras.random.normal((2, 10, 32))
    >>> tuple(head(sequence_output, mask_positions=ops.array([[1, 4], [0, 9]])).shape)
    (2, 2, 100)

    Reference: Devlin et al., "BERT", 2019, appendix A.1 and the open-source masked LM head
    (`get_masked_lm_output`); Lan et al., "ALBERT", 2020, section 3.1 (the `E`-wide head).
    """

    def __init__(
        self,
        vocabulary_size,
        token_embedding=None,
        activation="gelu",
        layer_norm_epsilon=1e-12,
        kernel_initializer=None,
        bias_initializer="zeros",
        **kwargs,
    ):
        super().__init__(**kwargs)
        check_positive_int("vocabulary_size", vocabulary_size)
        if token_embedding is not None:
            if not isinstance(token_embedding, keras.layers.Embedding):
                raise ValueError(
                    "`token_embedding` must be a `keras.layers.Embedding` or None, got "
                    f"token_embedding={token_embedding!r}."
                )
            if token_embedding.input_dim != vocabulary_size:
                raise ValueError(
                    f"`vocabulary_size` ({vocabulary_size}) must equal the number of rows of "
                    f"`token_embedding` ({token_embedding.input_dim})."
                )
        self.vocabulary_size = vocabulary_size
        self.token_embedding = token_embedding
        self.activation = get_activation(activation)
        self.layer_norm_epsilon = layer_norm_epsilon
        self.kernel_initializer = keras.initializers.get(kernel_initializer or bert_initializer())
        self.bias_initializer = keras.initializers.get(bias_initializer)

    def build(self, sequence_output_shape, mask_positions_shape=None):
        hidden_dim = sequence_output_shape[-1]
        if self.token_embedding is None:
            embedding_dim = hidden_dim
        else:
            embedding_dim = self.token_embedding.output_dim
            if not self.token_embedding.built:
                self.token_embedding.build()
        gathered_shape = (sequence_output_shape[0], None, hidden_dim)
        self.transform_dense = keras.layers.Dense(
            embedding_dim,
            activation=self.activation,
            kernel_initializer=clone_initializer(self.kernel_initializer),
            bias_initializer=clone_initializer(self.bias_initializer),
            dtype=self.dtype_policy,
            name="transform_dense",
        )
        self.transform_dense.build(gathered_shape)
        self.transform_layer_norm = LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name="transform_layer_norm"
        )
        self.transform_layer_norm.build(gathered_shape[:-1] + (embedding_dim,))
        # Tied: the output projection is `token_embedding.embeddings`, read in `call`.
        self.output_kernel = None
        if self.token_embedding is None:
            self.output_kernel = self.add_weight(
                name="output_kernel",
                shape=(embedding_dim, self.vocabulary_size),
                initializer=clone_initializer(self.kernel_initializer),
                trainable=True,
            )
        self.output_bias = self.add_weight(
            name="output_bias",
            shape=(self.vocabulary_size,),
            initializer=clone_initializer(self.bias_initializer),
            trainable=True,
        )
        self.built = True

    def call(self, sequence_output, mask_positions):
        mask_positions = ops.cast(mask_positions, "int32")
        x = ops.take_along_axis(
            sequence_output, ops.expand_dims(mask_positions, -1), axis=1
        )  # [B, P, H]
        x = self.transform_layer_norm(self.transform_dense(x))  # [B, P, E]
        rows = tf.reshape(x, [-1, x.shape[-1]])  # [B P, E]
        if self.token_embedding is None:
            kernel = ops.cast(self.output_kernel, self.compute_dtype)  # [E, V]
            logits = tf.linalg.matmul(rows, kernel)
        else:
            # x E_tok^T as one 2-D matmul: the table's gradient comes out as [V, E], with no
            # transpose of a V x E matrix either way (a tenth less time in the head on a CPU).
            table = ops.cast(self.token_embedding.embeddings, self.compute_dtype)  # [V, E]
            logits = tf.linalg.matmul(rows, table, transpose_b=True)
        logits = logits + ops.cast(self.output_bias, self.compute_dtype)
        logits = tf.reshape(logits, tf.concat([tf.shape(x)[:-1], [self.vocabulary_size]], 0))
        return ops.cast(logits, "float32")  # [B, P, V]

    def compute_output_shape(self, sequence_output_shape, mask_positions_shape):
        return tuple(mask_positions_shape) + (self.vocabulary_size,)

    def compute_output_spec(self, sequence_output, mask_positions):
        shape = self.compute_output_shape(sequence_output.shape, mask_positions.shape)
        return keras.KerasTensor(shape, dtype="float32")

    def get_config(self):
        config = super().get_config()
        token_embedding = None
        if self.token_embedding is not None:
            token_embedding = keras.layers.serialize(self.token_embedding)
        config.update(
            {
                "vocabulary_size": self.vocabulary_size,
                "token_embedding": token_embedding,
                "activation": keras.activations.serialize(self.activation),
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
            }
        )
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if config.get("token_embedding") is not None:
            config["token_embedding"] = keras.layers.deserialize(config["token_embedding"])
        return super().from_config(config)
