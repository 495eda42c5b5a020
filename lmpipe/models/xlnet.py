"""XLNet: configuration presets and the functional content-stream / two-stream models."""

import dataclasses

import keras
from keras import ops

from lmpipe.arguments import (
    check_bool,
    check_heads,
    check_positive_int,
    check_positive_integers,
    check_positive_numbers,
    check_rates,
)
from lmpipe.contract import PADDING_MASK, PERM_MASK, SEGMENT_IDS, TARGET_MAPPING, TOKEN_IDS
from lmpipe.layers.dropout import Dropout
from lmpipe.layers.initializers import clone_initializer
from lmpipe.layers.relative_position_encoding import RelativePositionEncoding
from lmpipe.layers.two_stream_relative_attention import TwoStreamRelativeAttention
from lmpipe.models.presets import Presets


@dataclasses.dataclass(frozen=True)
class XLNetConfig(Presets):
    """Sizes and hyper-parameters of an XLNet encoder; validated on creation.

    Presets: `tiny()` (2 layers, d_model 128) for tests and quick experiments and `base()`
    (Yang et al., 2019: 12 layers, d_model 768, 12 heads, FFN 3072, vocabulary 32,000,
    GELU). Any field can be overridden: `XLNetConfig.base(vocabulary_size=8000)`.
    Positions are relative, so there is no maximum sequence length; `clamp_len` (None = no
    clamping) bounds the distances that are told apart.
    """

    vocabulary_size: int = 32000
    hidden_dim: int = 768
    num_layers: int = 12
    num_heads: int = 12
    intermediate_dim: int = 3072
    dropout: float = 0.1
    attention_dropout: float = 0.1
    activation: str = "gelu"
    layer_norm_epsilon: float = 1e-12
    initializer_range: float = 0.02
    clamp_len: int | None = None

    def __post_init__(self):
        check_positive_integers(
            self,
            "vocabulary_size",
            "hidden_dim",
            "num_layers",
            "num_heads",
            "intermediate_dim",
            optional=("clamp_len",),
        )
        check_heads(self)
        if self.hidden_dim % 2:
            raise ValueError(f"`hidden_dim` must be even, got hidden_dim={self.hidden_dim}.")
        check_rates(self, "dropout", "attention_dropout")
        check_positive_numbers(self, "layer_norm_epsilon", "initializer_range")

    @classmethod
    def tiny(cls, **overrides):
        """2 layers, d_model 128, 2 heads, FFN 512: for tests and quick experiments."""
        return cls.from_preset("tiny", **overrides)

    @classmethod
    def base(cls, **overrides):
        """XLNet-base: 12 layers, d_model 768, 12 heads, FFN 3072, vocabulary 32,000."""
        return cls.from_preset("base", **overrides)

    def to_dict(self):
        """The fields as a plain dict (JSON-serializable)."""
        return dataclasses.asdict(self)


def cache_memory(memory, layer_inputs, mem_len, reuse_len=None):
    """Transformer-XL's memory update: the last `mem_len` of `memory ++ layer_inputs`.

    With `reuse_len` only the first `reuse_len` positions of this segment are cached, as in
    XLNet's pretraining (the rest of the segment is not continued by the next one). The
    result carries no gradient: the next segment reads it as a constant.

    Args:
        memory: `[B, M, ...]` the current memory (M may be 0), or None.
        layer_inputs: `[B, S, ...]` this segment's inputs of the layer (or its padding mask).
        mem_len: length of the new memory.
        reuse_len: if set, how many leading positions of the segment are cached.

    Returns:
        `[B, min(mem_len, M + S'), ...]` with `S' = min(S, reuse_len)`.
    """
    if reuse_len is not None:
        layer_inputs = layer_inputs[:, :reuse_len]
    if memory is not None:
        layer_inputs = ops.concatenate([ops.cast(memory, layer_inputs.dtype), layer_inputs], 1)
    return ops.stop_gradient(layer_inputs[:, -mem_len:])


def check_memory_arguments(mem_len, reuse_len):
    """Raise unless `mem_len` is a non-negative int and `reuse_len` None or a positive int."""
    # Inline to keep the wording "a non-negative integer", which the command line shows as
    # "--mem-len must be a non-negative integer" (check_number says "an integer >= 0").
    if isinstance(mem_len, bool) or not isinstance(mem_len, int) or mem_len < 0:
        raise ValueError(f"`mem_len` must be a non-negative integer, got mem_len={mem_len!r}.")
    check_positive_int("reuse_len", reuse_len, none=True)


