"""XLNet in and out of Hugging Face checkpoints: config.json's fields, the weight map of
`xlnet()`'s relative-attention layers and of `XLNetLMHeadModel`'s head, and the registry
entry."""

import pathlib

from lmpipe.interop.hf.checkpoint import HF_ACTIVATIONS, read_checkpoint, read_model_config
from lmpipe.interop.hf.family import HfFamily, TaskHeads
from lmpipe.interop.hf.weights import (
    assign_entries,
    assign_weights,
    encoder_weights,
    layer_norm,
    linear,
    prefixed,
    without,
)
from lmpipe.models.xlnet import XLNetConfig, xlnet

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

# The pooler of a sequence classifier, `tanh(W h + b)` of the last token: its "last"
# sequence summary with the projection.
_SEQUENCE_SUMMARY = "sequence_summary.summary."


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
    config, tensors, path = read_checkpoint(directory, "XLNet", xlnet_config_from_hf)
    model = xlnet(config, **xlnet_arguments)
    _assign_xlnet_weights(model, config, tensors, path)
    return model


def load_xlnet_pretrainer_weights(pretrainer, directory):
    """Load a Hugging Face XLNet checkpoint into an `XLNetPretrainer` built from its config:
    its two-stream network (see `xlnet_from_pretrained`) and, where the checkpoint has it
    (`XLNetLMHeadModel`), the LM head's bias `lm_loss.bias` (its weights are the tied word
    embedding). Returns whether the bias was loaded."""
    config, tensors, path = read_checkpoint(directory, "XLNet", xlnet_config_from_hf)
    _assign_xlnet_weights(pretrainer.network, config, tensors, path)
    if "lm_loss.bias" not in tensors:
        return False
    assign_entries([_lm_bias_entry(pretrainer)], tensors, path)
    return True


def _assign_xlnet_weights(model, config, tensors, path):
    """Assign an XLNet checkpoint's `tensors` (read from `path`) to `model`, an `xlnet()`
    model of its `config`."""
    weights = encoder_weights(tensors, "transformer.", path)
    for kind in ("weight", "bias"):
        if f"{_SEQUENCE_SUMMARY}{kind}" in weights:
            weights[f"pooler.{kind}"] = weights.pop(f"{_SEQUENCE_SUMMARY}{kind}")
    entries = _xlnet_weight_map(model, config)
    if "pooler.weight" not in weights:
        entries = without(entries, "pooler.")
    if not any(layer.name == "mask_embedding" for layer in model.layers):
        weights.pop("mask_emb", None)
    assign_weights(model, entries, weights, path, keep=("pooler",))


def _lm_bias_entry(pretrainer):
    bias = pretrainer.lm_bias
    return ("lm_loss.bias", bias, tuple(bias.shape), None)


