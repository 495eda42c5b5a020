"""Fine-tuned task models out to Hugging Face: a `SequenceClassifier`, `TokenClassifier` or
`SpanPredictor` on a BERT, ALBERT or XLNet encoder written as the `*ForSequenceClassification`,
`*ForTokenClassification` or `*ForQuestionAnswering` folder that `transformers` loads with the
trained head."""

import math

import keras

from lmpipe.interop.hf.encoder_layers import encoder_config_of
from lmpipe.interop.hf.registry import family_of
from lmpipe.interop.hf.weights import linear, prefixed, without
from lmpipe.interop.hf.writer import write_checkpoint
from lmpipe.models.sequence_classifier import SequenceClassifier
from lmpipe.models.span_predictor import SpanPredictor
from lmpipe.models.token_classifier import TokenClassifier

_TASK_MODELS = (SequenceClassifier, TokenClassifier, SpanPredictor)


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
            express (another encoder, a pooler in the head, mean pooling, a weight with no
            place); the message says which, and nothing is written.
    """
    family, architecture, entries, hf = task_checkpoint(model, tokenizer, labels)
    hf["architectures"] = [architecture]
    write_checkpoint(directory, family, entries, hf, tokenizer)


def task_checkpoint(model, tokenizer=None, labels=None):
    """`(family, architecture, entries, config.json fields)` of `save_task_pretrained`: the
    encoder's `HfFamily` and the checkpoint entries (name, variable, checkpoint shape,
    conversion) of every weight the Hugging Face class has, checked to cover every weight that
    reaches the model's outputs."""
    if not isinstance(model, _TASK_MODELS):
        raise ValueError(
            "`model` must be a SequenceClassifier, TokenClassifier or SpanPredictor, got "
            f"{type(model).__name__}."
        )
    model_type, config = encoder_config_of(model.encoder)
    family = family_of(model_type)
    architecture, entries = _task_entries(model, family, config)
    _check_covered(model, entries, architecture)
    hf = family.hf_config(config, tokenizer)
    hf.update(_head_fields(model, family, labels))
    return family, architecture, entries, hf


def _task_entries(model, family, config):
    """The architecture's name and the checkpoint entries of the encoder and the head."""
    names, stem, h = family.task_heads, family.stem, config.hidden_dim
    encoder, head = model.encoder, model.head
    entries = family.weight_map(encoder, config)
    if isinstance(model, SequenceClassifier):
        if model.pooling != "pooled":
            raise ValueError(
                f"The classifier reads the mean of the tokens (pooling={model.pooling!r}), "
                f"Hugging Face's {stem}ForSequenceClassification the pooler on [CLS]: "
                "fine-tune with pooling='pooled' (`--pooling pooled`) for a folder it loads."
            )
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
        if names.sequence_pooler is None:
            entries = prefixed(entries, family.prefix)
        else:  # the pooler is named as the head's (XLNet's sequence summary)
            summary = [entry for entry in entries if entry[0].startswith("pooler.")]
            summary = [(name.removeprefix("pooler."), *rest) for name, *rest in summary]
            entries = prefixed(without(entries, "pooler."), family.prefix)
            entries += prefixed(summary, names.sequence_pooler)
        output = linear(head.output_dense, names.sequence_head, model.num_classes, h)
        return stem + "ForSequenceClassification", entries + output
    # Hugging Face's token and span models are built without the pooler.
    entries = prefixed(without(entries, "pooler."), family.prefix)
    if isinstance(model, TokenClassifier):
        output = linear(head.output_dense, "classifier", model.num_classes, h)
        return stem + "ForTokenClassification", entries + output
    output = linear(head.span_dense, "qa_outputs", 2, h)
    return stem + names.span_architecture, entries + output


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
    fields.update(family.task_heads.head_fields(float(model.dropout), sequence))
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
