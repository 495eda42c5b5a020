"""Fine-tuned task models out to Hugging Face: a `SequenceClassifier`, `TokenClassifier` or
`SpanPredictor` on a BERT, ALBERT or XLNet encoder written as the `*ForSequenceClassification`,
`*ForTokenClassification` or `*ForQuestionAnswering` folder that `transformers` loads with the
trained head."""

import math
import pathlib

import keras

from lmpipe.interop.hf.pretrained import (
    _HF_ACTIVATIONS,
    _albert_weight_map,
    _bert_weight_map,
    _hf_config,
    _linear,
    _write_checkpoint,
    _xlnet_weight_map,
)
from lmpipe.layers.activations import get_activation
from lmpipe.layers.bert_embedding import BertEmbedding
from lmpipe.layers.relative_position_encoding import RelativePositionEncoding
from lmpipe.layers.transformer_encoder_block import TransformerEncoderBlock
from lmpipe.layers.two_stream_relative_attention import TwoStreamRelativeAttention
from lmpipe.models.albert import AlbertConfig
from lmpipe.models.bert import BertConfig
from lmpipe.models.sequence_classifier import SequenceClassifier
from lmpipe.models.span_predictor import SpanPredictor
from lmpipe.models.token_classifier import TokenClassifier
from lmpipe.models.xlnet import XLNetConfig

# Per family: the checkpoint prefix of the encoder's weights and the class-name stem.
_FAMILIES = {
    "bert": ("bert.", "Bert"),
    "albert": ("albert.", "Albert"),
    "xlnet": ("transformer.", "XLNet"),
}

# Per task model: the architecture's suffix (XLNet's span model is the "Simple" one, start and
# end logits from one Linear; its `XLNetForQuestionAnswering` is the beam-search head).
_TASKS = {
    SequenceClassifier: "ForSequenceClassification",
    TokenClassifier: "ForTokenClassification",
    SpanPredictor: "ForQuestionAnswering",
}

# XLNet reads its relative positions with the sinusoids of the Transformer's wavelengths.
_XLNET_WAVELENGTH = 10000


def save_task_pretrained(directory, model, tokenizer=None, labels=None):
    """Write a fine-tuned task model as a Hugging Face folder that `transformers` loads with
    its trained head: `config.json`, `model.safetensors` and the tokenizer's files (as
    `lmpipe.interop.hf.save_pretrained` writes them).

    The encoder (a `bert()`, `albert()` or `xlnet()` model, its configuration read from its
    layers by `encoder_config_of`) and the head map onto Hugging Face's classes exactly:

    - `SequenceClassifier` -> `BertForSequenceClassification` / `AlbertForSequenceClassification`
      (the pooler, tanh on `[CLS]`, then dropout and `classifier`) or
      `XLNetForSequenceClassification` (the pooler is its "last" `sequence_summary` with the
      tanh projection, the head its `logits_proj`; it reads the last position, so inputs are
      padded on the left there, as XLNet's tokenizer pads);
    - `TokenClassifier` -> `*ForTokenClassification` (`classifier` on every token);
    - `SpanPredictor` -> `BertForQuestionAnswering` / `AlbertForQuestionAnswering` /
      `XLNetForQuestionAnsweringSimple` (`qa_outputs`: start logits, end logits). lmpipe sets
      the logits of padded positions to -1e9; Hugging Face leaves them to the caller's mask
      (its question-answering pipeline masks them), so the logits of real positions agree.

    The token and span models have no pooler (Hugging Face's build theirs without); config.json
    gets `architectures`, `num_labels`, `id2label` and `label2id` (classes and tags), the
    head's dropout (`classifier_dropout`, `classifier_dropout_prob` or `summary_last_dropout`)
    and, for classifiers, `problem_type` "single_label_classification" (softmax
    cross-entropy, as lmpipe trains).

    Args:
        directory: the folder to write (created; files in it are replaced).
        model: the `SequenceClassifier`, `TokenClassifier` or `SpanPredictor`.
        tokenizer: its `WordPieceTokenizer` or `SentencePieceTokenizer`, or None.
        labels: the class (or tag) names, one per class, as strings; None: "0", "1", ...
            Not for a `SpanPredictor`.

    Raises:
        ValueError: the model or its encoder has something Hugging Face's class cannot
            express (another encoder, a pooler in the head, a weight with no place); the
            message says which, and nothing is written.
    """
    architecture, entries, hf = task_checkpoint(model, tokenizer, labels)
    hf["architectures"] = [architecture]
    _write_checkpoint(pathlib.Path(directory), entries, hf, tokenizer)


def task_checkpoint(model, tokenizer=None, labels=None):
    """`(architecture, entries, config.json fields)` of `save_task_pretrained`: the checkpoint
    entries (name, variable, checkpoint shape, conversion) of every weight the Hugging Face
    class has, checked to cover every weight that reaches the model's outputs."""
    if not isinstance(model, tuple(_TASKS)):
        raise ValueError(
            "`model` must be a SequenceClassifier, TokenClassifier or SpanPredictor, got "
            f"{type(model).__name__}."
        )
    family, config = encoder_config_of(model.encoder)
    architecture, entries = _task_entries(model, family, config)
    _check_covered(model, entries, architecture)
    hf = _hf_config(config, tokenizer)
    hf.update(_head_fields(model, family, labels))
    return architecture, entries, hf