def _last_real_token(sequence, padding_mask):
    """`[B, H]`: the state at the last real position of each row (XLNet's <cls>)."""
    padding_mask = ops.cast(padding_mask, "int32")
    # The functional graph has no static length: positions 0..S-1 as a cumulative sum.
    positions = ops.cumsum(ops.ones_like(padding_mask), axis=1) - 1  # [B, S]
    last = ops.max(positions * padding_mask, axis=1)  # [B]
    return ops.take_along_axis(sequence, last[:, None, None], axis=1)[:, 0, :]


def _wire(layers, config, two_stream, mem_len, reuse_len, bi_data=False):
    """Connect `layers` (the dict made by `_xlnet_layers`) into a functional model."""
    inputs = {
        name: keras.Input(shape=(None,), dtype="int32", name=name)
        for name in (TOKEN_IDS, SEGMENT_IDS, PADDING_MASK)
    }
    if two_stream:
        inputs[PERM_MASK] = keras.Input(shape=(None, None), dtype="float32", name=PERM_MASK)
        inputs[TARGET_MAPPING] = keras.Input(
            shape=(None, None), dtype="float32", name=TARGET_MAPPING
        )
    memories = [None] * config.num_layers
    memory_mask = None
    if mem_len:
        inputs["memory"] = keras.Input(
            shape=(config.num_layers, None, config.hidden_dim), dtype="float32", name="memory"
        )
        inputs["memory_mask"] = keras.Input(shape=(None,), dtype="int32", name="memory_mask")
        memories = [inputs["memory"][:, index] for index in range(config.num_layers)]
        memory_mask = inputs["memory_mask"]
    dropout = Dropout(config.dropout)

    content = dropout(layers["word_embedding"](inputs[TOKEN_IDS]))  # [B, S, H]
    query = None
    if two_stream:
        # Every prediction starts from the same learned state, XLNet's `mask_emb` (a one-row
        # embedding table): the query stream must not see the token it predicts.
        zeros = ops.zeros_like(inputs[TARGET_MAPPING][:, :, 0], dtype="int32")  # [B, P]
        query = dropout(layers["mask_embedding"](zeros))  # [B, P, H]
    position_encoding = dropout(
        layers["position_encoding"](content, memory=memories[0], bi_data=bi_data)
    )  # [K + Q, H], or [B, K + Q, H] with bi_data
    new_memories = []
    for index, block in enumerate(layers["blocks"]):
        if mem_len:
            new_memories.append(cache_memory(memories[index], content, mem_len, reuse_len))
        outputs = block(
            content,
            position_encoding,
            query=query,
            target_mapping=inputs.get(TARGET_MAPPING),
            segment_ids=inputs[SEGMENT_IDS],
            padding_mask=inputs[PADDING_MASK],
            perm_mask=inputs.get(PERM_MASK),
            memory=memories[index],
            memory_mask=memory_mask,
        )
        content, query = outputs if two_stream else (outputs, None)
    sequence_output = dropout(content)
    summary = _last_real_token(sequence_output, inputs[PADDING_MASK])
    outputs = {
        "sequence_output": sequence_output,
        "pooled_output": layers["pooler"](summary),
    }
    if two_stream:
        outputs["query_output"] = dropout(query)
    if mem_len:
        outputs["new_memory"] = ops.stack(new_memories, axis=1)  # [B, L, mem_len, H]
        outputs["new_memory_mask"] = cache_memory(
            memory_mask, ops.cast(inputs[PADDING_MASK], "int32"), mem_len, reuse_len
        )
    return keras.Model(inputs, outputs, name="xlnet")


def _xlnet_layers(config):
    initializer = keras.initializers.RandomNormal(stddev=config.initializer_range)
    return {
        "word_embedding": keras.layers.Embedding(
            config.vocabulary_size,
            config.hidden_dim,
            embeddings_initializer=clone_initializer(initializer),
            name="word_embedding",
        ),
        "mask_embedding": keras.layers.Embedding(
            1,
            config.hidden_dim,
            embeddings_initializer=clone_initializer(initializer),
            name="mask_embedding",
        ),
        "position_encoding": RelativePositionEncoding(
            config.hidden_dim, clamp_len=config.clamp_len, name="position_encoding"
        ),
        "blocks": [
            TwoStreamRelativeAttention(
                config.num_heads,
                config.intermediate_dim,
                dropout=config.dropout,
                attention_dropout=config.attention_dropout,
                activation=config.activation,
                layer_norm_epsilon=config.layer_norm_epsilon,
                kernel_initializer=clone_initializer(initializer),
                name=f"block_{index}",
            )
            for index in range(config.num_layers)
        ],
        "pooler": keras.layers.Dense(
            config.hidden_dim,
            activation="tanh",
            kernel_initializer=clone_initializer(initializer),
            name="pooler",
        ),
    }


