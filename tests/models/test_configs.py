"""Every model configuration goes to JSON and back (what `pipeline.json` and `run.json` hold)."""

import json

import pytest

from lmpipe.models import (
    AlbertConfig,
    BertConfig,
    ElmoConfig,
    GptConfig,
    RnnSeq2SeqConfig,
    TransformerConfig,
    XLNetConfig,
)
from lmpipe.models.configs import CONFIG_CLASSES, config_from_dict, config_to_dict


@pytest.mark.parametrize(
    "config",
    [
        AlbertConfig.tiny(vocabulary_size=50),
        BertConfig.tiny(vocabulary_size=50),
        ElmoConfig.tiny(vocabulary_size=50),
        GptConfig.tiny(vocabulary_size=50),
        RnnSeq2SeqConfig.tiny(vocabulary_size=50, form="attention", attention_score="dot"),
        TransformerConfig.tiny(
            vocabulary_size=50, target_vocabulary_size=60, share_embeddings=False
        ),
        XLNetConfig.tiny(vocabulary_size=50),
    ],
    ids=lambda config: type(config).__name__,
)
def test_every_config_round_trips_through_json(config):
    values = json.loads(json.dumps(config_to_dict(config)))
    assert values["class"] == type(config).__name__
    assert config_from_dict(values) == config


def test_every_config_class_of_the_models_is_known():
    assert set(CONFIG_CLASSES) == {
        "AlbertConfig",
        "BertConfig",
        "ElmoConfig",
        "GptConfig",
        "RnnSeq2SeqConfig",
        "TransformerConfig",
        "XLNetConfig",
    }


def test_a_bad_description_names_its_source():
    with pytest.raises(ValueError, match="pipeline.json config names an unknown"):
        config_from_dict({"class": "LlamaConfig"}, "pipeline.json config")
    with pytest.raises(ValueError, match="does not describe a GptConfig"):
        config_from_dict({"class": "GptConfig", "colour": 1}, "pipeline.json config")
    with pytest.raises(ValueError, match="Not a model configuration"):
        config_to_dict({"hidden_dim": 3})
