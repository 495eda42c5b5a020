"""The pooled sequence classification head: NSP, SOP and fine-tuned sentence classifiers."""

import keras
from keras import ops

from lmpipe.arguments import check_dropout, check_number, check_positive_int
from lmpipe.layers.dropout import Dropout
from lmpipe.layers.initializers import bert_initializer, clone_initializer


@keras.saving.register_keras_serializable(package="lmpipe")
class ClassificationHead(keras.layers.Layer):
    """Class logits from the vector of one position, usually `[CLS]`.

        pooled = tanh(h[:, cls_index] W_p + b_p)         # the pooler, if `pooler_dim` is set
        logits = Dropout(pooled) W_c + b_c               # [B, C]

    A rank-3 input `[B, S, H]` is reduced to the vector at `cls_index` (0 for BERT's `[CLS]`
    first, -1 for XLNet's `<cls>` last) and passed through the optional pooler. A rank-2 input
    `[B, H]` is taken as already pooled (e.g. an encoder's `pooled_output`), so setting
    `pooler_dim` for it is an error. No mask is needed: only the `cls_index` position is read.
    Logits are float32 even under a mixed-precision dtype policy, for the loss.

    Args:
        num_classes: number of classes `C` (2 for NSP and SOP).
        pooler_dim: width of the pooler dense layer; `None` for no pooler.
        pooler_activation: activation of the pooler, "tanh" in BERT.
        dropout: dropout rate before the output layer.
        cls_index: position of the vector to classify in a rank-3 input; may be negative.
        kernel_initializer: initializer of the kernels; BERT's truncated normal by default.
        bias_initializer: initializer of the biases.

    Call arguments:
        inputs: `[B, S, H]` sequence output, or `[B, H]` pooled output.
        training: enables dropout.

    Example:

    >>> head = ClassificationHead(num_classes=2, pooler_dim=32)
    >>> tuple(head(keras.random.normal((4, 10, 32))).shape)
    (4, 2)

    Reference: Devlin et al., "BERT", 2019, sections 3.1 (next sentence prediction) and 4.1;
    Lan et al., "ALBERT", 2020, section 3.1 (sentence order prediction).
    """

    def __init__(
        self,
        num_classes,
        pooler_dim=None,
        pooler_activation="tanh",
        dropout=0.0,
        cls_index=0,
        kernel_initializer=None,
        bias_initializer="zeros",
        **kwargs,
    ):
        super().__init__(**kwargs)
        check_positive_int("num_classes", num_classes)
        if pooler_dim is not None:
            check_positive_int("pooler_dim", pooler_dim)
        check_dropout("dropout", dropout)
        check_number("cls_index", cls_index, integer=True)
        self.num_classes = num_classes
        self.pooler_dim = pooler_dim
        self.pooler_activation = keras.activations.get(pooler_activation)
        self.dropout = dropout
        self.cls_index = cls_index
        self.kernel_initializer = keras.initializers.get(kernel_initializer or bert_initializer())
        self.bias_initializer = keras.initializers.get(bias_initializer)

    def build(self, inputs_shape):
        rank = len(inputs_shape)
        if rank not in (2, 3):
            raise ValueError(
                f"`inputs` must be [batch, sequence, hidden] or [batch, hidden], got shape "
                f"{tuple(inputs_shape)}."
            )
        if rank == 2 and self.pooler_dim is not None:
            raise ValueError(
                f"A rank-2 input is already pooled; set `pooler_dim` to None (got "
                f"pooler_dim={self.pooler_dim}) or pass the [batch, sequence, hidden] output."
            )
        if rank == 3 and inputs_shape[1] is not None:
            length = inputs_shape[1]
            if not -length <= self.cls_index < length:
                raise ValueError(
                    f"`cls_index`={self.cls_index} is outside a sequence of {length} positions."
                )

        def dense_arguments():
            # A copy of the initializers per sublayer (see TransformerEncoderBlock.build).
            return {
                "kernel_initializer": clone_initializer(self.kernel_initializer),
                "bias_initializer": clone_initializer(self.bias_initializer),
                "dtype": self.dtype_policy,
            }

        pooled_shape = (inputs_shape[0], inputs_shape[-1])
        self.pooler_dense = None
        if self.pooler_dim is not None:
            self.pooler_dense = keras.layers.Dense(
                self.pooler_dim,
                activation=self.pooler_activation,
                name="pooler_dense",
                **dense_arguments(),
            )
            self.pooler_dense.build(pooled_shape)
            pooled_shape = (inputs_shape[0], self.pooler_dim)
        self.dropout_layer = Dropout(self.dropout, dtype=self.dtype_policy)
        self.output_dense = keras.layers.Dense(
            self.num_classes, name="output_dense", **dense_arguments()
        )
        self.output_dense.build(pooled_shape)
        self.built = True

    def call(self, inputs, training=None):
        x = inputs
        if len(x.shape) == 3:
            x = x[:, self.cls_index, :]  # [B, H]
            if self.pooler_dense is not None:
                x = self.pooler_dense(x)  # [B, pooler_dim]
        logits = self.output_dense(self.dropout_layer(x, training=training))
        return ops.cast(logits, "float32")  # [B, C]

    def compute_output_shape(self, inputs_shape):
        return (inputs_shape[0], self.num_classes)

    def compute_output_spec(self, inputs, training=None):
        return keras.KerasTensor(self.compute_output_shape(inputs.shape), dtype="float32")

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_classes": self.num_classes,
                "pooler_dim": self.pooler_dim,
                "pooler_activation": keras.activations.serialize(self.pooler_activation),
                "dropout": self.dropout,
                "cls_index": self.cls_index,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
            }
        )
        return config
