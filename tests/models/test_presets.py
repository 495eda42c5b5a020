"""Every configuration class makes its presets by name, once (`lmpipe.models.presets`)."""

import pytest

from lmpipe import models
from lmpipe.models.presets import PRESETS

CONFIG_CLASSES = [
    models.BertConfig,
    models.AlbertConfig,
    models.XLNetConfig,
    models.GptConfig,
    models.ElmoConfig,
    models.TransformerConfig,
    models.RnnSeq2SeqConfig,
]


@pytest.mark.parametrize("config_class", CONFIG_CLASSES, ids=lambda c: c.__name__)
def test_from_preset_is_the_named_classmethod_of_every_preset(config_class):
    assert set(config_class.preset_names()) == set(PRESETS[config_class.__name__])
    for name in config_class.preset_names():
        assert config_class.from_preset(name) == getattr(config_class, name)()
        overridden = config_class.from_preset(name, vocabulary_size=321)
        assert overridden == getattr(config_class, name)(vocabulary_size=321)
        assert overridden.vocabulary_size == 321


def test_the_presets_hold_the_published_sizes():
    assert models.BertConfig.preset_names() == ("tiny", "mini", "small", "base", "large")
    mini = models.BertConfig.from_preset("mini")
    assert (mini.hidden_dim, mini.num_layers, mini.num_heads, mini.intermediate_dim) == (
        256,
        4,
        4,
        1024,
    )
    large = models.AlbertConfig.from_preset("xxlarge")
    assert (large.hidden_dim, large.num_layers, large.num_heads) == (4096, 12, 64)
    assert models.GptConfig.from_preset("small") == models.GptConfig.base()
    assert models.GptConfig.from_preset("tiny").max_sequence_length == 128
    assert models.RnnSeq2SeqConfig.from_preset("bahdanau").bidirectional is True
    assert models.TransformerConfig.from_preset("big").dropout == 0.3


def test_an_unknown_preset_is_refused_naming_the_choices():
    with pytest.raises(ValueError, match="`preset` 'huge' is not a preset of XLNetConfig: "):
        models.XLNetConfig.from_preset("huge")
    with pytest.raises(ValueError, match="choose from tiny, small, medium$"):
        models.GptConfig.from_preset("base")  # a classmethod alias, not a preset name
