"""GPT: configuration presets and the decoder-only causal language model, with a KV cache."""

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
from lmpipe.contract import DOCUMENT_IDS, NEXT_IDS, PADDING_MASK, TOKEN_IDS, WEIGHTS
from lmpipe.layers.attention_mask import attention_mask, document_mask
from lmpipe.layers.dropout import Dropout
from lmpipe.layers.initializers import gpt2_initializer
from lmpipe.layers.layer_normalization import LayerNormalization
from lmpipe.layers.transformer_decoder_block import TransformerDecoderBlock
from lmpipe.models.losses import masked_cross_entropy
from lmpipe.models.presets import Presets
from lmpipe.models.trainable import FunctionalTrainableModel


@dataclasses.dataclass(frozen=True)
class GptConfig(Presets):
    """Sizes and hyper-parameters of a GPT decoder; validated on creation.

    Presets: `tiny()` for tests, `small()` (= `base()`) with GPT-2 small's sizes (12 layers,
    hidden 768, 12 heads, FFN 3072, 1024 positions: 124,439,808 parameters with its
    50,257-token vocabulary and the tied head), `medium()` (GPT-2 medium, 24 layers, 1024).
    Any field can be overridden: `GptConfig.small(vocabulary_size=30522)`.

    Reference: Radford et al., "Language Models are Unsupervised Multitask Learners", 2019.
    """

    vocabulary_size: int = 50257
    hidden_dim: int = 768
    num_layers: int = 12
    num_heads: int = 12
    intermediate_dim: int = 3072
    max_sequence_length: int = 1024
    dropout: float = 0.1
    activation: str = "gelu_approximate"
    layer_norm_epsilon: float = 1e-5
    initializer_range: float = 0.02

    def __post_init__(self):
        check_positive_integers(
            self,
            "vocabulary_size",
            "hidden_dim",
            "num_layers",
            "num_heads",
            "intermediate_dim",
            "max_sequence_length",
        )
        check_heads(self)
        check_rates(self, "dropout")
        check_positive_numbers(self, "layer_norm_epsilon", "initializer_range")

    @classmethod
    def tiny(cls, **overrides):
        """2 layers, hidden 32, 2 heads, FFN 64, 128 positions: for tests and quick runs."""
        return cls.from_preset("tiny", **overrides)

    @classmethod
    def small(cls, **overrides):
        """GPT-2 small: 12 layers, hidden 768, 12 heads, FFN 3072, 1024 positions (124M)."""
        return cls.from_preset("small", **overrides)

    base = small

    @classmethod
    def medium(cls, **overrides):
        """GPT-2 medium: 24 layers, hidden 1024, 16 heads, FFN 4096 (355M parameters)."""
        return cls.from_preset("medium", **overrides)

    def to_dict(self):
        """The fields as a plain dict (JSON-serializable)."""
        return dataclasses.asdict(self)


def position_ids(padding_mask, document_ids=None):
    """Position of each token among the real tokens of its row: `cumsum(mask) - 1`, >= 0;
    with `document_ids`, among the earlier tokens of its document (from 0 at each document's
    start), so that a document packed after others is read at the positions it has alone.

    Counting real tokens rather than slots lets a left-padded prompt start at position 0, as
    the same prompt alone would (see `lmpipe.models.samplers.causal_lm`).

    Args:
        padding_mask: int `[B, S]`, 1 = real token.
        document_ids: None, or int `[B, S]`: each token's document, 0 on padding.

    >>> position_ids(ops.convert_to_tensor([[1, 1, 1, 1, 0]]),
    ...              ops.convert_to_tensor([[1, 1, 2, 2, 0]])).numpy().tolist()
    [[0, 1, 0, 1, 3]]
    """
    mask = ops.cast(padding_mask, "int32")
    counted = ops.maximum(ops.cumsum(mask, axis=1) - 1, 0)  # [B, S]
    if document_ids is None:
        return counted
    # The tokens of i's document up to key i: the running count of its row of the mask, read
    # on the diagonal (shape-free, as a functional model's graph needs).
    same = ops.cast(document_mask(document_ids), "int32")  # [B, S, S]
    within = ops.diagonal(ops.cumsum(same, axis=2), axis1=1, axis2=2) - 1  # [B, S]
    return ops.where(ops.cast(document_ids, "int32") > 0, within, counted)


