"""ELMo: a forward and a backward LSTM language model over shared embeddings, trained jointly."""

import dataclasses

import keras
from keras import ops

from lmpipe.arguments import check_positive_integers, check_rates
from lmpipe.layers.dropout import Dropout
from lmpipe.layers.initializers import bert_initializer
from lmpipe.models.losses import masked_cross_entropy
from lmpipe.models.trainable import FunctionalTrainableModel


@dataclasses.dataclass(frozen=True)
class ElmoConfig:
    """Sizes of an ELMo bidirectional language model; validated on creation.

    Each direction stacks `num_layers` LSTMs of `lstm_units` cells, each followed by a linear
    projection to `projection_dim` (None: no projection, the LSTM output is used). A layer's
    representation has `2 * D` features, `D = projection_dim or lstm_units`.

    Presets: `tiny()` for tests; `small()` (1024 cells, 128 projection, AllenNLP's "small"),
    `medium()` (2048 cells, 256) and `original()` (4096 cells, 512 projection, the paper's).
    The paper embeds tokens with a character CNN; lmpipe uses a WordPiece token embedding of
    `embedding_dim`, shared by both directions and tied to their shared softmax.

    Reference: Peters et al., "Deep contextualized word representations", 2018, section 3.
    """

    vocabulary_size: int = 30522
    embedding_dim: int = 512
    lstm_units: int = 4096
    projection_dim: int | None = 512
    num_layers: int = 2
    dropout: float = 0.1

    def __post_init__(self):
        check_positive_integers(
            self,
            "vocabulary_size",
            "embedding_dim",
            "lstm_units",
            "num_layers",
            optional=("projection_dim",),
        )
        check_rates(self, "dropout")

    @property
    def output_dim(self):
        """`D`, the features of one direction's layer output."""
        return self.projection_dim or self.lstm_units

    @classmethod
    def tiny(cls, **overrides):
        """Embedding 32, 64 cells projected to 32, 2 layers: for tests."""
        return cls(**{**dict(embedding_dim=32, lstm_units=64, projection_dim=32), **overrides})

    @classmethod
    def small(cls, **overrides):
        """Embedding 128, 1024 cells projected to 128 (AllenNLP's small ELMo)."""
        return cls(**{**dict(embedding_dim=128, lstm_units=1024, projection_dim=128), **overrides})

    @classmethod
    def medium(cls, **overrides):
        """Embedding 256, 2048 cells projected to 256."""
        return cls(**{**dict(embedding_dim=256, lstm_units=2048, projection_dim=256), **overrides})

    @classmethod
    def original(cls, **overrides):
        """The paper's: embedding 512, 4096 cells projected to 512, 2 layers."""
        return cls(**overrides)

    def to_dict(self):
        """The fields as a plain dict (JSON-serializable)."""
        return dataclasses.asdict(self)


def reverse_real_tokens(x, padding_mask):
    """Reverse the real tokens of each row of `x` `[B, S, ...]`, leaving end padding in place.

    Rows must be padded at the end. Applied twice it is the identity, so the backward LM
    runs forward over reversed rows and its outputs are reversed back into place.
    """
    padding_mask = ops.cast(padding_mask, "int32")
    lengths = ops.sum(padding_mask, axis=1, keepdims=True)  # [B, 1]
    # 0, 1, ..., S - 1 per row, from ops that also trace with an unknown length.
    positions = ops.cumsum(ops.ones_like(padding_mask), axis=1) - 1  # [B, S]
    source = ops.where(positions < lengths, lengths - 1 - positions, positions)  # [B, S]
    for _ in range(len(x.shape) - 2):
        source = ops.expand_dims(source, -1)  # [B, S, 1, ...], broadcast over the features
    return ops.take_along_axis(x, source, axis=1)


