"""Every model configuration as JSON and back: what pipelines save and check on resume."""

from lmpipe.models.albert import AlbertConfig
from lmpipe.models.bert import BertConfig
from lmpipe.models.elmo import ElmoConfig
from lmpipe.models.gpt import GptConfig
from lmpipe.models.rnn_seq2seq import RnnSeq2SeqConfig
from lmpipe.models.transformer import TransformerConfig
from lmpipe.models.xlnet import XLNetConfig

CONFIG_CLASSES = {
    config_class.__name__: config_class
    for config_class in (
        AlbertConfig,
        BertConfig,
        ElmoConfig,
        GptConfig,
        RnnSeq2SeqConfig,
        TransformerConfig,
        XLNetConfig,
    )
}


def config_to_dict(config):
    """`config` as a JSON-serializable dict: its class under "class", then its fields.

    >>> config_to_dict(GptConfig.tiny(vocabulary_size=10))["class"]
    'GptConfig'
    """
    name = type(config).__name__
    if name not in CONFIG_CLASSES:
        raise ValueError(f"Not a model configuration of lmpipe: {config!r}.")
    return {"class": name, **config.to_dict()}


def config_from_dict(values, source="the configuration"):
    """The configuration `config_to_dict` wrote; `source` names where it was read for errors.

    >>> config = GptConfig.tiny(vocabulary_size=10)
    >>> config_from_dict(config_to_dict(config)) == config
    True
    """
    if not isinstance(values, dict):
        raise ValueError(f"{source} must be a JSON object, got {type(values).__name__}.")
    values = dict(values)
    name = values.pop("class", None)
    if name not in CONFIG_CLASSES:
        raise ValueError(
            f"{source} names an unknown model configuration {name!r}; expected one of "
            f"{', '.join(sorted(CONFIG_CLASSES))}."
        )
    try:
        return CONFIG_CLASSES[name](**values)
    except TypeError as error:
        raise ValueError(f"{source} does not describe a {name}: {error}.") from None
