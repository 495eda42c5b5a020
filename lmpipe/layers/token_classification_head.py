"""The per-token classification head, for tagging tasks such as named entity recognition."""

import keras
from keras import ops

from lmpipe.arguments import check_dropout, check_positive_int
from lmpipe.layers.dropout import Dropout
from lmpipe.layers.initializers import bert_initializer, clone_initializer


@keras.saving.register_keras_serializable(package="lmpipe")
class TokenClassificationHead(keras.layers.Layer):
    """Class logits for every token: dropout, then one dense layer `H -> C`.

        logits = Dropout(h) W + b                                 # [B, S, C]

    Masks: every position gets logits; those of padded positions carry no meaning and must be
    weighted out of the loss and the metrics (weight 0 where `padding_mask` is 0). The logits
    are float32 even under a mixed-precision dtype policy, for the loss.

    Args:
        num_classes: number of tags `C`.
        dropout: dropout rate before the output layer.
        kernel_initializer: initializer of the kernel; BERT's truncated normal by default.
        bias_initializer: initializer of the bias.

    Call arguments:
        sequence_output: `[B, S, H]` encoder output.
        training: enables dropout.

    Example:

    >>> head = TokenClassificationHead(num_classes=9, dropout=0.1)
    >>> tuple(head(keras.random.normal((2, 10, 32))).shape)
    (2, 10, 9)

    Reference: Devlin et al., "BERT", 2019, section 5.3 (CoNLL-2003 named entity recognition).
    """

    def __init__(
        self,
        num_classes,
        dropout=0.0,
        kernel_initializer=None,
        bias_initializer="zeros",
        **kwargs,
    ):
        super().__init__(**kwargs)
        check_positive_int("num_classes", num_classes)
        check_dropout("dropout", dropout)
        self.num_classes = num_classes
        self.dropout = dropout
        self.kernel_initializer = keras.initializers.get(kernel_initializer or bert_initializer())
        self.bias_initializer = keras.initializers.get(bias_initializer)

    def build(self, sequence_output_shape):
        self.dropout_layer = Dropout(self.dropout, dtype=self.dtype_policy)
        self.output_dense = keras.layers.Dense(
            self.num_classes,
            kernel_initializer=clone_initializer(self.kernel_initializer),
            bias_initializer=clone_initializer(self.bias_initializer),
            dtype=self.dtype_policy,
            name="output_dense",
        )
        self.output_dense.build(sequence_output_shape)
        self.built = True

    def call(self, sequence_output, training=None):
        x = self.dropout_layer(sequence_output, training=training)
        return ops.cast(self.output_dense(x), "float32")  # [B, S, C]

    def compute_output_shape(self, sequence_output_shape):
        return tuple(sequence_output_shape[:-1]) + (self.num_classes,)

    def compute_output_spec(self, sequence_output, training=None):
        return keras.KerasTensor(self.compute_output_shape(sequence_output.shape), dtype="float32")

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_classes": self.num_classes,
                "dropout": self.dropout,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
            }
        )
        return config