def xlnet_config_from_hf(path):
    """The `XLNetConfig` described by a Hugging Face XLNet `config.json` at `path`."""
    path = pathlib.Path(path)
    hf = read_model_config(path, "xlnet", "XLNet", "XLNet", _HF_XLNET_DEFAULTS)
    hf.require(
        {"attn_type": "bi", "same_length": False},
        "lmpipe's XLNet is the bidirectional one of pretraining and fine-tuning",
    )
    if hf.get("d_head") not in (None, hf["d_model"] // max(hf["n_head"], 1)):
        raise ValueError(f"{path}: `d_head` must be d_model / n_head, found {hf['d_head']!r}.")
    clamp_len = hf["clamp_len"]
    # Negative (-1) means no clamping; any other value is XLNetConfig's to check.
    negative = isinstance(clamp_len, (int, float)) and not isinstance(clamp_len, bool)
    negative = negative and clamp_len < 0
    return hf.config(
        XLNetConfig,
        "XLNet",
        vocabulary_size=hf["vocab_size"],
        hidden_dim=hf["d_model"],
        num_layers=hf["n_layer"],
        num_heads=hf["n_head"],
        intermediate_dim=hf["d_inner"],
        dropout=hf["dropout"],
        attention_dropout=hf["dropout"],
        activation=hf.activation("ff_activation"),
        layer_norm_epsilon=hf["layer_norm_eps"],
        initializer_range=hf["initializer_range"],
        clamp_len=None if clamp_len is None or negative else clamp_len,
    )


def _xlnet_hf_config(config, tokenizer=None):
    """config.json's fields of `XLNetModel` for `config`."""
    return {
        "model_type": "xlnet",
        "architectures": ["XLNetModel"],
        "vocab_size": config.vocabulary_size,
        "d_model": config.hidden_dim,
        "n_layer": config.num_layers,
        "n_head": config.num_heads,
        "d_head": config.hidden_dim // config.num_heads,
        "d_inner": config.intermediate_dim,
        "ff_activation": HF_ACTIVATIONS[config.activation],
        "attn_type": "bi",
        "untie_r": True,
        "same_length": False,
        "clamp_len": -1 if config.clamp_len is None else config.clamp_len,
        "dropout": config.dropout,
        "layer_norm_eps": config.layer_norm_epsilon,
        "initializer_range": config.initializer_range,
    }


def _xlnet_weight_map(model, config):
    """`XLNetModel`'s entries for an `xlnet()` model (`mask_emb` where it is two-stream), and
    its pooler's as `pooler.*`."""
    h, heads = config.hidden_dim, config.num_heads
    head_dim = h // heads
    words = model.get_layer("word_embedding").embeddings
    entries = [("word_embedding.weight", words, (config.vocabulary_size, h), None)]
    if any(layer.name == "mask_embedding" for layer in model.layers):
        mask = model.get_layer("mask_embedding").embeddings
        entries.append(("mask_emb", mask, (1, 1, h), lambda w: w.reshape(mask.shape)))
    kernel, bias = (h, heads, head_dim), (heads, head_dim)
    # `TwoStreamRelativeAttention`'s variables -> their names in a layer's `rel_attn`.
    attention_names = {
        "query_kernel": ("q", kernel),
        "key_kernel": ("k", kernel),
        "value_kernel": ("v", kernel),
        "position_kernel": ("r", kernel),
        "output_kernel": ("o", kernel),
        "content_bias": ("r_w_bias", bias),
        "position_bias": ("r_r_bias", bias),
        "segment_bias": ("r_s_bias", bias),
        "segment_embedding": ("seg_embed", (2, heads, head_dim)),
    }
    for index in range(config.num_layers):
        block, prefix = model.get_layer(f"block_{index}"), f"layer.{index}"
        for mine, (theirs, shape) in attention_names.items():
            variable = getattr(block.attention, mine)
            entries.append((f"{prefix}.rel_attn.{theirs}", variable, shape, None))
        entries += layer_norm(block.attention_layer_norm, f"{prefix}.rel_attn.layer_norm", h)
        inner = config.intermediate_dim
        entries += linear(block.intermediate_dense, f"{prefix}.ff.layer_1", inner, h)
        entries += linear(block.output_dense, f"{prefix}.ff.layer_2", h, inner)
        entries += layer_norm(block.output_layer_norm, f"{prefix}.ff.layer_norm", h)
    return entries + linear(model.get_layer("pooler"), "pooler", h, h)


def _xlnet_model_entries(model, config):
    """`XLNetModel`'s entries: it has neither the pooler nor `mask_emb`."""
    return without(without(_xlnet_weight_map(model, config), "pooler."), "mask_emb")


def _xlnet_pretrainer_checkpoint(pretrainer, config):
    """`(architecture, entries)` of an `XLNetPretrainer` written as `XLNetLMHeadModel`: the
    two-stream network (with `mask_emb`) and `lm_loss.bias` (its weights are the tied word
    embedding)."""
    entries = without(_xlnet_weight_map(pretrainer.network, config), "pooler.")
    return "XLNetLMHeadModel", [*prefixed(entries, "transformer."), _lm_bias_entry(pretrainer)]


def _xlnet_head_fields(dropout, sequence):
    """A sequence classifier's pooler is its "last" summary with a tanh projection; a token or
    span model has no head dropout field."""
    if not sequence:
        return {}
    return {
        "summary_type": "last",
        "summary_use_proj": True,
        "summary_activation": "tanh",
        "summary_last_dropout": dropout,
    }


XLNET = HfFamily(
    model_type="xlnet",
    name="XLNet",
    stem="XLNet",
    config_class=XLNetConfig,
    prefix="transformer.",
    config_from_hf=xlnet_config_from_hf,
    from_pretrained=xlnet_from_pretrained,
    hf_config=_xlnet_hf_config,
    model_entries=_xlnet_model_entries,
    weight_map=_xlnet_weight_map,
    pretrainer_checkpoint=_xlnet_pretrainer_checkpoint,
    task_heads=TaskHeads(
        head_fields=_xlnet_head_fields,
        sequence_pooler=_SEQUENCE_SUMMARY,
        sequence_head="logits_proj",
        # The "Simple" span model: start and end logits from one Linear (its
        # `XLNetForQuestionAnswering` is the beam-search head).
        span_architecture="ForQuestionAnsweringSimple",
    ),
    sentence_piece_tokenizer="XLNetTokenizer",
)
