"""Functional model builders and their configuration dataclasses."""

from lmpipe.models.albert import AlbertConfig, albert
from lmpipe.models.bert import BertConfig, bert, count_parameters
from lmpipe.models.elmo import ElmoConfig, ElmoLanguageModel, elmo
from lmpipe.models.gpt import GptCausalLM, GptConfig, gpt
from lmpipe.models.rnn_seq2seq import RnnSeq2Seq, RnnSeq2SeqConfig, rnn_seq2seq
from lmpipe.models.samplers import (
    BeamSampler,
    Decoded,
    GreedySampler,
    Seq2SeqModel,
    TopKSampler,
    TopPSampler,
    beam_search,
    decode,
    generate,
    greedy_search,
)
from lmpipe.models.seq2seq_trainer import Seq2SeqTrainer, label_smoothed_cross_entropy
from lmpipe.models.sequence_classifier import SequenceClassifier
from lmpipe.models.span_predictor import SpanPredictor
from lmpipe.models.token_classifier import TokenClassifier
from lmpipe.models.transformer import TransformerConfig, TransformerSeq2Seq, transformer
from lmpipe.models.untrained import untrained_copy
from lmpipe.models.word2vec import (
    Word2VecModel,
    negative_sampling_loss,
    sequential_sgd_step,
    sparse_sgd_step,
)
from lmpipe.models.xlnet import XLNetConfig, xlnet, xlnet_content_stream
from lmpipe.models.xlnet_pretrainer import XLNetPretrainer

__all__ = [
    "AlbertConfig",
    "BeamSampler",
    "BertConfig",
    "Decoded",
    "ElmoConfig",
    "ElmoLanguageModel",
    "GptCausalLM",
    "GptConfig",
    "GreedySampler",
    "RnnSeq2Seq",
    "RnnSeq2SeqConfig",
    "Seq2SeqModel",
    "Seq2SeqTrainer",
    "SequenceClassifier",
    "TokenClassifier",
    "SpanPredictor",
    "TopKSampler",
    "TopPSampler",
    "TransformerConfig",
    "TransformerSeq2Seq",
    "Word2VecModel",
    "XLNetConfig",
    "XLNetPretrainer",
    "albert",
    "beam_search",
    "bert",
    "untrained_copy",
    "count_parameters",
    "decode",
    "elmo",
    "generate",
    "gpt",
    "greedy_search",
    "label_smoothed_cross_entropy",
    "negative_sampling_loss",
    "rnn_seq2seq",
    "sequential_sgd_step",
    "sparse_sgd_step",
    "transformer",
    "xlnet",
    "xlnet_content_stream",
]
