"""ALBERT: factorized embedding and one encoder block shared across all layers."""

import dataclasses

from lmpipe.arguments import check_positive_integers
from lmpipe.layers.bert_embedding import BertEmbedding
from lmpipe.layers.initializers import bert_initializer
from lmpipe.layers.transformer_encoder_block import TransformerEncoderBlock
from lmpipe.models.bert import _check_encoder_config, encoder_inputs, encoder_outputs
from lmpipe.models.presets import Presets


@dataclasses.dataclass(frozen=True)
class AlbertConfig(Presets):
    """Sizes and hyper-parameters of an ALBERT encoder; validated on creation.

    `embedding_dim` is E of the factorized embedding (V x E then E x H). Presets follow
    Lan et al., "ALBERT", 2020, table 1: `base()` (12 layers, H 768), `large()` (24, 1024),
    `xlarge()` (24, 2048), `xxlarge()` (12, 4096), all with E = 128 and vocabulary 30,000.
    """

    vocabulary_size: int = 30000
    embedding_dim: int = 128
    hidden_dim: int = 768
    num_layers: int = 12
    num_heads: int = 12
    intermediate_dim: int = 3072
    max_sequence_length: int = 512
    num_segments: int = 2
    dropout: float = 0.0
    attention_dropout: float = 0.0
    activation: str = "gelu"
    layer_norm_epsilon: float = 1e-12
    initializer_range: float = 0.02

    def __post_init__(self):
        _check_encoder_config(self)
        check_positive_integers(self, "embedding_dim")

    @classmethod
    def tiny(cls, **overrides):
        """2 layers, E 32, hidden 128, 2 heads, FFN 512: for tests and quick experiments."""
        return cls.from_preset("tiny", **overrides)

    @classmethod
    def base(cls, **overrides):
        """ALBERT-base: 12 layers, hidden 768, 12 heads, FFN 3072 (12M parameters)."""
        return cls.from_preset("base", **overrides)

    @classmethod
    def large(cls, **overrides):
        """ALBERT-large: 24 layers, hidden 1024, 16 heads, FFN 4096 (18M parameters)."""
        return cls.from_preset("large", **overrides)

    @classmethod
    def xlarge(cls, **overrides):
        """ALBERT-xlarge: 24 layers, hidden 2048, 16 heads, FFN 8192 (60M parameters)."""
        return cls.from_preset("xlarge", **overrides)

    @classmethod
    def xxlarge(cls, **overrides):
        """ALBERT-xxlarge: 12 layers, hidden 4096, 64 heads, FFN 16384 (223M parameters)."""
        return cls.from_preset("xxlarge", **overrides)

    def to_dict(self):
        """The fields as a plain dict (JSON-serializable)."""
        return dataclasses.asdict(self)


def albert(config=None):
    """An ALBERT encoder as a functional `keras.Model`, with the same inputs and outputs as
    `bert()`.

    The vocabulary is embedded in E dimensions and projected to H; a single
    `TransformerEncoderBlock` (named `shared_block`) is applied `num_layers` times, so the
    encoder's parameters do not grow with depth.
    """
    config = config or AlbertConfig.base()
    initializer = bert_initializer(config.initializer_range)
    embedding = BertEmbedding(
        config.vocabulary_size,
        config.hidden_dim,
        max_sequence_length=config.max_sequence_length,
        num_segments=config.num_segments,
        embedding_dim=config.embedding_dim,
        dropout=config.dropout,
        layer_norm_epsilon=config.layer_norm_epsilon,
        initializer=initializer,
        name="embedding",
    )
    shared_block = TransformerEncoderBlock(
        config.num_heads,
        config.intermediate_dim,
        dropout=config.dropout,
        attention_dropout=config.attention_dropout,
        activation=config.activation,
        layer_norm_epsilon=config.layer_norm_epsilon,
        kernel_initializer=initializer,
        name="shared_block",
    )
    blocks = [shared_block] * config.num_layers
    return encoder_outputs(encoder_inputs(), embedding, blocks, config, name="albert")