def self_attention_mask(padding_mask, document_ids):
    """What GPT's self-attention lets each position see: `[B, S, S]` boolean, True where query
    `i` may attend to key `j`: `j <= i`, `j` a real token, and `j` in `i`'s document (a padded
    query keeps the causal and padding rules only). The model gives its blocks the document
    part (`document_mask`), and their attention adds the rest, as here.

    Args:
        padding_mask: int `[B, S]`, 1 = real token.
        document_ids: int `[B, S]`: each token's document, 0 on padding (`padding_mask` for
            one document per row).

    >>> mask = self_attention_mask(ops.convert_to_tensor([[1, 1, 1, 0]]),
    ...                            ops.convert_to_tensor([[1, 2, 2, 0]]))
    >>> ops.cast(mask, "int32").numpy()[0].tolist()
    [[1, 0, 0, 0], [0, 1, 0, 0], [0, 1, 1, 0], [1, 1, 1, 0]]
    """
    # What each block's attention combines: its padding and causal rules, and the model's
    # document mask.
    documents = document_mask(document_ids)  # [B, S, S]
    return attention_mask(
        ops.shape(padding_mask)[1],
        ops.shape(padding_mask)[1],
        padding_mask=padding_mask,
        attention_mask=documents,
        causal=True,
    )


