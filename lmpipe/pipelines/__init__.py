"""The user-facing pipelines: configuration, data, model, training and export together."""

from lmpipe.pipelines.bert_pretraining import AlbertPretraining, BertPretraining
from lmpipe.pipelines.distribution import distribution_strategy
from lmpipe.pipelines.schedules import WarmupLinearDecay
from lmpipe.pipelines.text_classifier import TextClassifier

__all__ = [
    "AlbertPretraining",
    "BertPretraining",
    "TextClassifier",
    "WarmupLinearDecay",
    "distribution_strategy",
]
