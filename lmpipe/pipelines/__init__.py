"""The user-facing pipelines: configuration, data, model, training and export together."""

from lmpipe.pipelines.bert_pretraining import (
    AlbertPretraining,
    AlbertPretrainingOptions,
    BertPretraining,
    BertPretrainingOptions,
)
from lmpipe.pipelines.elmo_pretraining import ElmoPretraining
from lmpipe.pipelines.fine_tuning import FineTuningPipeline
from lmpipe.pipelines.gpt_pretraining import GptPretraining, LanguageModelOptions
from lmpipe.pipelines.pipeline import Pipeline, PipelineOptions, load
from lmpipe.pipelines.span_answerer import SpanAnswerer, SpanAnswererOptions
from lmpipe.pipelines.text_classifier import TextClassifier
from lmpipe.pipelines.token_tagger import TokenTagger, TokenTaggerOptions
from lmpipe.pipelines.translation import Translation
from lmpipe.pipelines.word2vec import Word2Vec
from lmpipe.pipelines.xlnet_pretraining import XLNetPretraining, XLNetPretrainingOptions
from lmpipe.training.distribution import distribution_strategy
from lmpipe.training.preemption import PREEMPTED_EXIT_CODE, Preempted
from lmpipe.training.schedules import TransformerSchedule, WarmupLinearDecay

__all__ = [
    "PREEMPTED_EXIT_CODE",
    "AlbertPretraining",
    "AlbertPretrainingOptions",
    "BertPretraining",
    "BertPretrainingOptions",
    "ElmoPretraining",
    "FineTuningPipeline",
    "GptPretraining",
    "LanguageModelOptions",
    "Pipeline",
    "PipelineOptions",
    "Preempted",
    "SpanAnswerer",
    "SpanAnswererOptions",
    "TextClassifier",
    "TokenTagger",
    "TokenTaggerOptions",
    "TransformerSchedule",
    "Translation",
    "WarmupLinearDecay",
    "Word2Vec",
    "XLNetPretraining",
    "XLNetPretrainingOptions",
    "distribution_strategy",
    "load",
]