def _task_entries(model, family, config):
    """The architecture's name and the checkpoint entries of the encoder and the head."""
    prefix, stem = _FAMILIES[family]
    task = next(suffix for kind, suffix in _TASKS.items() if isinstance(model, kind))
    sequence = isinstance(model, SequenceClassifier)
    encoder, head, h = model.encoder, model.head, config.hidden_dim
    if family == "xlnet":
        entries = _xlnet_weight_map(encoder, config, pooler=sequence)
    else:
        weight_map = _albert_weight_map if family == "albert" else _bert_weight_map
        entries = weight_map(encoder, config)
        if not sequence:  # Hugging Face's token and span models are built without the pooler
            entries = [entry for entry in entries if not entry[0].startswith("pooler")]
    named = []
    for name, *rest in entries:
        if family == "xlnet" and name.startswith("pooler."):  # its "last" sequence summary
            name = "sequence_summary.summary." + name.removeprefix("pooler.")
        else:
            name = prefix + name
        named.append((name, *rest))
    if sequence:
        pooler = encoder.get_layer("pooler")
        if pooler.activation is not keras.activations.tanh or not pooler.use_bias:
            raise ValueError(
                f"{pooler.path} must be tanh(W h + b), as Hugging Face's {stem} pooler is."
            )
        if head.pooler_dense is not None:
            raise ValueError(
                "The classification head has a pooler of its own (`pooler_dim`): Hugging "
                f"Face's {stem}ForSequenceClassification has only the encoder's."
            )
        output = "logits_proj" if family == "xlnet" else "classifier"
        named += _linear(head.output_dense, output, model.num_classes, h)
    elif isinstance(model, TokenClassifier):
        named += _linear(head.output_dense, "classifier", model.num_classes, h)
    else:
        named += _linear(head.span_dense, "qa_outputs", 2, h)
        if family == "xlnet":
            task += "Simple"
    return stem + task, named


def _head_fields(model, family, labels):
    """config.json's fields for the head: the classes, the head's dropout, `problem_type`."""
    if isinstance(model, SpanPredictor):
        if labels is not None:
            raise ValueError("`labels` is for classifiers and taggers; a SpanPredictor has none.")
        return {}  # qa_outputs' two "labels" are Hugging Face's default num_labels
    names = _label_names(labels, model.num_classes)
    fields = {
        "num_labels": len(names),
        "id2label": {str(index): name for index, name in enumerate(names)},
        "label2id": {name: index for index, name in enumerate(names)},
    }
    sequence = isinstance(model, SequenceClassifier)
    dropout = float(model.dropout)
    if family == "bert":
        fields["classifier_dropout"] = dropout
    elif family == "albert":
        fields["classifier_dropout_prob"] = dropout
    elif sequence:
        fields.update(
            summary_type="last",
            summary_use_proj=True,
            summary_activation="tanh",
            summary_last_dropout=dropout,
        )
    if sequence:
        fields["problem_type"] = "single_label_classification"
    return fields


def _label_names(labels, num_classes):
    if labels is None:
        return [str(index) for index in range(num_classes)]
    if isinstance(labels, str):
        raise ValueError(f"`labels` must be a list of names, got {labels!r}.")
    names = list(labels)
    if len(names) != num_classes:
        raise ValueError(f"`labels` has {len(names)} names for {num_classes} classes.")
    if not all(isinstance(name, str) and name for name in names) or len(set(names)) < len(names):
        raise ValueError(f"`labels` must be distinct non-empty strings, got {names!r}.")
    return names


def _check_covered(model, entries, architecture):
    """Every weight that reaches `model`'s outputs must be written once, with the size the
    checkpoint shape says: otherwise the folder would load with other predictions."""
    for name, variable, shape, _ in entries:
        if math.prod(variable.shape) != math.prod(shape):
            raise ValueError(
                f"{variable.path} has shape {tuple(variable.shape)}, but {architecture}'s "
                f"{name!r} is {shape} by the encoder's configuration."
            )
    written = {id(variable) for _, variable, _, _ in entries}
    unused = set()
    if not isinstance(model, SequenceClassifier):  # token and span heads never read the pooler
        unused = {id(weight) for weight in model.encoder.get_layer("pooler").weights}
    left = [w.path for w in model.weights if id(w) not in written and id(w) not in unused]
    if left:
        raise ValueError(
            f"{len(left)} weight(s) of the model have no place in Hugging Face's {architecture}, "
            f"first {left[0]!r}: {left[:3]}."
        )


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
    for name in _HF_ACTIVATIONS:
        if get_activation(name) is block.activation:
            return name
    raise ValueError(
        f"{block.path}'s activation {block.activation!r} has no Hugging Face name; expected one "
        f"of {sorted(_HF_ACTIVATIONS)}."
    )


def _stddev(initializer):
    """The initializer's standard deviation, config.json's `initializer_range` (what
    `transformers` initializes new weights with; 0.02, BERT's, for other initializers)."""
    return float(getattr(initializer, "stddev", 0.02))
