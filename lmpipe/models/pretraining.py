"""The BERT/ALBERT pretraining model: encoder, tied masked-LM head and NSP/SOP head, losses."""

import keras
from keras import ops

from lmpipe.contract import (
    MASK_IDS,
    MASK_POSITIONS,
    MASK_WEIGHTS,
    NSP_LABELS,
    PADDING_MASK,
    SEGMENT_IDS,
    SOP_LABELS,
    TOKEN_IDS,
)
from lmpipe.layers.initializers import bert_initializer
from lmpipe.layers.masked_lm_head import MaskedLMHead
from lmpipe.models.albert import AlbertConfig, albert
from lmpipe.models.bert import BertConfig, bert
from lmpipe.models.configs import config_from_dict, config_to_dict
from lmpipe.models.losses import masked_cross_entropy
from lmpipe.models.trainable import FunctionalTrainableModel

PAIR_LABELS = {"nsp": NSP_LABELS, "sop": SOP_LABELS, "mlm": None}


def encoder_from_config(config):
    """`bert(config)` for a `BertConfig`, `albert(config)` for an `AlbertConfig`."""
    if isinstance(config, AlbertConfig):
        return albert(config)
    if isinstance(config, BertConfig):
        return bert(config)
    raise ValueError(f"`config` must be a BertConfig or an AlbertConfig, got {config!r}.")


@keras.saving.register_keras_serializable(package="lmpipe")
class BertPretrainer(FunctionalTrainableModel):
    """Encoder + masked-LM head tied to the token embedding + a 2-way pair head.

    Inputs: the features of the BERT data contract (`token_ids`, `segment_ids`,
    `padding_mask`, `mask_positions`). Outputs: `mlm_logits` `[B, P, V]` and, for the "nsp" and
    "sop" objectives, `pair_logits` `[B, 2]` (float32). The model is built functionally inside
    this class so that `from_config` rebuilds it, and re-ties the head to the embedding.

    Loss: the masked mean of the masked-LM cross-entropy over the real predictions
    (`mask_weights`), plus the mean pair cross-entropy. Both means are taken over the global
    batch when training under a distribution strategy. Metrics: `mlm_loss`, `mlm_accuracy`
    (over real predictions), `pair_loss`, `pair_accuracy`.

    Args:
        encoder_config: a `BertConfig` or an `AlbertConfig`.
        objective: "nsp", "sop" or "mlm" (no pair head).
        max_predictions: length of the masked-LM prediction lists.
    """

    def __init__(self, encoder_config, objective="nsp", max_predictions=20, **kwargs):
        if isinstance(encoder_config, dict):
            encoder_config = config_from_dict(encoder_config)
        if objective not in PAIR_LABELS:
            raise ValueError(
                f"`objective` must be one of {sorted(PAIR_LABELS)}, got objective={objective!r}."
            )
        encoder = encoder_from_config(encoder_config)
        inputs = {
            name: keras.Input(shape=(None,), dtype="int32", name=name)
            for name in (TOKEN_IDS, SEGMENT_IDS, PADDING_MASK, MASK_POSITIONS)
        }
        encoded = encoder({name: inputs[name] for name in encoder.input})
        token_embedding = encoder.get_layer("embedding").token_embedding
        mlm_head = MaskedLMHead(
            encoder_config.vocabulary_size,
            token_embedding=token_embedding,
            activation=encoder_config.activation,
            layer_norm_epsilon=encoder_config.layer_norm_epsilon,
            kernel_initializer=bert_initializer(encoder_config.initializer_range),
            name="mlm_head",
        )
        outputs = {"mlm_logits": mlm_head(encoded["sequence_output"], inputs[MASK_POSITIONS])}
        if PAIR_LABELS[objective] is None:
            # Without a pair head nothing trains the pooler: freeze it rather than leave it
            # without gradients.
            encoder.get_layer("pooler").trainable = False
        if PAIR_LABELS[objective] is not None:
            pair_head = keras.layers.Dense(
                2,
                kernel_initializer=bert_initializer(encoder_config.initializer_range),
                name="pair_head",
            )
            outputs["pair_logits"] = ops.cast(pair_head(encoded["pooled_output"]), "float32")
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)
        self.encoder_config = encoder_config
        self.objective = objective
        self.max_predictions = max_predictions
        self.encoder = encoder
        self.mlm_loss_tracker = keras.metrics.Mean(name="mlm_loss")
        self.mlm_accuracy = keras.metrics.Mean(name="mlm_accuracy")
        if PAIR_LABELS[objective] is not None:
            self.pair_loss_tracker = keras.metrics.Mean(name="pair_loss")
            self.pair_accuracy = keras.metrics.Mean(name="pair_accuracy")

    def loss_weights(self, x, y):
        """`{term: weights}` of the loss terms: the real predictions, and every example for
        the pair objective."""
        del x
        weights = {"mlm": y[MASK_WEIGHTS]}
        label_name = PAIR_LABELS[self.objective]
        if label_name is not None:
            weights["pair"] = ops.ones_like(y[label_name], "float32")  # [B]
        return weights

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        del sample_weight, training
        weights = self.loss_weights(x, y)
        loss = masked_cross_entropy(
            y[MASK_IDS],
            y_pred["mlm_logits"],
            weights["mlm"],
            self.mlm_loss_tracker,
            self.mlm_accuracy,
            term="mlm",
        )
        label_name = PAIR_LABELS[self.objective]
        if label_name is not None:
            loss = loss + masked_cross_entropy(
                y[label_name],
                y_pred["pair_logits"],
                weights["pair"],
                self.pair_loss_tracker,
                self.pair_accuracy,
                term="pair",
            )
        return loss

    def get_config(self):
        return {
            "encoder_config": config_to_dict(self.encoder_config),
            "objective": self.objective,
            "max_predictions": self.max_predictions,
            "name": self.name,
        }

    @classmethod
    def from_config(cls, config):
        return cls(**config)
