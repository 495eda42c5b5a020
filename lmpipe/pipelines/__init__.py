"""The user-facing pipelines: configuration, data, model, training and export together."""

from lmpipe.pipelines.bert_pretraining import BertPretraining

__all__ = ["BertPretraining"]
