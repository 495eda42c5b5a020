import keras
import numpy as np
import pytest

from lmpipe.models import AlbertConfig, BertConfig, albert, bert, count_parameters
from tests.fresh_process import json_from_fresh_process

RNG = np.random.default_rng(2)


def encoder_batch(vocabulary_size, batch=2, length=9):
    padding = np.ones((batch, length), "int32")
    padding[1, 6:] = 0
    return {
        "token_ids": RNG.integers(0, vocabulary_size, size=(batch, length)).astype("int32"),
        "segment_ids": (np.arange(length)[None, :] >= 4).astype("int32").repeat(batch, 0),
        "padding_mask": padding,
    }


@pytest.mark.parametrize(
    ("config", "builder", "published"),
    [
        (BertConfig.base(), bert, 109_482_240),
        (AlbertConfig.base(), albert, 11_683_584),
        (AlbertConfig.large(), albert, 17_683_968),
    ],
    ids=["bert-base", "albert-base", "albert-large"],
)
def test_preset_parameter_counts_equal_the_published_numbers(config, builder, published):
    model = builder(config)
    assert count_parameters(model) == published
    assert model.count_params() == published


@pytest.mark.slow
def test_bert_large_has_the_published_parameter_count():
    script = (
        "from lmpipe.models import BertConfig, bert, count_parameters\n"
        "print(count_parameters(bert(BertConfig.large())))"
    )
    assert json_from_fresh_process(script) == 335_141_888


@pytest.mark.parametrize(
    "builder, config",
    [(bert, BertConfig.tiny(vocabulary_size=64)), (albert, AlbertConfig.tiny(vocabulary_size=64))],
)
def test_encoder_takes_the_named_inputs_and_returns_the_output_dict(builder, config, tmp_path):
    model = builder(config)
    batch = encoder_batch(64)
    outputs = model(batch)
    assert set(outputs) == {"sequence_output", "pooled_output"}
    assert outputs["sequence_output"].shape == (2, 9, 128)
    assert outputs["pooled_output"].shape == (2, 128)
    path = tmp_path / "encoder.keras"
    model.save(path)
    restored = keras.models.load_model(path)
    for name, value in restored(batch).items():
        np.testing.assert_allclose(value, outputs[name], atol=1e-6)


def test_albert_applies_one_shared_block_at_every_layer():
    model = albert(AlbertConfig.tiny(vocabulary_size=64, num_layers=4))
    blocks = [layer for layer in model.layers if layer.name == "shared_block"]
    assert len(blocks) == 1
    assert sum("TransformerEncoderBlock" in type(layer).__name__ for layer in model.layers) == 1
    deeper = albert(AlbertConfig.tiny(vocabulary_size=64, num_layers=8))
    assert count_parameters(deeper) == count_parameters(model)


def test_padding_never_changes_real_positions_of_the_encoder():
    model = bert(BertConfig.tiny(vocabulary_size=64))
    batch = encoder_batch(64)
    reference = np.asarray(model(batch)["sequence_output"])
    changed = dict(batch)
    changed["token_ids"] = np.where(batch["padding_mask"] == 1, batch["token_ids"], 5)
    output = np.asarray(model(changed)["sequence_output"])
    real = batch["padding_mask"].astype(bool)
    np.testing.assert_allclose(output[real], reference[real], atol=1e-5)


def test_configs_reject_bad_sizes_naming_the_field():
    with pytest.raises(ValueError, match="hidden_dim"):
        BertConfig(hidden_dim=100, num_heads=12)
    with pytest.raises(ValueError, match="num_layers"):
        BertConfig.tiny(num_layers=0)
    with pytest.raises(ValueError, match="dropout"):
        AlbertConfig.tiny(dropout=-0.1)
    with pytest.raises(ValueError, match="embedding_dim"):
        AlbertConfig.tiny(embedding_dim=0)


def test_a_pre_ln_bert_normalizes_before_each_sublayer_and_once_after_the_last_block():
    config = BertConfig.tiny(vocabulary_size=64, normalize_first=True)
    model = bert(config)
    blocks = [model.get_layer(f"block_{index}") for index in range(config.num_layers)]
    assert all(block.normalize_first for block in blocks)
    assert not bert(BertConfig.tiny(vocabulary_size=64)).get_layer("block_0").normalize_first
    batch = encoder_batch(64)
    x = model.get_layer("embedding")(batch["token_ids"], batch["segment_ids"])
    for block in blocks:
        x = block(x, padding_mask=batch["padding_mask"])
    expected = np.asarray(model.get_layer("final_norm")(x))
    output = np.asarray(model(batch)["sequence_output"])
    np.testing.assert_allclose(output, expected, atol=1e-5)
    # The final norm makes every position's features zero-mean and unit-variance (gamma 1,
    # beta 0 at the start).
    np.testing.assert_allclose(output.mean(-1), 0, atol=1e-4)
    np.testing.assert_allclose(output.std(-1), 1, atol=1e-3)
    with pytest.raises(ValueError, match="normalize_first"):
        BertConfig.tiny(normalize_first="yes")
