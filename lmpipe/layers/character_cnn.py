"""ELMo's token encoder: a character CNN with max-pooling, highway layers and a projection."""

import math

import keras
from keras import ops

from lmpipe.arguments import check_number, check_positive_int

PUBLISHED_FILTERS = ((1, 32), (2, 32), (3, 64), (4, 128), (5, 256), (6, 512), (7, 1024))
"""`(width, count)` of the published ELMo's convolutions: 2,048 filters."""


def check_filters(name, filters):
    """`filters` as a tuple of `(width, count)` pairs of positive integers (a JSON list of
    lists too); a ValueError naming `name` otherwise."""
    try:
        pairs = tuple(tuple(pair) for pair in filters)
    except TypeError:
        pairs = ()
    if not pairs or any(len(pair) != 2 for pair in pairs):
        raise ValueError(
            f"`{name}` must be a non-empty list of (width, count) pairs, got {name}={filters!r}."
        )
    for index, (width, count) in enumerate(pairs):
        check_positive_int(f"{name}[{index}] width", width)
        check_positive_int(f"{name}[{index}] count", count)
    return tuple((int(width), int(count)) for width, count in pairs)


@keras.saving.register_keras_serializable(package="lmpipe")
class CharacterCNN(keras.layers.Layer):
    """A vector for each token from the characters that spell it (Kim et al.'s CNN, ELMo's).

        e = C[character_ids]                                   # [B, S, chars, E_c]
        y_k = relu(max_t (conv_k(e)_t + b_k))                  # one per filter, [B, S, n_k]
        y = [y_1, ..., y_K]                                    # [B, S, F], F = sum n_k
        y = g * relu(y W_T + b_T) + (1 - g) * y,  g = sigmoid(y W_G + b_G)   # each highway
        output = y W_P + b_P                                   # [B, S, output_dim]

    Each convolution spans `width` characters and is max-pooled over every position of the
    token (the padding characters included, as in bilm-tf); the projection is left out when
    `F == output_dim`. Weights start as bilm-tf starts them: character embeddings uniform in
    [-1, 1], convolutions uniform in [-0.05, 0.05], highway and projection kernels normal
    with standard deviation `1 / sqrt(F)`, the highway gates' bias at -2 (carry the input).

    Character ids are bilm-tf's (`lmpipe.tokenizers.token_characters`): 0 for no character
    (the rows of padding tokens), the UTF-8 bytes as 1-256, then the begin/end of sentence
    and word markers and the padding character, 262 in all.

    Args:
        output_dim: size of the token vectors.
        filters: `(width, count)` pairs; default the published ELMo's, 2,048 filters.
        num_highway_layers: highway layers after the convolutions.
        num_characters: size of the character vocabulary.
        character_dim: size of the character embeddings.

    Call arguments:
        character_ids: int `[B, S, max_characters]`, each token's characters.

    Returns:
        float `[B, S, output_dim]`.

    Example:

    >>> cnn = CharacterCNN(8, filters=((1, 4), (3, 6)), num_highway_layers=1)
    >>> tuple(cnn(keras.ops.ones((2, 5, 12), "int32")).shape)
    (2, 5, 8)

    Reference: Kim et al., "Character-Aware Neural Language Models", 2016; Peters et al.,
    "Deep contextualized word representations", 2018, section 3.4 and its supplement.
    """

    def __init__(
        self,
        output_dim,
        filters=PUBLISHED_FILTERS,
        num_highway_layers=2,
        num_characters=262,
        character_dim=16,
        **kwargs,
    ):
        super().__init__(**kwargs)
        check_positive_int("output_dim", output_dim)
        self.filters = check_filters("filters", filters)
        check_number("num_highway_layers", num_highway_layers, minimum=0, integer=True)
        check_positive_int("num_characters", num_characters)
        check_positive_int("character_dim", character_dim)
        self.output_dim = output_dim
        self.num_highway_layers = num_highway_layers
        self.num_characters = num_characters
        self.character_dim = character_dim

    @property
    def num_filters(self):
        """`F`, the features the convolutions give together."""
        return sum(count for _, count in self.filters)

    def build(self, character_ids_shape):
        max_characters = character_ids_shape[-1]
        widest = max(width for width, _ in self.filters)
        if max_characters is not None and max_characters < widest:
            raise ValueError(
                f"CharacterCNN's widest filter spans {widest} characters but tokens have "
                f"{max_characters}."
            )
        features = self.num_filters
        dense_init = math.sqrt(1.0 / features)
        self.character_embedding = keras.layers.Embedding(
            self.num_characters,
            self.character_dim,
            embeddings_initializer=keras.initializers.RandomUniform(-1.0, 1.0),
            dtype=self.dtype_policy,
            name="character_embedding",
        )
        self.character_embedding.build(character_ids_shape)
        embedded_shape = tuple(character_ids_shape) + (self.character_dim,)
        self.convolutions = []
        for index, (width, count) in enumerate(self.filters):
            # A (1, width) window: each token's characters convolved on their own.
            convolution = keras.layers.Conv2D(
                count,
                (1, width),
                kernel_initializer=keras.initializers.RandomUniform(-0.05, 0.05),
                dtype=self.dtype_policy,
                name=f"convolution_{index}",
            )
            convolution.build(embedded_shape)
            self.convolutions.append(convolution)
        pooled_shape = tuple(character_ids_shape[:-1]) + (features,)
        self.highways = []
        for index in range(self.num_highway_layers):
            gate, transform = (
                keras.layers.Dense(
                    features,
                    kernel_initializer=keras.initializers.RandomNormal(stddev=dense_init),
                    bias_initializer=keras.initializers.Constant(bias),
                    dtype=self.dtype_policy,
                    name=f"highway_{index}_{name}",
                )
                for name, bias in (("gate", -2.0), ("transform", 0.0))
            )
            gate.build(pooled_shape)
            transform.build(pooled_shape)
            self.highways.append((gate, transform))
        self.projection = None
        if features != self.output_dim:
            self.projection = keras.layers.Dense(
                self.output_dim,
                kernel_initializer=keras.initializers.RandomNormal(stddev=dense_init),
                dtype=self.dtype_policy,
                name="projection",
            )
            self.projection.build(pooled_shape)
        self.built = True

    def call(self, character_ids):
        e = self.character_embedding(character_ids)  # [B, S, C, E_c]
        pooled = [
            ops.relu(ops.max(convolution(e), axis=-2))  # [B, S, n_k]
            for convolution in self.convolutions
        ]
        y = ops.concatenate(pooled, axis=-1)  # [B, S, F]
        for gate, transform in self.highways:
            g = ops.sigmoid(gate(y))
            y = g * ops.relu(transform(y)) + (1.0 - g) * y
        if self.projection is not None:
            y = self.projection(y)
        return y  # [B, S, output_dim]

    def compute_output_shape(self, character_ids_shape):
        return tuple(character_ids_shape[:-1]) + (self.output_dim,)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "output_dim": self.output_dim,
                "filters": [list(pair) for pair in self.filters],
                "num_highway_layers": self.num_highway_layers,
                "num_characters": self.num_characters,
                "character_dim": self.character_dim,
            }
        )
        return config