def xlnet(config=None, two_stream=False, mem_len=0, reuse_len=None, bi_data=False):
    """An XLNet encoder as a functional `keras.Model`.

    Content stream alone (`two_stream=False`, fine-tuning and serving): inputs int32 `[B, S]`
    `token_ids`, `segment_ids` (A = 0, B = 1, <cls> = 2) and `padding_mask` (1 = real
    token), every real token visible to every other; outputs `sequence_output` `[B, S, H]`
    and `pooled_output` `[B, H]`, `tanh(W h + b)` of the last real token (the <cls> that
    XLNet puts last; XLNet's "last" sequence summary with its projection).

    `two_stream=True` adds the permutation-LM inputs `perm_mask` float32 `[B, S, S]` (1 =
    position i may attend to position j in the query stream; the content stream also sees
    itself) and `target_mapping` float32 `[B, P, S]` (one-hot rows, zero rows = padding),
    and the output `query_output` `[B, P, H]`, the query stream at the targets. The data's
    `masked_tokens` is the column sum of `target_mapping` and is not an input.

    `mem_len > 0` adds Transformer-XL memory: inputs `memory` float32 `[B, L, M, H]` (the
    cached inputs of each of the L layers) and `memory_mask` int32 `[B, M]` (1 = visible to
    every query), outputs `new_memory` `[B, L, mem_len, H]` and `new_memory_mask`: the last
    `mem_len` of memory ++ this segment (only its first `reuse_len` positions, if set),
    without gradient. Memory positions count as segment 0, as in XLNet.

    `bi_data=True` is XLNet's `bi_data` (Hugging Face's `XLNetConfig.bi_data`): the first
    half of every batch (rows `0 .. B // 2 - 1`) is text read forward, the second half text
    read backward, and the backward rows get the negated relative distances (see
    `RelativePositionEncoding`), so that reversed text keeps its real geometry. The batch
    size should then be even (an odd batch gives the backward half the extra row).

    Layers are named `word_embedding` (the table an LM head ties to), `mask_embedding`
    (XLNet's `mask_emb`, only in the two-stream model), `position_encoding`,
    `block_0 .. block_{L-1}` and `pooler`. `xlnet_content_stream(model)` gives the content
    stream model of any of these models, sharing its weights.

    Args:
        config: an `XLNetConfig`; `XLNetConfig.base()` by default.
        two_stream: add the query stream.
        mem_len: memory length (0 = no memory).
        reuse_len: cache only the first `reuse_len` positions of each segment.
        bi_data: the second half of each batch reads backward (pretraining data only).

    Example:

    >>> model = xlnet(XLNetConfig.tiny(vocabulary_size=100, hidden_dim=16, intermediate_dim=32))
    >>> ids = keras.ops.array([[5, 6, 7, 4, 3]])
    >>> outputs = model({"token_ids": ids, "segment_ids": keras.ops.array([[0, 0, 0, 0, 2]]),
    ...                  "padding_mask": keras.ops.ones((1, 5), "int32")})
    >>> tuple(outputs["sequence_output"].shape), tuple(outputs["pooled_output"].shape)
    ((1, 5, 16), (1, 16))

    Reference: Yang et al., "XLNet: Generalized Autoregressive Pretraining for Language
    Understanding", 2019; Dai et al., "Transformer-XL", 2019 (memory).
    """
    config = config or XLNetConfig.base()
    if not isinstance(config, XLNetConfig):
        raise ValueError(f"`config` must be an XLNetConfig, got {config!r}.")
    check_memory_arguments(mem_len, reuse_len)
    check_bool("bi_data", bi_data)
    return _wire(_xlnet_layers(config), config, two_stream, mem_len, reuse_len, bi_data)


def xlnet_content_stream(model, config):
    """The content-stream model (`token_ids`, `segment_ids`, `padding_mask` -> dict) that
    shares the weights of `model`, a model made by `xlnet(config, ...)`; every row reads
    forward (no `bi_data`), as fine-tuning and serving need."""
    layers = {
        name: model.get_layer(name) for name in ("word_embedding", "position_encoding", "pooler")
    }
    layers["blocks"] = [model.get_layer(f"block_{index}") for index in range(config.num_layers)]
    return _wire(layers, config, two_stream=False, mem_len=0, reuse_len=None)
