"""Functional model builders and their configuration dataclasses."""

from lmpipe.models.albert import AlbertConfig, albert
from lmpipe.models.bert import BertConfig, bert, count_parameters
from lmpipe.models.pretrained import bert_from_pretrained
from lmpipe.models.sequence_classifier import SequenceClassifier

__all__ = [
    "AlbertConfig",
    "BertConfig",
    "SequenceClassifier",
    "albert",
    "bert",
    "bert_from_pretrained",
    "count_parameters",
]