@keras.saving.register_keras_serializable(package="lmpipe")
class ElmoLanguageModel(FunctionalTrainableModel):
    """ELMo's biLM: forward and backward LSTM LMs over a shared embedding and softmax.

        e = E[token_ids]                                          # shared, [B, S, E]
        f_1 = LSTM_f1(e), f_j = LSTM_fj(f_{j-1}) + f_{j-1}        # residual from layer 2
        b_j likewise over the reversed rows, reversed back        # sees positions >= t only
        forward_logits = f_L E^T, backward_logits = b_L E^T       # shared, tied softmax
        layers = [[e', e'], [f_1, b_1], ..., [f_L, b_L]]          # [B, L + 1, S, 2D]

    Each LSTM is followed by a projection to `D` when `projection_dim` is set. Layer 0 is
    the token embedding duplicated (after a learned projection to `D` if `E != D`); the
    softmax reads `D` features, through a shared projection to `E` if `D != E`.

    Inputs: `token_ids`, `padding_mask` int32 `[B, S]`, padded at the end (the backward LM
    reverses each row's real tokens). Outputs: `layers` `[B, L + 1, S, 2D]`,
    `forward_logits` (scores of the token after `t`, from positions `<= t`) and
    `backward_logits` (of the token before `t`, from positions `>= t`), float32 `[B, S, V]`.

    Loss: forward next-token NLL + backward previous-token NLL, each the weighted mean over
    the global batch (labels `next_ids`, `weights`, `previous_ids`, `previous_weights`, from
    `causal_lm_examples(..., bidirectional=True)`). Metrics: `forward_loss`,
    `backward_loss`, `forward_accuracy`, `backward_accuracy`.

    Args:
        config: an `ElmoConfig` (or its dict).

    Example:

    >>> model = ElmoLanguageModel(ElmoConfig.tiny(vocabulary_size=100))
    >>> ids = keras.ops.ones((2, 7), "int32")
    >>> tuple(model({"token_ids": ids, "padding_mask": ids})["layers"].shape)
    (2, 3, 7, 64)

    Reference: Peters et al., "Deep contextualized word representations", 2018.
    """

    def __init__(self, config=None, **kwargs):
        if isinstance(config, dict):
            config = ElmoConfig(**config)
        config = config or ElmoConfig.original()
        if not isinstance(config, ElmoConfig):
            raise ValueError(f"`config` must be an ElmoConfig, got {config!r}.")
        inputs = {
            name: keras.Input(shape=(None,), dtype="int32", name=name)
            for name in ("token_ids", "padding_mask")
        }
        d = config.output_dim
        embedding = keras.layers.ReversibleEmbedding(
            config.vocabulary_size,
            config.embedding_dim,
            embeddings_initializer=bert_initializer(),
            name="token_embedding",
        )
        dropout = Dropout(config.dropout, name="dropout")

        def direction(name):
            layers = []
            for index in range(config.num_layers):
                lstm = keras.layers.LSTM(
                    config.lstm_units, return_sequences=True, name=f"{name}_lstm_{index}"
                )
                projection = None
                if config.projection_dim is not None:
                    projection = keras.layers.Dense(
                        d, use_bias=False, name=f"{name}_projection_{index}"
                    )
                layers.append((lstm, projection))
            return layers

        def run(layers, x):
            outputs = []
            for index, (lstm, projection) in enumerate(layers):
                h = lstm(dropout(x))
                if projection is not None:
                    h = projection(h)
                if index > 0:
                    h = h + x  # the paper's residual connection between LSTM layers
                outputs.append(h)
                x = h
            return outputs  # num_layers x [B, S, D]

        e = embedding(inputs["token_ids"])  # [B, S, E]
        forward = run(direction("forward"), e)
        reversed_e = reverse_real_tokens(e, inputs["padding_mask"])
        backward = [
            reverse_real_tokens(h, inputs["padding_mask"])
            for h in run(direction("backward"), reversed_e)
        ]
        if config.embedding_dim != d:
            e = keras.layers.Dense(d, use_bias=False, name="embedding_projection")(e)
        layers = [ops.concatenate([e, e], axis=-1)]
        layers += [ops.concatenate([f, b], axis=-1) for f, b in zip(forward, backward, strict=True)]
        stacked = ops.stack(layers, axis=1)  # [B, L + 1, S, 2D]

        softmax_projection = None
        if config.embedding_dim != d:
            softmax_projection = keras.layers.Dense(
                config.embedding_dim, use_bias=False, name="softmax_projection"
            )

        def logits(h):
            h = dropout(h)
            if softmax_projection is not None:
                h = softmax_projection(h)
            return ops.cast(embedding(h, reverse=True), "float32")  # [B, S, V]

        outputs = {
            "layers": stacked,
            "forward_logits": logits(forward[-1]),
            "backward_logits": logits(backward[-1]),
        }
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)
        self.config = config
        self.trackers = {
            name: keras.metrics.Mean(name=name)
            for name in ("forward_loss", "forward_accuracy", "backward_loss", "backward_accuracy")
        }

    def feature_model(self):
        """A `keras.Model` sharing this model's weights: `{token_ids, padding_mask}` ->
        the layer representations `[B, L + 1, S, 2D]`, for downstream tasks (`ScalarMix`)."""
        return keras.Model(self.input, self.output["layers"], name=f"{self.name}_features")

    def loss_weights(self, x, y):
        """`{term: weights}` of the two language models' losses."""
        del x
        return {"forward": y["weights"], "backward": y["previous_weights"]}

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        del sample_weight, training
        t = self.trackers
        weights = self.loss_weights(x, y)
        forward = masked_cross_entropy(
            y["next_ids"],
            y_pred["forward_logits"],
            weights["forward"],
            t["forward_loss"],
            t["forward_accuracy"],
            term="forward",
        )
        backward = masked_cross_entropy(
            y["previous_ids"],
            y_pred["backward_logits"],
            weights["backward"],
            t["backward_loss"],
            t["backward_accuracy"],
            term="backward",
        )
        return forward + backward

    def get_config(self):
        return {"config": self.config.to_dict(), "name": self.name}

    @classmethod
    def from_config(cls, config):
        return cls(**config)


def elmo(config=None):
    """An ELMo biLM (`ElmoLanguageModel`) for `config` (default: the paper's sizes).

    Example:

    >>> model = elmo(ElmoConfig.tiny(vocabulary_size=100, num_layers=1))
    >>> sorted(model.output)
    ['backward_logits', 'forward_logits', 'layers']
    """
    return ElmoLanguageModel(config)
