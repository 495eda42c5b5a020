"""The pretraining families the `lmpipe` command offers, by the name each declares
(`Family.command_line.name`), in the order its help and messages list them."""

from lmpipe.pipelines.bert_pretraining import AlbertPretraining, BertPretraining
from lmpipe.pipelines.elmo_pretraining import ElmoPretraining
from lmpipe.pipelines.gpt_pretraining import GptPretraining
from lmpipe.pipelines.word2vec import Word2Vec
from lmpipe.pipelines.xlnet_pretraining import XLNetPretraining

PRETRAINING = {
    family.command_line.name: family
    for family in (
        BertPretraining,
        AlbertPretraining,
        XLNetPretraining,
        GptPretraining,
        ElmoPretraining,
        Word2Vec,
    )
}
"""`lmpipe pretrain NAME`'s pipeline classes."""

MODELS = {name: family for name, family in PRETRAINING.items() if family.command_line.config_class}
"""The families with model presets (`--preset`; `lmpipe summarize NAME`)."""


def families_where(test):
    """The names of the families whose declaration passes `test`, in the registry's order."""
    return [name for name, family in PRETRAINING.items() if test(family.command_line)]
