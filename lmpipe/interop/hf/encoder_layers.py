"""An lmpipe encoder's configuration read back from its layers: the `BertConfig`,
`AlbertConfig` or `XLNetConfig` that a Hugging Face config.json describes it by (fine-tuning
pipelines hold the encoder alone)."""

from lmpipe.interop.hf.checkpoint import HF_ACTIVATIONS
from lmpipe.layers.activations import get_activation
from lmpipe.layers.bert_embedding import BertEmbedding
from lmpipe.layers.relative_position_encoding import RelativePositionEncoding
from lmpipe.layers.transformer_encoder_block import TransformerEncoderBlock
from lmpipe.layers.two_stream_relative_attention import TwoStreamRelativeAttention
from lmpipe.models.albert import AlbertConfig
from lmpipe.models.bert import BertConfig
from lmpipe.models.xlnet import XLNetConfig

# XLNet reads its relative positions with the sinusoids of the Transformer's wavelengths.
_XLNET_WAVELENGTH = 10000


def encoder_config_of(encoder):
    """`(family, config)` of an lmpipe encoder model, read from its layers: ("bert",
    `BertConfig`) for a `bert()` model, ("albert", `AlbertConfig`) for `albert()`, ("xlnet",
    `XLNetConfig`) for `xlnet()`'s content stream. Fine-tuning pipelines hold the encoder
    alone; this is the configuration Hugging Face's config.json describes it by.

    Raises:
        ValueError: `encoder` is none of these (or its layers differ from one another, or use
            an activation Hugging Face has no name for); the message says what.
    """
    names = {layer.name for layer in encoder.layers}
    if {"word_embedding", "position_encoding", "pooler", "block_0"} <= names:
        return "xlnet", _xlnet_config_of(encoder)
    if {"embedding", "pooler"} <= names and ("block_0" in names or "shared_block" in names):
        return _bert_family_config_of(encoder)
    raise ValueError(
        f"The encoder {encoder.name!r} is not an lmpipe BERT, ALBERT or XLNet encoder (a "
        "bert(), albert() or xlnet() model): Hugging Face has no architecture to write it as."
    )


def _blocks(encoder, kind):
    blocks = []
    while f"block_{len(blocks)}" in {layer.name for layer in encoder.layers}:
        blocks.append(encoder.get_layer(f"block_{len(blocks)}"))
    for block in blocks:
        if not isinstance(block, kind):
            raise ValueError(f"{block.path} is a {type(block).__name__}, not a {kind.__name__}.")
    return blocks


def _bert_family_config_of(encoder):
    embedding = encoder.get_layer("embedding")
    if not isinstance(embedding, BertEmbedding):
        raise ValueError(f"{embedding.path} is a {type(embedding).__name__}, not a BertEmbedding.")
    albert_encoder = embedding.embedding_dim is not None
    if albert_encoder:
        shared = encoder.get_layer("shared_block")
        if not isinstance(shared, TransformerEncoderBlock):
            raise ValueError(f"{shared.path} is a {type(shared).__name__}, not a block.")
        layers = encoder.get_config()["layers"]
        calls = [len(layer["inbound_nodes"]) for layer in layers if layer["name"] == shared.name]
        blocks, num_layers = [shared], calls[0]
    else:
        blocks = _blocks(encoder, TransformerEncoderBlock)
        num_layers = len(blocks)
    fields = _block_fields(blocks, embedding.layer_norm_epsilon)
    if any(block.normalize_first or block.window is not None for block in blocks):
        raise ValueError(
            "The encoder's blocks normalize first or attend within a window; Hugging Face's "
            "BERT and ALBERT are post-LayerNorm with full attention."
        )
    fields.update(
        vocabulary_size=embedding.vocabulary_size,
        hidden_dim=embedding.hidden_dim,
        num_layers=num_layers,
        max_sequence_length=embedding.max_sequence_length,
        num_segments=embedding.num_segments,
        initializer_range=_stddev(embedding.initializer),
    )
    if albert_encoder:
        return "albert", AlbertConfig(embedding_dim=embedding.embedding_dim, **fields)
    return "bert", BertConfig(**fields)


def _xlnet_config_of(encoder):
    blocks = _blocks(encoder, TwoStreamRelativeAttention)
    positions = encoder.get_layer("position_encoding")
    if not isinstance(positions, RelativePositionEncoding) or (
        positions.max_wavelength != _XLNET_WAVELENGTH
    ):
        raise ValueError(
            f"{positions.path} must be a RelativePositionEncoding of wavelength "
            f"{_XLNET_WAVELENGTH}, as XLNet's."
        )
    words = encoder.get_layer("word_embedding")
    fields = _block_fields(blocks, blocks[0].layer_norm_epsilon)
    return XLNetConfig(
        vocabulary_size=words.input_dim,
        hidden_dim=words.output_dim,
        num_layers=len(blocks),
        clamp_len=positions.clamp_len,
        initializer_range=_stddev(words.embeddings_initializer),
        **fields,
    )


def _block_fields(blocks, layer_norm_epsilon):
    """The config fields every block must share (and the embedding's LayerNorm epsilon)."""
    fields = [
        {
            "num_heads": block.num_heads,
            "intermediate_dim": block.intermediate_dim,
            "dropout": block.dropout,
            "attention_dropout": block.attention_dropout,
            "activation": _activation_name(block),
            "layer_norm_epsilon": block.layer_norm_epsilon,
        }
        for block in blocks
    ]
    for block, block_fields in zip(blocks, fields, strict=True):
        if block_fields != fields[0] or block.layer_norm_epsilon != layer_norm_epsilon:
            raise ValueError(
                f"{block.path} differs from the encoder's other layers ({block_fields} against "
                f"{fields[0]}, LayerNorm epsilon {layer_norm_epsilon}); a Hugging Face "
                "config.json describes every layer alike."
            )
    return fields[0]


def _activation_name(block):
    for name in HF_ACTIVATIONS:
        if get_activation(name) is block.activation:
            return name
    raise ValueError(
        f"{block.path}'s activation {block.activation!r} has no Hugging Face name; expected one "
        f"of {sorted(HF_ACTIVATIONS)}."
    )


def _stddev(initializer):
    """The initializer's standard deviation, config.json's `initializer_range` (what
    `transformers` initializes new weights with; 0.02, BERT's, for other initializers)."""
    return float(getattr(initializer, "stddev", 0.02))
