"""ELMo: a forward and a backward LSTM language model over a shared token encoder, trained
jointly."""

import dataclasses

import keras
from keras import ops

from lmpipe.arguments import check_choice, check_number, check_positive_integers, check_rates
from lmpipe.contract import (
    NEXT_IDS,
    PADDING_MASK,
    PREVIOUS_IDS,
    PREVIOUS_WEIGHTS,
    TOKEN_IDS,
    WEIGHTS,
)
from lmpipe.layers.character_cnn import PUBLISHED_FILTERS, CharacterCNN, check_filters
from lmpipe.layers.dropout import Dropout
from lmpipe.layers.initializers import bert_initializer
from lmpipe.layers.projected_lstm_cell import ProjectedLSTMCell
from lmpipe.layers.token_spelling import TokenSpelling
from lmpipe.models.losses import masked_cross_entropy
from lmpipe.models.presets import Presets
from lmpipe.models.trainable import FunctionalTrainableModel
from lmpipe.tokenizers.token_characters import MAX_CHARACTERS_PER_TOKEN, NUM_CHARACTERS

TOKEN_ENCODERS = ("characters", "embedding")
"""How ELMo encodes a token: the paper's character CNN, or a token embedding."""


@dataclasses.dataclass(frozen=True)
class ElmoConfig(Presets):
    """Sizes of an ELMo bidirectional language model; validated on creation.

    Each direction stacks `num_layers` LSTMs of `lstm_units` cells with a projection to
    `projection_dim` inside the recurrence (LSTMP, `ProjectedLSTMCell`: the projected output
    is the recurrent state), the cell state clipped to `cell_clip` and the projection to
    `proj_clip`; None: a plain LSTM of `lstm_units` outputs. A layer's representation has
    `2 * D` features, `D = projection_dim or lstm_units`.

    Tokens are encoded by `token_encoder`: "characters", the paper's character CNN over
    each token's spelling (`character_filters`, `num_highway_layers` highway layers and a
    projection to `embedding_dim`; `CharacterCNN`), with an output softmax of its own; or
    "embedding", a token embedding of `embedding_dim` tied to the softmax (the character
    fields are then unused).

    Presets: `tiny()` for tests; `small()` (1024 cells, 128 projection) and `medium()`
    (2048 cells, 256): AllenNLP's small and medium LSTM sizes over a token embedding; and
    `original()`, the published model (Peters et al. 2018, bilm-tf's options): character CNN
    with filters `[[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]]`,
    2 highway layers and a projection to 512, 2 layers of 4096 cells projected to 512,
    clipped at 3, residual connection between the layers. Its biLM has bilm-tf's
    93,600,864 parameters without the softmax (see `parameter_count`).

    Reference: Peters et al., "Deep contextualized word representations", 2018, section 3.
    """

    vocabulary_size: int = 30522
    embedding_dim: int = 512
    lstm_units: int = 4096
    projection_dim: int | None = 512
    num_layers: int = 2
    dropout: float = 0.1
    cell_clip: float | None = 3.0
    proj_clip: float | None = 3.0
    token_encoder: str = "characters"
    character_filters: tuple = PUBLISHED_FILTERS
    num_highway_layers: int = 2
    character_dim: int = 16
    max_characters_per_token: int = MAX_CHARACTERS_PER_TOKEN

    def __post_init__(self):
        check_positive_integers(
            self,
            "vocabulary_size",
            "embedding_dim",
            "lstm_units",
            "num_layers",
            "character_dim",
            "max_characters_per_token",
            optional=("projection_dim",),
        )
        check_rates(self, "dropout")
        for name in ("cell_clip", "proj_clip"):
            check_number(name, getattr(self, name), above=0, none=True)
        check_choice("token_encoder", self.token_encoder, TOKEN_ENCODERS)
        check_number("num_highway_layers", self.num_highway_layers, minimum=0, integer=True)
        # Normalized to tuples: a configuration read back from JSON compares equal.
        filters = check_filters("character_filters", self.character_filters)
        object.__setattr__(self, "character_filters", filters)
        widest = max(width for width, _ in filters)
        if widest > self.max_characters_per_token:
            raise ValueError(
                f"`character_filters` has a filter {widest} characters wide, more than "
                f"`max_characters_per_token` ({self.max_characters_per_token})."
            )

    @property
    def output_dim(self):
        """`D`, the features of one direction's layer output."""
        return self.projection_dim or self.lstm_units

    def parameter_count(self):
        """`{part: parameters}` of the biLM with these sizes, from the shapes alone.

        Per LSTM layer and direction, `4U (I + D) + 4U + U P` (gates' kernels over the input
        and the recurrent state, their bias, the projection `P = projection_dim`, none
        without one), `I` the layer's input size. The character CNN: `262 E_c` embeddings,
        `sum_k (w_k E_c n_k + n_k)` convolutions, `2 (F^2 + F)` per highway layer and
        `F E + E` for the projection (`F = sum_k n_k`, none if `F == E`), or `V E` for a
        token embedding. The softmax: `V D + V` after the character CNN; tied to the token
        embedding, only its projection `D E` when `D != E`. Layer 0's projection to `D`
        (`E D` when `E != D`) counts under "token_encoder".

        >>> ElmoConfig.original().parameter_count()["lstm"]
        75563008
        """
        units, d, e, v = self.lstm_units, self.output_dim, self.embedding_dim, self.vocabulary_size
        lstm = 0
        for index in range(self.num_layers):
            inputs = e if index == 0 else d
            lstm += 4 * units * (inputs + d) + 4 * units + units * (self.projection_dim or 0)
        if self.token_encoder == "characters":
            features = sum(count for _, count in self.character_filters)
            encoder = NUM_CHARACTERS * self.character_dim
            encoder += sum(w * self.character_dim * n + n for w, n in self.character_filters)
            encoder += self.num_highway_layers * 2 * (features * features + features)
            encoder += 0 if features == e else features * e + e
            softmax = v * d + v
        else:
            encoder = v * e
            softmax = 0 if d == e else d * e  # the projection to the tied embedding
        encoder += 0 if d == e else e * d  # layer 0's projection to D
        return {"token_encoder": encoder, "lstm": 2 * lstm, "softmax": softmax}

    @classmethod
    def tiny(cls, **overrides):
        """Embedding 32, 64 cells projected to 32, 2 layers: for tests."""
        return cls.from_preset("tiny", **overrides)

    @classmethod
    def small(cls, **overrides):
        """Embedding 128, 1024 cells projected to 128 (AllenNLP's small ELMo's LSTMs)."""
        return cls.from_preset("small", **overrides)

    @classmethod
    def medium(cls, **overrides):
        """Embedding 256, 2048 cells projected to 256 (AllenNLP's medium ELMo's LSTMs)."""
        return cls.from_preset("medium", **overrides)

    @classmethod
    def original(cls, **overrides):
        """The published ELMo: character CNN (2,048 filters, 2 highway layers, projection to
        512), 2 layers of 4096 cells projected to 512, clipped at 3."""
        return cls.from_preset("original", **overrides)

    def to_dict(self):
        """The fields as a plain dict (JSON-serializable)."""
        values = dataclasses.asdict(self)
        values["character_filters"] = [list(pair) for pair in self.character_filters]
        return values


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
    """ELMo's biLM: forward and backward LSTM LMs over a shared token encoder and softmax.

        e = CharCNN(spelling[token_ids]) or E[token_ids]          # shared, [B, S, E]
        f_1 = LSTMP_f1(e), f_j = LSTMP_fj(f_{j-1}) + f_{j-1}      # residual from layer 2
        b_j likewise over the reversed rows, reversed back        # sees positions >= t only
        forward_logits = f_L W + b, backward_logits = b_L W + b   # shared softmax
        layers = [[e', e'], [f_1, b_1], ..., [f_L, b_L]]          # [B, L + 1, S, 2D]

    Each LSTMP is a `keras.layers.RNN` of a `ProjectedLSTMCell` (`lstm_units` cells, the
    projection to `D` inside the recurrence, `cell_clip`, `proj_clip`), with dropout on its
    input. Layer 0 is the token encoding duplicated (after a learned projection to `D` if
    `E != D`). With `token_encoder="characters"` the tokens' spellings come from a table
    kept with the weights (`TokenSpelling`): `token_characters` fills it (the pipeline
    passes `lmpipe.tokenizers.token_characters(tokenizer)`), loading saved weights does too;
    until then every token reads as no characters. With "embedding" the softmax is tied to
    the token embedding (through a shared projection to `E` if `D != E`).

    Inputs: `token_ids`, `padding_mask` int32 `[B, S]`, padded at the end (the backward LM
    reverses each row's real tokens; padding comes after a row's real tokens in both
    directions, so it never changes their outputs). Outputs: `layers` `[B, L + 1, S, 2D]`,
    `forward_logits` (scores of the token after `t`, from positions `<= t`) and
    `backward_logits` (of the token before `t`, from positions `>= t`), float32 `[B, S, V]`.

    Loss: forward next-token NLL + backward previous-token NLL, each the weighted mean over
    the global batch (labels `next_ids`, `weights`, `previous_ids`, `previous_weights`, from
    `causal_lm_examples(..., bidirectional=True)`). Metrics: `forward_loss`,
    `backward_loss`, `forward_accuracy`, `backward_accuracy`.

    Args:
        config: an `ElmoConfig` (or its dict).
        token_characters: with `token_encoder="characters"`, the character ids of every
            token, int `[vocabulary_size, max_characters_per_token]`.

    Example:

    >>> model = ElmoLanguageModel(ElmoConfig.tiny(vocabulary_size=100))
    >>> ids = keras.ops.ones((2, 7), "int32")
    >>> tuple(model({"token_ids": ids, "padding_mask": ids})["layers"].shape)
    (2, 3, 7, 64)

    Reference: Peters et al., "Deep contextualized word representations", 2018.
    """

    def __init__(self, config=None, token_characters=None, **kwargs):
        if isinstance(config, dict):
            config = ElmoConfig(**config)
        config = config or ElmoConfig.original()
        if not isinstance(config, ElmoConfig):
            raise ValueError(f"`config` must be an ElmoConfig, got {config!r}.")
        characters = config.token_encoder == "characters"
        if token_characters is not None and not characters:
            raise ValueError(
                "`token_characters` is for token_encoder='characters', not "
                f"{config.token_encoder!r}."
            )
        inputs = {
            name: keras.Input(shape=(None,), dtype="int32", name=name)
            for name in (TOKEN_IDS, PADDING_MASK)
        }
        d = config.output_dim
        dropout = Dropout(config.dropout, name="dropout")

        def direction(name):
            return [
                keras.layers.RNN(
                    ProjectedLSTMCell(
                        config.lstm_units,
                        projection_dim=config.projection_dim,
                        cell_clip=config.cell_clip,
                        proj_clip=config.proj_clip,
                        name=f"{name}_cell_{index}",
                    ),
                    return_sequences=True,
                    name=f"{name}_lstm_{index}",
                )
                for index in range(config.num_layers)
            ]

        def run(lstms, x):
            outputs = []
            for index, lstm in enumerate(lstms):
                h = lstm(dropout(x))  # [B, S, D]
                if index > 0:
                    h = h + x  # the paper's residual connection between LSTM layers
                outputs.append(h)
                x = h
            return outputs  # num_layers x [B, S, D]

        if characters:
            spelling = TokenSpelling(
                config.vocabulary_size, config.max_characters_per_token, name="token_spelling"
            )
            encoder = CharacterCNN(
                config.embedding_dim,
                filters=config.character_filters,
                num_highway_layers=config.num_highway_layers,
                num_characters=NUM_CHARACTERS,
                character_dim=config.character_dim,
                name="character_cnn",
            )
            e = encoder(spelling(inputs[TOKEN_IDS]))  # [B, S, E]
        else:
            embedding = keras.layers.ReversibleEmbedding(
                config.vocabulary_size,
                config.embedding_dim,
                embeddings_initializer=bert_initializer(),
                name="token_embedding",
            )
            e = embedding(inputs[TOKEN_IDS])  # [B, S, E]
        forward = run(direction("forward"), e)
        reversed_e = reverse_real_tokens(e, inputs[PADDING_MASK])
        backward = [
            reverse_real_tokens(h, inputs[PADDING_MASK])
            for h in run(direction("backward"), reversed_e)
        ]
        if config.embedding_dim != d:
            e = keras.layers.Dense(d, use_bias=False, name="embedding_projection")(e)
        layers = [ops.concatenate([e, e], axis=-1)]
        layers += [ops.concatenate([f, b], axis=-1) for f, b in zip(forward, backward, strict=True)]
        stacked = ops.stack(layers, axis=1)  # [B, L + 1, S, 2D]

        if characters:
            softmax = keras.layers.Dense(config.vocabulary_size, name="softmax")

            def scores(h):
                return softmax(h)
        else:
            softmax_projection = None
            if config.embedding_dim != d:
                softmax_projection = keras.layers.Dense(
                    config.embedding_dim, use_bias=False, name="softmax_projection"
                )

            def scores(h):
                if softmax_projection is not None:
                    h = softmax_projection(h)
                return embedding(h, reverse=True)

        def logits(h):
            return ops.cast(scores(dropout(h)), "float32")  # [B, S, V]

        outputs = {
            "layers": stacked,
            "forward_logits": logits(forward[-1]),
            "backward_logits": logits(backward[-1]),
        }
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)
        self.config = config
        if token_characters is not None:
            self.get_layer("token_spelling").set_spellings(token_characters)
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
        return {"forward": y[WEIGHTS], "backward": y[PREVIOUS_WEIGHTS]}

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        del sample_weight, training
        t = self.trackers
        weights = self.loss_weights(x, y)
        forward = masked_cross_entropy(
            y[NEXT_IDS],
            y_pred["forward_logits"],
            weights["forward"],
            t["forward_loss"],
            t["forward_accuracy"],
            term="forward",
        )
        backward = masked_cross_entropy(
            y[PREVIOUS_IDS],
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


def elmo(config=None, token_characters=None):
    """An ELMo biLM (`ElmoLanguageModel`) for `config` (default: the published model's);
    `token_characters` spells the tokens for the character CNN.

    Example:

    >>> model = elmo(ElmoConfig.tiny(vocabulary_size=100, num_layers=1))
    >>> sorted(model.output)
    ['backward_logits', 'forward_logits', 'layers']
    """
    return ElmoLanguageModel(config, token_characters)