@keras.saving.register_keras_serializable(package="lmpipe")
class GptCausalLM(FunctionalTrainableModel):
    """A decoder-only Transformer language model (GPT-2's architecture) and its loss.

        h_0 = W_e[token_ids] + W_p[positions]
        h_l = TransformerDecoderBlock_l(h_{l-1})     # pre-LN, causal self-attention only
        logits = LayerNorm(h_L) W_e^T                # the head is the token embedding (tied)

    Inputs: a dict of int32 `[B, S]` `token_ids` and `padding_mask` (1 = real token), and
    optionally `document_ids` (the document of each token in a row that packs several,
    numbered from 1, 0 on padding). Output: float32 logits `[B, S, V]`; `logits[:, t]` scores
    the token after position `t` and depends on the tokens at positions `<= t` only, and with
    `document_ids` on those of its own document only. Positions count the real tokens of a
    row (`position_ids`), so padding may be on either side; with `document_ids`, the tokens of
    the document, so each document of a row is read as if it were alone. Without
    `document_ids` a row is one document (`padding_mask` stands for them): GPT-2's reading,
    what generation, exports and Hugging Face checkpoints see.

    Loss (`compute_loss`, with the labels of the causal LM contract `next_ids`, `weights`):
    the weighted mean next-token cross-entropy, over the global batch under a distribution
    strategy. Metrics: `next_token_loss`, `next_token_accuracy`.

    Initialization (GPT-2's): plain normals of mean 0, untruncated. Standard deviation
    `initializer_range` (0.02) for the token embedding and every kernel, except the kernels
    that add to the residual stream (each block's attention output projection and FFN
    `W_2`: `initializer_range / sqrt(2 * num_layers)`, as Hugging Face's GPT-2) and the
    position embedding (`initializer_range / 2`: 0.01, as OpenAI's GPT-2 code); biases 0,
    LayerNorm scales 1 and offsets 0.

    Incremental decoding: `initial_cache(batch_size, max_length)` and `call_with_cache`
    (see `lmpipe.models.samplers.generate`).

    Args:
        config: a `GptConfig` (or its dict).

    Example:

    >>> model = GptCausalLM(GptConfig.tiny(vocabulary_size=100))
    >>> ids = keras.ops.ones((2, 7), "int32")
    >>> tuple(model({"token_ids": ids, "padding_mask": ids}).shape)
    (2, 7, 100)

    Reference: Radford et al., "Improving Language Understanding by Generative Pre-Training",
    2018; "Language Models are Unsupervised Multitask Learners", 2019 (pre-LN, section 2.3).
    """

    def __init__(self, config=None, **kwargs):
        if isinstance(config, dict):
            config = GptConfig(**config)
        config = config or GptConfig.small()
        if not isinstance(config, GptConfig):
            raise ValueError(f"`config` must be a GptConfig, got {config!r}.")
        initializer = gpt2_initializer(config.initializer_range)
        inputs = {
            name: keras.Input(shape=(None,), dtype="int32", name=name)
            for name in (TOKEN_IDS, PADDING_MASK, DOCUMENT_IDS)
        }
        token_embedding = keras.layers.ReversibleEmbedding(
            config.vocabulary_size,
            config.hidden_dim,
            tie_weights=True,
            embeddings_initializer=initializer,
            name="token_embedding",
        )
        position_embedding = keras.layers.Embedding(
            config.max_sequence_length,
            config.hidden_dim,
            # OpenAI's GPT-2 code draws the position table at half the tokens' scale.
            embeddings_initializer=gpt2_initializer(config.initializer_range / 2),
            name="position_embedding",
        )
        embedding_dropout = Dropout(config.dropout, name="embedding_dropout")
        blocks = [
            TransformerDecoderBlock(
                config.num_heads,
                config.intermediate_dim,
                dropout=config.dropout,
                activation=config.activation,
                normalize_first=True,
                layer_norm_epsilon=config.layer_norm_epsilon,
                kernel_initializer=gpt2_initializer(config.initializer_range),
                # GPT-2 (section 2.3) scales the weights of the layers that add to the
                # residual stream by 1/sqrt(N), N = 2 per block, so its variance does not
                # grow with depth.
                residual_kernel_initializer=gpt2_initializer(
                    config.initializer_range / math.sqrt(2 * config.num_layers)
                ),
                name=f"block_{index}",
            )
            for index in range(config.num_layers)
        ]
        final_layer_norm = LayerNormalization(
            epsilon=config.layer_norm_epsilon, name="final_layer_norm"
        )

        # Causal AND same document: a token never sees another document of its row.
        documents = document_mask(inputs[DOCUMENT_IDS])  # [B, S, S]
        positions = position_ids(inputs[PADDING_MASK], inputs[DOCUMENT_IDS])
        x = token_embedding(inputs[TOKEN_IDS]) + position_embedding(positions)  # [B, S, H]
        x = embedding_dropout(x)
        for block in blocks:
            x = block(
                x, decoder_padding_mask=inputs[PADDING_MASK], decoder_attention_mask=documents
            )
        x = final_layer_norm(x)
        logits = ops.cast(token_embedding(x, reverse=True), "float32")  # [B, S, V]
        super().__init__(inputs=inputs, outputs=logits, **kwargs)

        self.config = config
        self.token_embedding = token_embedding
        self.position_embedding = position_embedding
        self.blocks = blocks
        self.final_layer_norm = final_layer_norm
        self.loss_tracker = keras.metrics.Mean(name="next_token_loss")
        self.accuracy_tracker = keras.metrics.Mean(name="next_token_accuracy")

    def __call__(self, inputs, *args, **kwargs):
        if isinstance(inputs, dict) and DOCUMENT_IDS not in inputs and PADDING_MASK in inputs:
            # One document per row: the real tokens (the same mask and positions as without
            # documents).
            inputs = {**inputs, DOCUMENT_IDS: inputs[PADDING_MASK]}
        return super().__call__(inputs, *args, **kwargs)

    # Decoding ---------------------------------------------------------------------------------

    def initial_cache(self, batch_size, max_length):
        """Zeros `[batch_size, num_layers, 2, max_length, num_heads, head_dim]`: every block's
        key/value cache, stacked so that one tensor carries them through a loop."""
        config = self.config
        head_dim = config.hidden_dim // config.num_heads
        shape = (batch_size, config.num_layers, 2, max_length, config.num_heads, head_dim)
        return ops.zeros(shape, dtype=self.compute_dtype)

    def call_with_cache(self, token_ids, positions, cache_padding_mask, cache, cache_update_index):
        """Logits of new tokens given the cached keys and values of the earlier ones.

        Args:
            token_ids: int32 `[B, T]`, the new tokens (the whole prompt, or one token).
            positions: int32 `[B, T]`, their positions (see `position_ids`).
            cache_padding_mask: `[B, max_length]`, 1 on cache slots holding real tokens (and
                on the slots still to be filled by real tokens).
            cache: from `initial_cache` or the previous call.
            cache_update_index: the cache slot of `token_ids[:, 0]` (int or scalar tensor).

        Returns:
            `(logits, cache)`: float32 `[B, T, V]` and the updated cache.
        """
        x = self.token_embedding(token_ids) + self.position_embedding(positions)  # [B, T, H]
        caches = []
        for index, block in enumerate(self.blocks):
            x, block_cache, _ = block(
                x,
                decoder_padding_mask=cache_padding_mask,
                self_attention_cache=cache[:, index],
                self_attention_cache_update_index=cache_update_index,
                training=False,
            )
            caches.append(block_cache)
        x = self.final_layer_norm(x)
        logits = ops.cast(self.token_embedding(x, reverse=True), "float32")  # [B, T, V]
        return logits, ops.stack(caches, axis=1)

    # Training ---------------------------------------------------------------------------------

    def loss_weights(self, x, y):
        """`{term: weights}`: the real next tokens."""
        del x
        return {"next": y[WEIGHTS]}

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        del sample_weight, training
        return masked_cross_entropy(
            y[NEXT_IDS],
            y_pred,
            self.loss_weights(x, y)["next"],
            self.loss_tracker,
            self.accuracy_tracker,
            term="next",
        )

    def get_config(self):
        return {"config": self.config.to_dict(), "name": self.name}

    @classmethod
    def from_config(cls, config):
        return cls(**config)


def gpt(config=None):
    """A GPT causal language model (`GptCausalLM`) for `config` (default: GPT-2 small).

    Example:

    >>> model = gpt(GptConfig.tiny(vocabulary_size=100))
    >>> [layer.name for layer in model.blocks]
    ['block_0', 'block_1']
    """
    return GptCausalLM(config)
