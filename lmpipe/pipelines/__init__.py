"""The user-facing pipelines: configuration, data, model, training and export together."""

from lmpipe.pipelines.bert_pretraining import AlbertPretraining, BertPretraining
from lmpipe.pipelines.distribution import distribution_strategy
from lmpipe.pipelines.elmo_pretraining import ElmoPretraining
from lmpipe.pipelines.gpt_pretraining import GptPretraining
from lmpipe.pipelines.schedules import TransformerSchedule, WarmupLinearDecay
from lmpipe.pipelines.text_classifier import TextClassifier
from lmpipe.pipelines.translation import Translation
from lmpipe.pipelines.word2vec import Word2Vec
from lmpipe.pipelines.xlnet_pretraining import XLNetPretraining

__all__ = [
    "AlbertPretraining",
    "BertPretraining",
    "ElmoPretraining",
    "GptPretraining",
    "TextClassifier",
    "TransformerSchedule",
    "Translation",
    "WarmupLinearDecay",
    "Word2Vec",
    "XLNetPretraining",
    "distribution_strategy",
]
