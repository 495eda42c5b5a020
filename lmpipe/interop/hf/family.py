"""What one Hugging Face model type is to lmpipe: a `HfFamily` holds the family's reader,
writer and config mapping, and, for encoders, how its fine-tuned task heads are named. Each
family's module defines one; the registry maps `model_type` to it."""

import dataclasses
from collections.abc import Callable
from typing import Any


def _unchanged(tensors):
    return tensors


@dataclasses.dataclass(frozen=True)
class TaskHeads:
    """How an encoder family's `*ForSequenceClassification`, `*ForTokenClassification` and
    `*ForQuestionAnswering` checkpoints name the encoder's pooler and the heads.

    Args:
        head_fields: `(dropout, sequence) -> dict`, config.json's fields for the head's dropout
            (`sequence`: a sequence classifier's head).
        sequence_pooler: the checkpoint name of the pooler (its `pooler.` entries) in a
            sequence classifier; None: the encoder's own name, under its prefix.
        sequence_head: the checkpoint name of a sequence classifier's output layer.
        span_architecture: the class-name suffix of a span model.
    """

    head_fields: Callable[[float, bool], dict]
    sequence_pooler: str | None = None
    sequence_head: str = "classifier"
    span_architecture: str = "ForQuestionAnswering"


@dataclasses.dataclass(frozen=True)
class HfFamily:
    """One Hugging Face model type, in and out of lmpipe.

    A weight map is a list of entries (see `lmpipe.interop.hf.weights`) for a model and its
    config; checkpoint names in it are the bare model's (`BertModel`'s, without `bert.`).

    Args:
        model_type: config.json's `model_type` ("bert").
        name: the family's name in messages ("BERT").
        stem: the class-name stem of its architectures ("Bert" of `BertForMaskedLM`).
        config_class: lmpipe's configuration class of the family's models.
        prefix: the bare model's name inside a model with heads ("bert.").
        config_from_hf: `path -> config`, the configuration a config.json describes.
        from_pretrained: `directory -> model`, the model a checkpoint folder holds.
        hf_config: `(config, tokenizer) -> dict`, the config.json of the bare model.
        model_entries: `(model, config) -> entries`, what `save_pretrained` writes, under the
            names the written architecture has.
        weight_map: `(model, config) -> entries`, every weight of the family's encoder, its
            pooler's names starting with "pooler" (the task heads' encoder).
        stored_tensors: `tensors -> tensors`, the checkpoint's tensors from those the entries
            give (GPT-2 fuses its query, key and value into one).
        pretrainer_checkpoint: `(pretrainer, config) -> (architecture, entries)` of a
            pretraining model with its heads, or None where lmpipe has none to write.
        task_heads: the names of its fine-tuned task checkpoints, or None (no task models).
        sentence_piece_tokenizer: transformers' tokenizer class of a SentencePiece vocabulary
            written with the family's models.
    """

    model_type: str
    name: str
    stem: str
    config_class: type
    prefix: str
    config_from_hf: Callable[[Any], Any]
    from_pretrained: Callable[..., Any]
    hf_config: Callable[[Any, Any], dict]
    model_entries: Callable[[Any, Any], list]
    weight_map: Callable[[Any, Any], list]
    stored_tensors: Callable[[dict], dict] = _unchanged
    pretrainer_checkpoint: Callable[[Any, Any], tuple] | None = None
    task_heads: TaskHeads | None = None
    sentence_piece_tokenizer: str = "AlbertTokenizer"
