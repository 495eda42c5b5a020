"""GPT-2 in and out of Hugging Face checkpoints: config.json's fields, the weight map of
`GptCausalLM` (GPT-2's fused attention projection split and fused again), and the registry
entry."""

import pathlib

import numpy as np

from lmpipe.interop.hf.checkpoint import HF_ACTIVATIONS, read_checkpoint, read_model_config
from lmpipe.interop.hf.family import HfFamily
from lmpipe.interop.hf.weights import assign_weights, layer_norm, prefixed, reshaped
from lmpipe.models.gpt import GptCausalLM, GptConfig

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

# GPT-2's fused attention projection, split: c_attn's columns are [query | key | value].
_QKV = ("query", "key", "value")


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
    config, tensors, path = read_checkpoint(directory, "GPT-2", gpt2_config_from_hf)
    model = GptCausalLM(config)
    _assign_gpt2_weights(model, tensors, path)
    return model


def load_gpt2_weights(model, directory):
    """Assign the GPT-2 checkpoint in `directory` to `model`, a `GptCausalLM` of its config."""
    _, tensors, path = read_checkpoint(directory, "GPT-2", gpt2_config_from_hf)
    _assign_gpt2_weights(model, tensors, path)


def _assign_gpt2_weights(model, tensors, path):
    weights = _split_weights(tensors, path, model.config)
    assign_weights(model, _gpt2_weight_map(model, model.config), weights, path)


def gpt2_config_from_hf(path):
    """The `GptConfig` described by a Hugging Face GPT-2 `config.json` at `path`."""
    path = pathlib.Path(path)
    hf = read_model_config(path, "gpt2", "GPT-2", "GPT2", _HF_GPT2_DEFAULTS)
    hf.require(
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
    return hf.config(
        GptConfig,
        "GPT-2",
        vocabulary_size=hf["vocab_size"],
        hidden_dim=width,
        num_layers=hf["n_layer"],
        num_heads=hf["n_head"],
        intermediate_dim=hf["n_inner"] if hf["n_inner"] is not None else 4 * width,
        max_sequence_length=hf["n_positions"],
        dropout=hf["resid_pdrop"],
        activation=hf.activation("activation_function"),
        layer_norm_epsilon=hf["layer_norm_epsilon"],
        initializer_range=hf["initializer_range"],
    )


def _gpt2_hf_config(config, tokenizer=None):
    """config.json's fields of `GPT2LMHeadModel` for `config` (the tokenizer's end token as
    the start and end of text)."""
    hf = {
        "model_type": "gpt2",
        "architectures": ["GPT2LMHeadModel"],
        "vocab_size": config.vocabulary_size,
        "n_positions": config.max_sequence_length,
        "n_embd": config.hidden_dim,
        "n_layer": config.num_layers,
        "n_head": config.num_heads,
        "n_inner": config.intermediate_dim,
        "activation_function": HF_ACTIVATIONS[config.activation],
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


def _split_weights(tensors, path, config):
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


def _fused_tensors(tensors):
    """The inverse of `_split_weights`' split: the three `c_attn.*` entries back into one."""
    for name in [key for key in tensors if key.endswith(".attn.c_attn.query.weight")]:
        prefix = name.removesuffix(".query.weight")
        for kind, axis in (("weight", 1), ("bias", 0)):
            parts = [tensors.pop(f"{prefix}.{role}.{kind}") for role in _QKV]
            tensors[f"{prefix}.{kind}"] = np.ascontiguousarray(np.concatenate(parts, axis=axis))
    return tensors


def _conv1d(layer, name, in_dim, out_dim):
    """The entries of a GPT-2 `Conv1D` `name` (weight `[in, out]`, Keras' layout)."""
    return [
        (f"{name}.weight", layer.kernel, (in_dim, out_dim), reshaped(layer.kernel.shape)),
        (f"{name}.bias", layer.bias, (out_dim,), reshaped(layer.bias.shape)),
    ]


def _gpt2_weight_map(model, config):
    """`GPT2Model`'s entries for a `GptCausalLM`, `c_attn` as its three parts."""
    h, inner = config.hidden_dim, config.intermediate_dim
    positions = model.position_embedding.embeddings
    entries = [
        ("wte.weight", model.token_embedding.embeddings, (config.vocabulary_size, h), None),
        ("wpe.weight", positions, (config.max_sequence_length, h), None),
    ]
    for index, block in enumerate(model.blocks):
        prefix = f"h.{index}"
        attention = block.self_attention
        entries += layer_norm(block.self_attention_layer_norm, f"{prefix}.ln_1", h)
        for role in _QKV:
            dense = getattr(attention, f"{role}_dense")
            entries += _conv1d(dense, f"{prefix}.attn.c_attn.{role}", h, h)
        entries += _conv1d(attention.output_dense, f"{prefix}.attn.c_proj", h, h)
        entries += layer_norm(block.output_layer_norm, f"{prefix}.ln_2", h)
        entries += _conv1d(block.intermediate_dense, f"{prefix}.mlp.c_fc", h, inner)
        entries += _conv1d(block.output_dense, f"{prefix}.mlp.c_proj", inner, h)
    return entries + layer_norm(model.final_layer_norm, "ln_f", h)


def _gpt2_model_entries(model, config):
    """`GPT2LMHeadModel`'s entries (its LM head is the tied token embedding)."""
    return prefixed(_gpt2_weight_map(model, config), "transformer.")


GPT2 = HfFamily(
    model_type="gpt2",
    name="GPT-2",
    stem="GPT2",
    config_class=GptConfig,
    prefix="transformer.",
    config_from_hf=gpt2_config_from_hf,
    from_pretrained=gpt2_from_pretrained,
    hf_config=_gpt2_hf_config,
    model_entries=_gpt2_model_entries,
    weight_map=_gpt2_weight_map,
    stored_tensors=_fused_tensors,
)
