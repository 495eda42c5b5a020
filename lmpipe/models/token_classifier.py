"""The token classification model: a pretrained encoder + a tag head on every piece, and its
loss over the labelled pieces."""

import keras
from keras import ops

from lmpipe.contract import ENCODER_FEATURES, LABELS
from lmpipe.layers.token_classification_head import TokenClassificationHead
from lmpipe.models.losses import masked_cross_entropy
from lmpipe.models.sequence_classifier import _input_names
from lmpipe.models.trainable import FunctionalTrainableModel


@keras.saving.register_keras_serializable(package="lmpipe")
class TokenClassifier(FunctionalTrainableModel):
    """An encoder (BERT, ALBERT, ...) with a tag head on each position of its sequence output.

        h = encoder(token_ids, segment_ids, padding_mask)["sequence_output"]   # [B, S, H]
        logits = Dropout(h) W + b                                              # [B, S, C]

    Inputs: a dict of int32 `[B, S]` tensors `token_ids`, `segment_ids`, `padding_mask`
    (1 = real token). Output: `{"logits": float32 [B, S, C]}`.

    The model computes its own loss and metrics, so it trains after a `compile` with only an
    optimizer. Labels: `{"labels": int32 [B, S]}`, a tag index on the positions that are
    labelled (a word's first piece) and a negative value on the others (`IGNORED`, -1: the
    other pieces, `[CLS]`, `[SEP]`, padding). Loss: the sparse categorical cross-entropy
    averaged over the labelled positions of the global batch; metric `accuracy`: the share of
    labelled positions whose most likely tag is right.

    Args:
        encoder: a `keras.Model` taking the three inputs above and returning a dict with
            `sequence_output` `[B, S, H]`, e.g. `lmpipe.models.bert(config)`.
        num_classes: number of tags `C`.
        dropout: dropout rate on the sequence output.
        kernel_initializer: initializer of the head's kernel (BERT's truncated normal).

    Example:

    >>> from lmpipe.models import BertConfig, bert
    >>> model = TokenClassifier(bert(BertConfig.tiny(vocabulary_size=100)), num_classes=5)
    >>> ids = keras.ops.ones((2, 8), "int32")
    >>> inputs = {"token_ids": ids, "segment_ids": ids * 0, "padding_mask": ids}
    >>> tuple(model(inputs)["logits"].shape)
    (2, 8, 5)

    Reference: Devlin et al., "BERT", 2019, section 5.3 (CoNLL-2003 named entity recognition).
    """

    def __init__(self, encoder, num_classes, dropout=0.1, kernel_initializer=None, **kwargs):
        if isinstance(encoder, dict):
            encoder = keras.saving.deserialize_keras_object(encoder)
        if not isinstance(encoder, keras.Model):
            raise ValueError(f"`encoder` must be a keras.Model, got {type(encoder).__name__}.")
        missing = [name for name in ENCODER_FEATURES if name not in _input_names(encoder)]
        if missing:
            raise ValueError(
                f"`encoder` must take the inputs {list(ENCODER_FEATURES)}; it lacks {missing}."
            )
        inputs = {
            name: keras.Input(shape=(None,), dtype="int32", name=name) for name in ENCODER_FEATURES
        }
        encoded = encoder(inputs)
        if not isinstance(encoded, dict) or "sequence_output" not in encoded:
            raise ValueError(
                "`encoder` must return a dict with `sequence_output` [batch, length, hidden]."
            )
        head = TokenClassificationHead(
            num_classes,
            dropout=dropout,
            kernel_initializer=kernel_initializer,
            name="token_classification_head",
        )
        outputs = {"logits": head(encoded["sequence_output"])}  # [B, S, C] float32
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)
        self.encoder = encoder
        self.head = head
        self.num_classes = num_classes
        self.dropout = dropout
        self.accuracy_metric = keras.metrics.Mean(name="accuracy")

    def loss_weights(self, x, y):
        """`{term: weights}`: the labelled tokens (label -1 marks the others)."""
        del x
        labels = ops.cast(y[LABELS] if isinstance(y, dict) else y, "int32")  # [B, S]
        return {LABELS: ops.cast(labels >= 0, "float32")}

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        del sample_weight, training
        labels = ops.cast(y[LABELS] if isinstance(y, dict) else y, "int32")  # [B, S]
        targets = ops.maximum(labels, 0)  # any valid index where the weight is 0
        return masked_cross_entropy(
            targets,
            y_pred["logits"],
            self.loss_weights(x, y)[LABELS],
            accuracy_tracker=self.accuracy_metric,
            term=LABELS,
        )

    def get_config(self):
        return {
            "encoder": keras.saving.serialize_keras_object(self.encoder),
            "num_classes": self.num_classes,
            "dropout": self.dropout,
            "kernel_initializer": keras.initializers.serialize(self.head.kernel_initializer),
            "name": self.name,
        }

    @classmethod
    def from_config(cls, config):
        return cls(**config)
