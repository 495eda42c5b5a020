"""The fine-tuning model: a pretrained encoder + a classification head on `[CLS]` or on the mean
of its tokens, and its loss."""

import keras
from keras import ops

from lmpipe.arguments import check_choice
from lmpipe.contract import ENCODER_FEATURES, LABELS, PADDING_MASK
from lmpipe.layers.classification_head import ClassificationHead
from lmpipe.layers.mean_pooling import MaskedMeanPooling
from lmpipe.models.losses import masked_cross_entropy
from lmpipe.models.metrics import MacroF1
from lmpipe.models.trainable import FunctionalTrainableModel

POOLINGS = ("pooled", "mean")  # the vector the head reads: the encoder's pooled_output, or
# the mean of its sequence_output over the real tokens


@keras.saving.register_keras_serializable(package="lmpipe")
class SequenceClassifier(FunctionalTrainableModel):
    """An encoder (BERT, ALBERT, ...) with a classification head on its pooled `[CLS]` vector,
    or on the mean of its tokens' vectors.

        pooled = encoder(token_ids, segment_ids, padding_mask)["pooled_output"]   # [B, H]
        logits = Dropout(pooled) W + b                                           # [B, C]

    With `pooling="mean"`, `pooled` is instead the mean of `sequence_output` over the real
    tokens (`MaskedMeanPooling`), and the encoder's pooler, which nothing reads then, is frozen.

    Inputs: a dict of int32 `[B, S]` tensors `token_ids`, `segment_ids`, `padding_mask`
    (1 = real token). Output: `{"logits": float32 [B, C]}`. The model is built functionally
    inside this class, so `from_config` rebuilds it (encoder included) and `.keras` files
    load with `keras.models.load_model`.

    The model computes its own loss and metrics, so it trains after a `compile` with only an
    optimizer: the labels are `{"labels": int32 [B]}`, the loss the mean sparse categorical
    cross-entropy over the global batch (also under a distribution strategy), the metrics
    `accuracy` and `macro_f1` (`MacroF1`). `FunctionalTrainableModel` adapts the metrics to
    multi-worker training.

    Args:
        encoder: a `keras.Model` taking the three inputs above and returning a dict with
            `pooled_output` `[B, H]`, e.g. `lmpipe.models.bert(config)`.
        num_classes: number of classes `C`.
        dropout: dropout rate on the pooled vector.
        kernel_initializer: initializer of the head's kernel (BERT's truncated normal).
        pooling: "pooled", the encoder's `pooled_output` (BERT's tanh pooler on `[CLS]`, as
            Hugging Face's `BertForSequenceClassification`); or "mean", the mean of its
            `sequence_output` over the real tokens (Sentence-BERT's pooling).

    Example:

    >>> from lmpipe.models import BertConfig, bert
    >>> model = SequenceClassifier(bert(BertConfig.tiny(vocabulary_size=100)), num_classes=3)
    >>> ids = keras.ops.ones((2, 8), "int32")
    >>> inputs = {"token_ids": ids, "segment_ids": ids * 0, "padding_mask": ids}
    >>> tuple(model(inputs)["logits"].shape)
    (2, 3)

    Reference: Devlin et al., "BERT", 2019, section 4.1 (fine-tuning on GLUE).
    """

    def __init__(
        self, encoder, num_classes, dropout=0.1, kernel_initializer=None, pooling="pooled", **kwargs
    ):
        check_choice("pooling", pooling, POOLINGS)
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
        read = "sequence_output" if pooling == "mean" else "pooled_output"
        if not isinstance(encoded, dict) or read not in encoded:
            shape = "[batch, sequence, hidden]" if pooling == "mean" else "[batch, hidden]"
            raise ValueError(
                f"`encoder` must return a dict with `{read}` {shape} (pooling={pooling!r})."
            )
        head = ClassificationHead(
            num_classes,
            dropout=dropout,
            kernel_initializer=kernel_initializer,
            name="classification_head",
        )
        if pooling == "mean":
            pooled = MaskedMeanPooling(name="mean_pooling")(
                encoded["sequence_output"], inputs[PADDING_MASK]
            )
            if "pooler" in {layer.name for layer in encoder.layers}:
                # Nothing reads the pooler now: frozen rather than left without gradients.
                encoder.get_layer("pooler").trainable = False
        else:
            pooled = encoded["pooled_output"]
        outputs = {"logits": head(pooled)}  # [B, C] float32
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)
        self.encoder = encoder
        self.head = head
        self.num_classes = num_classes
        self.dropout = dropout
        self.pooling = pooling
        self.accuracy_metric = keras.metrics.SparseCategoricalAccuracy(name="accuracy")
        self.macro_f1_metric = MacroF1(num_classes)

    def loss_weights(self, x, y):
        """`{term: weights}`: every example counts (the mean over the global batch)."""
        del x
        labels = y[LABELS] if isinstance(y, dict) else y
        return {LABELS: ops.ones_like(labels, "float32")}

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        del sample_weight, training
        labels = y[LABELS] if isinstance(y, dict) else y
        logits = y_pred["logits"]
        loss = masked_cross_entropy(labels, logits, self.loss_weights(x, y)[LABELS], term=LABELS)
        self.accuracy_metric.update_state(labels, logits)
        self.macro_f1_metric.update_state(labels, logits)
        return loss

    def get_config(self):
        return {
            "encoder": keras.saving.serialize_keras_object(self.encoder),
            "num_classes": self.num_classes,
            "dropout": self.dropout,
            "kernel_initializer": keras.initializers.serialize(self.head.kernel_initializer),
            "pooling": self.pooling,
            "name": self.name,
        }

    @classmethod
    def from_config(cls, config):
        return cls(**config)


def _input_names(model):
    inputs = model.input
    if isinstance(inputs, dict):
        return set(inputs)
    return {tensor.name for tensor in keras.tree.flatten(inputs)}
