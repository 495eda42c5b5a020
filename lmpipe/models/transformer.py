"""The Transformer of Vaswani et al. (2017): configuration presets and the seq2seq model."""

import dataclasses
import math

import keras
from keras import ops

from lmpipe.arguments import (
    check_heads,
    check_positive_integers,
    check_positive_numbers,
    check_rates,
)
from lmpipe.contract import DECODER_IDS, DECODER_MASK, ENCODER_IDS, ENCODER_MASK
from lmpipe.layers.dropout import Dropout
from lmpipe.layers.sinusoidal_position_encoding import SinusoidalPositionEncoding
from lmpipe.layers.transformer_decoder_block import TransformerDecoderBlock
from lmpipe.layers.transformer_encoder_block import TransformerEncoderBlock
from lmpipe.models.presets import Presets
from lmpipe.models.samplers.seq2seq import Seq2SeqModel

SEQ2SEQ_INPUTS = (ENCODER_IDS, ENCODER_MASK, DECODER_IDS, DECODER_MASK)


@dataclasses.dataclass(frozen=True)
class TransformerConfig(Presets):
    """Sizes and hyper-parameters of an encoder-decoder Transformer; validated on creation.

    `vocabulary_size` is the source vocabulary, and the target's too unless
    `target_vocabulary_size` is given. `share_embeddings` uses one embedding matrix for source
    and target (the paper's shared BPE vocabulary; needs equal vocabularies), `tie_output`
    makes the output projection the transposed target embedding (section 3.4). Embeddings
    are multiplied by sqrt(hidden_dim) before the sinusoidal positions are added.
    `max_decode_length` is the default length of the decoder's key/value caches when
    `encode` is called without `max_length`.

    Presets: `tiny()` for tests, `base()` (the paper's base model: 6 + 6 layers, d_model 512,
    8 heads, d_ff 2048, dropout 0.1) and `big()` (6 + 6 layers, d_model 1024, 16 heads,
    d_ff 4096, dropout 0.3). Any field can be overridden: `TransformerConfig.base(
    vocabulary_size=8000)`.
    """

    vocabulary_size: int = 37000
    target_vocabulary_size: int | None = None
    hidden_dim: int = 512
    num_encoder_layers: int = 6
    num_decoder_layers: int = 6
    num_heads: int = 8
    intermediate_dim: int = 2048
    dropout: float = 0.1
    attention_dropout: float = 0.0
    activation: str = "relu"
    layer_norm_epsilon: float = 1e-6
    share_embeddings: bool = True
    tie_output: bool = True
    max_decode_length: int = 256

    def __post_init__(self):
        check_positive_integers(
            self,
            "vocabulary_size",
            "hidden_dim",
            "num_encoder_layers",
            "num_decoder_layers",
            "num_heads",
            "intermediate_dim",
            "max_decode_length",
            optional=("target_vocabulary_size",),
        )
        check_heads(self)
        check_rates(self, "dropout", "attention_dropout")
        check_positive_numbers(self, "layer_norm_epsilon")
        if self.share_embeddings and self.target_vocabulary_size not in (
            None,
            self.vocabulary_size,
        ):
            raise ValueError(
                "`share_embeddings=True` needs one vocabulary: `target_vocabulary_size` "
                f"({self.target_vocabulary_size}) differs from `vocabulary_size` "
                f"({self.vocabulary_size})."
            )

    @property
    def target_vocabulary(self):
        """The size of the target vocabulary (`target_vocabulary_size` or `vocabulary_size`)."""
        return self.target_vocabulary_size or self.vocabulary_size

    @classmethod
    def tiny(cls, **overrides):
        """2 + 2 layers, d_model 32, 4 heads, d_ff 64, vocabulary 1000: for tests."""
        return cls.from_preset("tiny", **overrides)

    @classmethod
    def base(cls, **overrides):
        """The paper's base model (Table 3): 6 + 6 layers, d_model 512, 8 heads, d_ff 2048."""
        return cls.from_preset("base", **overrides)

    @classmethod
    def big(cls, **overrides):
        """The paper's big model: 6 + 6 layers, d_model 1024, 16 heads, d_ff 4096, dropout 0.3."""
        return cls.from_preset("big", **overrides)

    def to_dict(self):
        """The fields as a plain dict (JSON-serializable)."""
        return dataclasses.asdict(self)


