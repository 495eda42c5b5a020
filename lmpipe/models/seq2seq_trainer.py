"""Training wrapper of the seq2seq models: label-smoothed cross-entropy and token accuracy."""

import keras
from keras import ops

from lmpipe.arguments import check_number
from lmpipe.contract import TARGET_IDS, WEIGHTS
from lmpipe.models.configs import config_from_dict, config_to_dict
from lmpipe.models.losses import masked_mean, track_accuracy
from lmpipe.models.rnn_seq2seq import RnnSeq2SeqConfig, rnn_seq2seq
from lmpipe.models.trainable import TrainableModel
from lmpipe.models.transformer import SEQ2SEQ_INPUTS, TransformerConfig, transformer

ARCHITECTURES = {"transformer": TransformerConfig, "rnn": RnnSeq2SeqConfig}
DEFAULT_LABEL_SMOOTHING = {"transformer": 0.1, "rnn": 0.0}
"""The Transformer paper smooths labels with 0.1; the RNN papers do not smooth."""


def architecture_of(config):
    """ "transformer" for a `TransformerConfig`, "rnn" for a `RnnSeq2SeqConfig`."""
    for name, config_class in ARCHITECTURES.items():
        if isinstance(config, config_class):
            return name
    raise ValueError(
        f"`model_config` must be a TransformerConfig or a RnnSeq2SeqConfig, got {config!r}."
    )


def architecture_options(config):
    """`arch`, `attention` and `form` as `config` has them (what `Translation` options say).

    >>> architecture_options(RnnSeq2SeqConfig(form="context"))
    {'arch': 'rnn', 'attention': None, 'form': 'context'}
    """
    arch = architecture_of(config)
    if arch != "rnn":
        return {"arch": arch, "attention": None, "form": None}
    attention = config.attention_score if config.form == "attention" else None
    return {"arch": arch, "attention": attention, "form": config.form}


def label_smoothed_cross_entropy(target_ids, logits, label_smoothing):
    """Per-token cross-entropy against labels smoothed toward the uniform distribution.

    The smoothed label puts `1 - eps + eps / V` on the target and `eps / V` on every other
    token, so the loss is `(1 - eps) * nll + eps * mean_v(-log p_v)`, computed from the
    log-probabilities without a one-hot `[B, T, V]` tensor.

    Args:
        target_ids: int `[B, T]`.
        logits: float `[B, T, V]`.
        label_smoothing: `eps` in [0, 1).

    Returns:
        `(loss, nll)`, float32 `[B, T]`: the smoothed loss and the plain negative
        log-likelihood of the targets.

    Reference: Szegedy et al., "Rethinking the Inception Architecture", 2016, section 7.
    """
    log_probs = ops.log_softmax(ops.cast(logits, "float32"), axis=-1)  # [B, T, V]
    target_ids = ops.cast(target_ids, "int32")
    nll = -ops.squeeze(ops.take_along_axis(log_probs, target_ids[..., None], axis=-1), -1)
    if not label_smoothing:
        return nll, nll
    uniform = -ops.mean(log_probs, axis=-1)  # [B, T]
    return (1.0 - label_smoothing) * nll + label_smoothing * uniform, nll


@keras.saving.register_keras_serializable(package="lmpipe")
class Seq2SeqTrainer(TrainableModel):
    """A seq2seq model (`transformer` or `rnn_seq2seq`) with its training loss and metrics.

    Called on the seq2seq features (`encoder_ids`, `encoder_mask`, `decoder_ids`,
    `decoder_mask`) it returns the model's logits `[B, T, V]`. The loss is the label-smoothed
    cross-entropy of `target_ids`, weighted by `weights` (0 on padding) and divided by the sum
    of the weights over the global batch, so that it is the mean over the real tokens under
    any distribution strategy. Metrics: `nll` (the plain cross-entropy per real token, whose
    exponential is the perplexity) and `token_accuracy` (argmax = target, over real tokens).

    Args:
        model_config: a `TransformerConfig` or `RnnSeq2SeqConfig` (or the dict
            `lmpipe.models.configs.config_to_dict` makes of one).
        label_smoothing: `eps` in [0, 1); default 0.1 for the Transformer, 0 for RNNs.

    Attributes:
        seq2seq: the wrapped model, with `encode` and `decode_step` for decoding.

    Example:

    >>> from lmpipe.models.transformer import TransformerConfig
    >>> trainer = Seq2SeqTrainer(TransformerConfig.tiny(vocabulary_size=50))
    >>> trainer.label_smoothing
    0.1

    Reference: Vaswani et al., "Attention Is All You Need", 2017, section 5.4.
    """

    def __init__(self, model_config, label_smoothing=None, **kwargs):
        if isinstance(model_config, dict):
            model_config = config_from_dict(model_config)
        kind = architecture_of(model_config)
        if label_smoothing is None:
            label_smoothing = DEFAULT_LABEL_SMOOTHING[kind]
        check_number("label_smoothing", label_smoothing, minimum=0, below=1)
        kwargs.setdefault("name", "seq2seq_trainer")
        super().__init__(**kwargs)
        self.model_config = model_config
        self.label_smoothing = float(label_smoothing)
        build = transformer if kind == "transformer" else rnn_seq2seq
        self.seq2seq = build(model_config)
        self.nll_tracker = keras.metrics.Mean(name="nll")
        self.token_accuracy = keras.metrics.Mean(name="token_accuracy")
        self.built = True

    def call(self, inputs, training=None):
        return self.seq2seq({name: inputs[name] for name in SEQ2SEQ_INPUTS}, training=training)

    def loss_weights(self, x, y):
        """`{term: weights}`: the real target tokens."""
        del x
        return {"target": y[WEIGHTS]}  # [B, T], 1 on real tokens

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        del sample_weight, training
        weights = self.loss_weights(x, y)["target"]
        loss, nll = label_smoothed_cross_entropy(y[TARGET_IDS], y_pred, self.label_smoothing)
        total = masked_mean(loss, weights, self.nll_tracker, tracked=nll, term="target")
        track_accuracy(self.token_accuracy, y[TARGET_IDS], y_pred, weights)
        return total

    def get_config(self):
        return {
            "model_config": config_to_dict(self.model_config),
            "label_smoothing": self.label_smoothing,
            "name": self.name,
        }

    @classmethod
    def from_config(cls, config):
        return cls(**config)
