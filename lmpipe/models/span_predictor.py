"""The extractive question answering model: a pretrained encoder + start and end logits over
its tokens, and its loss."""

import keras
from keras import ops

from lmpipe.contract import ENCODER_FEATURES, PADDING_MASK, START_POSITIONS
from lmpipe.layers.span_head import SpanHead
from lmpipe.models.losses import masked_cross_entropy
from lmpipe.models.sequence_classifier import _input_names
from lmpipe.models.trainable import FunctionalTrainableModel


@keras.saving.register_keras_serializable(package="lmpipe")
class SpanPredictor(FunctionalTrainableModel):
    """An encoder (BERT, ALBERT, ...) with a `SpanHead`: where the answer starts and ends.

        h = encoder(token_ids, segment_ids, padding_mask)["sequence_output"]    # [B, S, H]
        start_logits, end_logits = unstack(h W + b)                             # [B, S] each

    Padded positions get -1e9 (see `SpanHead`). Inputs: a dict of int32 `[B, S]` tensors
    `token_ids`, `segment_ids`, `padding_mask`. Outputs: `{"start_logits", "end_logits"}`,
    float32 `[B, S]`. Built functionally inside the class, so `from_config` rebuilds it and
    `.keras` files load with `keras.models.load_model`.

    The model computes its own loss: with labels `{"start_positions", "end_positions"}`
    (int32 `[B]`, 0 = `[CLS]` for a window without the answer) the loss is the mean of the
    start and end cross-entropies over the global batch, as in BERT's `run_squad.py`; the
    metrics `start_accuracy` and `end_accuracy` are the share of argmaxes on the labels.

    Args:
        encoder: a `keras.Model` taking the three inputs above and returning a dict with
            `sequence_output` `[B, S, H]`, e.g. `lmpipe.models.bert(config)`.
        kernel_initializer: initializer of the head's kernel (BERT's truncated normal).

    Example:

    >>> from lmpipe.models import BertConfig, bert
    >>> model = SpanPredictor(bert(BertConfig.tiny(vocabulary_size=100)))
    >>> ids = keras.ops.ones((2, 8), "int32")
    >>> inputs = {"token_ids": ids, "segment_ids": ids * 0, "padding_mask": ids}
    >>> tuple(model(inputs)["start_logits"].shape)
    (2, 8)

    Reference: Devlin et al., "BERT", 2019, section 4.2 (SQuAD v1.1).
    """

    def __init__(self, encoder, kernel_initializer=None, **kwargs):
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
            raise ValueError("`encoder` must return a dict with `sequence_output` [B, S, H].")
        head = SpanHead(kernel_initializer=kernel_initializer, name="span_head")
        outputs = head(encoded["sequence_output"], padding_mask=inputs[PADDING_MASK])
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)
        self.encoder = encoder
        self.head = head
        self.start_accuracy = keras.metrics.Mean(name="start_accuracy")
        self.end_accuracy = keras.metrics.Mean(name="end_accuracy")

    def loss_weights(self, x, y):
        """`{term: weights}`: every window counts, for its start and its end alike."""
        del x
        return {"spans": ops.ones_like(y[START_POSITIONS], "float32")}

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        del sample_weight, training
        weights = self.loss_weights(x, y)["spans"]
        losses = [
            masked_cross_entropy(
                y[f"{side}_positions"],
                y_pred[f"{side}_logits"],
                weights,
                None,
                tracker,
                term="spans",
            )
            for side, tracker in (("start", self.start_accuracy), ("end", self.end_accuracy))
        ]
        return (losses[0] + losses[1]) / 2.0

    def get_config(self):
        return {
            "encoder": keras.saving.serialize_keras_object(self.encoder),
            "kernel_initializer": keras.initializers.serialize(self.head.kernel_initializer),
            "name": self.name,
        }

    @classmethod
    def from_config(cls, config):
        return cls(**config)
