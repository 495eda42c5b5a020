"""The Hugging Face model types lmpipe reads and writes: `model_type` -> its `HfFamily` (the
family's reader, writer and config mapping). A new family is one module defining its
`HfFamily` and one line here."""

from lmpipe.interop.hf.encoders import ALBERT, BERT
from lmpipe.interop.hf.gpt2 import GPT2
from lmpipe.interop.hf.xlnet import XLNET

FAMILIES = {family.model_type: family for family in (BERT, ALBERT, XLNET, GPT2)}


def family_of(model_type):
    """The `HfFamily` of config.json's `model_type`; ValueError naming the types known."""
    if model_type not in FAMILIES:
        raise ValueError(
            f"`model_type` {model_type!r} is not one lmpipe reads or writes; expected one of "
            f"{sorted(FAMILIES)}."
        )
    return FAMILIES[model_type]


def family_of_config(config):
    """The `HfFamily` whose models `config` (a `BertConfig`, `AlbertConfig`, `XLNetConfig` or
    `GptConfig`) configures; ValueError naming the classes otherwise."""
    for family in FAMILIES.values():
        if isinstance(config, family.config_class):
            return family
    names = ", ".join(family.config_class.__name__ for family in FAMILIES.values())
    raise ValueError(f"`config` must be one of {names}, got {type(config).__name__}.")
