"""The model_type registry: each family reads back the config.json it writes, is found by its
`model_type` and by its config class, and what no family covers is refused by name."""

import json
import pathlib

import numpy as np
import pytest
from safetensors.numpy import load_file

from lmpipe.interop.hf import save_pretrained, save_pretrainer
from lmpipe.interop.hf.checkpoint import checkpoint_model_type
from lmpipe.interop.hf.registry import FAMILIES, family_of, family_of_config
from lmpipe.models import AlbertConfig, BertConfig, GptConfig, XLNetConfig

FIXTURES = pathlib.Path(__file__).parent / "fixtures"

CONFIGS = {
    "bert": BertConfig.tiny(vocabulary_size=97, hidden_dim=16, intermediate_dim=24),
    "albert": AlbertConfig.tiny(vocabulary_size=97, embedding_dim=8, activation="relu"),
    "xlnet": XLNetConfig.tiny(vocabulary_size=97, clamp_len=5, activation="gelu_approximate"),
    "gpt2": GptConfig.tiny(vocabulary_size=97, max_sequence_length=40),
}


def test_every_model_type_has_one_family_and_every_family_one_config_class():
    assert sorted(FAMILIES) == sorted(CONFIGS)
    for model_type, family in FAMILIES.items():
        assert family.model_type == model_type
        assert family_of(model_type) is family
        assert family_of_config(CONFIGS[model_type]) is family
    assert len({family.config_class for family in FAMILIES.values()}) == len(FAMILIES)


@pytest.mark.parametrize("model_type", sorted(CONFIGS))
def test_each_family_reads_back_the_config_json_it_writes(tmp_path, model_type):
    family, config = FAMILIES[model_type], CONFIGS[model_type]
    hf = family.hf_config(config, None)
    assert hf["model_type"] == model_type
    assert all(name.startswith(family.stem) for name in hf["architectures"])
    path = tmp_path / "config.json"
    path.write_text(json.dumps(hf), encoding="utf-8")
    assert family.config_from_hf(path) == config


@pytest.mark.parametrize("folder", ["albert_tiny", "xlnet_tiny", "gpt2_tiny"])
def test_a_folder_read_by_its_model_types_family_is_written_back_tensor_for_tensor(
    folder, tmp_path
):
    # transformers' tiny checkpoints: the family's reader and writer, found by model_type alone.
    source = FIXTURES / folder
    family = family_of(checkpoint_model_type(source))
    model = family.from_pretrained(source)
    save_pretrained(tmp_path, model, family.config_from_hf(source / "config.json"))
    theirs = {
        name.removeprefix(family.prefix): value
        for name, value in load_file(source / "model.safetensors").items()
    }
    ours = load_file(tmp_path / "model.safetensors")
    # The bare model's tensors: the heads (XLNet's lm_loss.bias and mask_emb) are not written.
    assert len(ours) == {"albert_tiny": 25, "xlnet_tiny": 35, "gpt2_tiny": 28}[folder]
    for name, value in ours.items():
        np.testing.assert_array_equal(value, theirs[name.removeprefix(family.prefix)], name)


def test_an_unknown_model_type_is_refused_naming_the_known_ones():
    with pytest.raises(ValueError, match=r"`model_type` 'roberta'.*'albert', 'bert', 'gpt2'"):
        family_of("roberta")


def test_a_config_of_no_family_is_refused_before_anything_is_written(tmp_path):
    with pytest.raises(ValueError, match="`config` must be one of BertConfig.*got dict"):
        save_pretrained(tmp_path / "out", None, {"model_type": "bert"})
    assert not (tmp_path / "out").exists()


def test_a_gpt_has_no_pretraining_heads_to_write(tmp_path):
    with pytest.raises(ValueError, match="`config` is a GptConfig: .* no GPT-2 pretraining heads"):
        save_pretrainer(tmp_path / "out", None, CONFIGS["gpt2"])
    assert not (tmp_path / "out").exists()