@keras.saving.register_keras_serializable(package="lmpipe")
class TransformerSeq2Seq(Seq2SeqModel):
    """The encoder-decoder Transformer, post-LN as in the paper, with cached decoding.

    Called on `{encoder_ids, encoder_mask, decoder_ids, decoder_mask}` (int32 `[B, S]` and
    `[B, T]`, masks 1 = real token) it returns float32 logits `[B, T, V_target]` (teacher
    forcing: position t sees decoder tokens 0..t). Padded encoder positions are never
    attended to.

    Decoding (see `lmpipe.models.samplers.seq2seq`): `encode` runs the encoder once and returns the
    state `{"encoder_mask": [B, S], "cross_caches": [[B, 2, S, heads, head_dim]] * L,
    "self_caches": [[B, 2, max_length, heads, head_dim]] * L}`, every tensor batch-major;
    `decode_step` embeds one token, writes its keys and values into the self-attention caches
    at `step` and attends to the cached prefix and the encoder's cached keys and values.

    Args:
        config: a `TransformerConfig` (or its dict).

    Reference: Vaswani et al., "Attention Is All You Need", 2017.
    """

    def __init__(self, config, **kwargs):
        if isinstance(config, dict):
            config = TransformerConfig(**config)
        kwargs.setdefault("name", "transformer")
        super().__init__(**kwargs)
        self.config = config
        self.target_vocabulary_size = config.target_vocabulary
        d_model = config.hidden_dim
        self.embedding_scale = math.sqrt(d_model)
        # Embeddings are scaled by sqrt(d_model): start them at N(0, 1/d_model) so that the
        # scaled values have unit variance, the scale of the sinusoidal positions.
        embedding_initializer = keras.initializers.RandomNormal(stddev=d_model**-0.5)
        self.target_embedding = keras.layers.ReversibleEmbedding(
            self.target_vocabulary_size,
            d_model,
            tie_weights=config.tie_output,
            embeddings_initializer=embedding_initializer,
            name="target_embedding",
        )
        self.target_embedding.build((None, None))
        if config.share_embeddings:
            self.source_embedding = None
        else:
            self.source_embedding = keras.layers.Embedding(
                config.vocabulary_size,
                d_model,
                embeddings_initializer=embedding_initializer,
                name="source_embedding",
            )
            self.source_embedding.build((None, None))
        self.position_encoding = SinusoidalPositionEncoding(name="position_encoding")
        self.embedding_dropout = Dropout(config.dropout, name="embedding_dropout")
        block_arguments = dict(
            num_heads=config.num_heads,
            intermediate_dim=config.intermediate_dim,
            dropout=config.dropout,
            attention_dropout=config.attention_dropout,
            activation=config.activation,
            layer_norm_epsilon=config.layer_norm_epsilon,
            kernel_initializer="glorot_uniform",
        )
        sequence_shape = (None, None, d_model)
        self.encoder_blocks = []
        for index in range(config.num_encoder_layers):
            block = TransformerEncoderBlock(name=f"encoder_block_{index}", **block_arguments)
            block.build(sequence_shape)
            self.encoder_blocks.append(block)
        self.decoder_blocks = []
        for index in range(config.num_decoder_layers):
            block = TransformerDecoderBlock(name=f"decoder_block_{index}", **block_arguments)
            block.build(sequence_shape, sequence_shape)
            self.decoder_blocks.append(block)
        self.built = True

    def _embed(self, embedding, token_ids, start_index=0, training=None):
        x = embedding(token_ids) * ops.cast(self.embedding_scale, self.compute_dtype)
        x = x + self.position_encoding(x, start_index=start_index)  # [B, T, d_model]
        return self.embedding_dropout(x, training=training)

    def encode_sequence(self, encoder_ids, encoder_mask, training=None):
        """The encoder output `[B, S, d_model]`."""
        x = self._embed(self.source_embedding or self.target_embedding, encoder_ids, 0, training)
        for block in self.encoder_blocks:
            x = block(x, padding_mask=encoder_mask, training=training)
        return x

    def call(self, inputs, training=None):
        missing = [name for name in SEQ2SEQ_INPUTS if name not in inputs]
        if missing:
            raise ValueError(f"The inputs lack {missing}; expected the keys {SEQ2SEQ_INPUTS}.")
        encoder_mask = inputs[ENCODER_MASK]
        encoded = self.encode_sequence(inputs[ENCODER_IDS], encoder_mask, training)
        x = self._embed(self.target_embedding, inputs[DECODER_IDS], 0, training)
        for block in self.decoder_blocks:
            x = block(
                x,
                encoded,
                decoder_padding_mask=inputs[DECODER_MASK],
                encoder_padding_mask=encoder_mask,
                training=training,
            )
        logits = self.target_embedding(x, reverse=True)  # [B, T, V]
        return ops.cast(logits, "float32")

    def encode(self, encoder_ids, encoder_mask, max_length=None):
        """The decoding state of the source batch (see the class docstring)."""
        max_length = max_length or self.config.max_decode_length
        encoded = self.encode_sequence(encoder_ids, encoder_mask, training=False)
        batch = ops.shape(encoder_ids)[0]
        return {
            ENCODER_MASK: ops.cast(encoder_mask, "int32"),
            "cross_caches": [
                block.compute_cross_attention_cache(encoded) for block in self.decoder_blocks
            ],
            "self_caches": [
                block.initial_cache(batch, max_length) for block in self.decoder_blocks
            ],
        }

    def decode_step(self, token_ids, state, step):
        """`(logits [B, V], new_state)` for `token_ids` `[B]` at position `step`."""
        x = self._embed(self.target_embedding, token_ids[:, None], step, training=False)
        self_caches = []
        for block, cache, cross_cache in zip(
            self.decoder_blocks, state["self_caches"], state["cross_caches"], strict=True
        ):
            x, cache, _ = block(
                x,
                encoder_padding_mask=state[ENCODER_MASK],
                self_attention_cache=cache,
                self_attention_cache_update_index=step,
                cross_attention_cache=cross_cache,
                training=False,
            )
            self_caches.append(cache)
        logits = ops.cast(self.target_embedding(x[:, 0], reverse=True), "float32")  # [B, V]
        return logits, {**state, "self_caches": self_caches}

    def get_config(self):
        return {"config": self.config.to_dict(), "name": self.name}

    @classmethod
    def from_config(cls, config):
        return cls(**config)


def transformer(config=None):
    """An encoder-decoder Transformer (`TransformerSeq2Seq`) for `config` (default: base)."""
    return TransformerSeq2Seq(config or TransformerConfig.base())
