"""BERT: configuration presets and the functional encoder."""

import dataclasses

import keras
from keras import ops

from lmpipe.arguments import (
    check_bool,
    check_heads,
    check_positive_integers,
    check_positive_numbers,
    check_rates,
)
from lmpipe.contract import PADDING_MASK, SEGMENT_IDS, TOKEN_IDS
from lmpipe.layers.bert_embedding import BertEmbedding
from lmpipe.layers.initializers import bert_initializer
from lmpipe.layers.layer_normalization import LayerNormalization
from lmpipe.layers.transformer_encoder_block import TransformerEncoderBlock
from lmpipe.models.presets import Presets


def _check_encoder_config(config):
    """Validate the fields BERT and ALBERT configs share; raise ValueError naming the field."""
    check_positive_integers(
        config,
        "vocabulary_size",
        "hidden_dim",
        "num_layers",
        "num_heads",
        "intermediate_dim",
        "max_sequence_length",
        "num_segments",
    )
    check_heads(config)
    check_rates(config, "dropout", "attention_dropout")
    check_positive_numbers(config, "layer_norm_epsilon", "initializer_range")


@dataclasses.dataclass(frozen=True)
class BertConfig(Presets):
    """Sizes and hyper-parameters of a BERT encoder; validated on creation.

    Presets: `tiny()`, `mini()` and `small()` (the L=2/H=128, L=4/H=256 and L=4/H=512 models
    of Turc et al., "Well-Read Students Learn Better", 2019), `base()` and `large()`
    (Devlin et al., 2019).
    Any field can be overridden: `BertConfig.base(vocabulary_size=8000)`.
    `normalize_first=True` makes the blocks pre-LN (layer normalization before attention and
    the feed-forward network, a final one after the last block): trainable at larger learning
    rates from the first step (Xiong et al., 2020; the cramming recipe), but not the layout of
    Hugging Face's BERT, so such an encoder is not written as a Hugging Face checkpoint.
    """

    vocabulary_size: int = 30522
    hidden_dim: int = 768
    num_layers: int = 12
    num_heads: int = 12
    intermediate_dim: int = 3072
    max_sequence_length: int = 512
    num_segments: int = 2
    dropout: float = 0.1
    attention_dropout: float = 0.1
    activation: str = "gelu"
    layer_norm_epsilon: float = 1e-12
    initializer_range: float = 0.02
    normalize_first: bool = False

    def __post_init__(self):
        _check_encoder_config(self)
        check_bool("normalize_first", self.normalize_first)

    @classmethod
    def tiny(cls, **overrides):
        """2 layers, hidden 128, 2 heads, FFN 512: for tests and quick experiments."""
        return cls.from_preset("tiny", **overrides)

    @classmethod
    def mini(cls, **overrides):
        """4 layers, hidden 256, 4 heads, FFN 1024 (BERT-mini): pretrains in minutes on a CPU."""
        return cls.from_preset("mini", **overrides)

    @classmethod
    def small(cls, **overrides):
        """4 layers, hidden 512, 8 heads, FFN 2048."""
        return cls.from_preset("small", **overrides)

    @classmethod
    def base(cls, **overrides):
        """BERT-base: 12 layers, hidden 768, 12 heads, FFN 3072 (110M parameters)."""
        return cls.from_preset("base", **overrides)

    @classmethod
    def large(cls, **overrides):
        """BERT-large: 24 layers, hidden 1024, 16 heads, FFN 4096 (340M parameters)."""
        return cls.from_preset("large", **overrides)

    def to_dict(self):
        """The fields as a plain dict (JSON-serializable)."""
        return dataclasses.asdict(self)


def encoder_inputs(max_sequence_length=None):
    """The named int32 inputs of every lmpipe encoder: token ids, segment ids, padding mask."""
    return {
        name: keras.Input(shape=(max_sequence_length,), dtype="int32", name=name)
        for name in (TOKEN_IDS, SEGMENT_IDS, PADDING_MASK)
    }


def encoder_outputs(inputs, embedding, blocks, config, name):
    """Wire embedding -> blocks -> pooler into a functional model with lmpipe's output dict."""
    x = embedding(inputs[TOKEN_IDS], inputs[SEGMENT_IDS])  # [B, S, H]
    for block in blocks:
        x = block(x, padding_mask=inputs[PADDING_MASK])
    if getattr(config, "normalize_first", False):  # pre-LN: the blocks' sum is not normalized
        x = LayerNormalization(epsilon=config.layer_norm_epsilon, name="final_norm")(x)
    # The pooler reads the final hidden state of [CLS] (position 0): tanh(W h_0 + b).
    cls_state = x[:, 0, :]  # [B, H]
    pooled = keras.layers.Dense(
        config.hidden_dim,
        activation="tanh",
        kernel_initializer=bert_initializer(config.initializer_range),
        name="pooler",
    )(cls_state)
    outputs = {"sequence_output": x, "pooled_output": pooled}
    return keras.Model(inputs, outputs, name=name)


def bert(config=None):
    """A BERT encoder as a functional `keras.Model`.

    Inputs: a dict of int32 `[B, S]` tensors `token_ids`, `segment_ids`, `padding_mask`
    (1 = real token). Outputs: a dict with `sequence_output` `[B, S, H]` and
    `pooled_output` `[B, H]` (tanh pooler over the `[CLS]` state).

    The embedding layer is named `embedding` (its token table, `embedding.token_embedding`,
    is what a masked-LM head ties to) and the blocks `block_0 .. block_{L-1}`.
    """
    config = config or BertConfig.base()
    initializer = bert_initializer(config.initializer_range)
    embedding = BertEmbedding(
        config.vocabulary_size,
        config.hidden_dim,
        max_sequence_length=config.max_sequence_length,
        num_segments=config.num_segments,
        dropout=config.dropout,
        layer_norm_epsilon=config.layer_norm_epsilon,
        initializer=initializer,
        name="embedding",
    )
    blocks = [
        TransformerEncoderBlock(
            config.num_heads,
            config.intermediate_dim,
            dropout=config.dropout,
            attention_dropout=config.attention_dropout,
            activation=config.activation,
            layer_norm_epsilon=config.layer_norm_epsilon,
            normalize_first=config.normalize_first,
            kernel_initializer=initializer,
            name=f"block_{index}",
        )
        for index in range(config.num_layers)
    ]
    return encoder_outputs(encoder_inputs(), embedding, blocks, config, name="bert")


def count_parameters(model):
    """Number of distinct parameters of `model` (shared variables counted once; integer
    tables, such as ELMo's token spellings, are state rather than parameters)."""
    unique = {id(v): v for v in model.weights if keras.backend.is_float_dtype(v.dtype)}
    return int(sum(ops.size(variable) for variable in unique.values()))
