"""tf.data building blocks of lmpipe: corpora, tokenizers and pretraining transforms."""

from lmpipe.datasets.bert_examples import bert_examples
from lmpipe.datasets.byte_pair import BytePairTokenizer
from lmpipe.datasets.causal_lm import causal_lm_examples
from lmpipe.datasets.corpus import FileStats, TextCorpus
from lmpipe.datasets.labelled_files import LabelledFile, read_labelled
from lmpipe.datasets.labelled_text import LabelledSplits, shakespeare_genres
from lmpipe.datasets.masking import MaskedLMMasker
from lmpipe.datasets.parallel_text import ParallelCorpus
from lmpipe.datasets.permutation import PermutationLM
from lmpipe.datasets.sentence_pairs import pair_spans
from lmpipe.datasets.sentence_piece import SentencePieceTokenizer
from lmpipe.datasets.sentences import split_sentences
from lmpipe.datasets.seq2seq_examples import seq2seq_examples
from lmpipe.datasets.shakespeare_names import TaggedSplits, shakespeare_names
from lmpipe.datasets.shuffling import by_epoch, window_shuffle
from lmpipe.datasets.spam_assassin import SpamAssassin, read_spam_assassin
from lmpipe.datasets.span_windows import span_windows
from lmpipe.datasets.speaker_questions import shakespeare_speakers
from lmpipe.datasets.squad import SpanExamples, read_squad, span_examples
from lmpipe.datasets.tagged_files import TaggedSentences, read_tagged
from lmpipe.datasets.token_characters import token_characters
from lmpipe.datasets.tokenized_corpus import TokenizedCorpus, write_tokenized_corpus
from lmpipe.datasets.tokenizer import Tokenizer, load_tokenizer
from lmpipe.datasets.word2vec_examples import word2vec_examples
from lmpipe.datasets.word2vec_vocabulary import Word2VecVocabulary, split_words
from lmpipe.datasets.word_pieces import pack_words, split_text_words
from lmpipe.datasets.wordpiece import WordPieceTokenizer
from lmpipe.datasets.xlnet_examples import xlnet_examples

__all__ = [
    "BytePairTokenizer",
    "FileStats",
    "LabelledFile",
    "LabelledSplits",
    "MaskedLMMasker",
    "ParallelCorpus",
    "PermutationLM",
    "TaggedSentences",
    "TaggedSplits",
    "SentencePieceTokenizer",
    "SpanExamples",
    "TextCorpus",
    "TokenizedCorpus",
    "Tokenizer",
    "WordPieceTokenizer",
    "Word2VecVocabulary",
    "bert_examples",
    "by_epoch",
    "causal_lm_examples",
    "load_tokenizer",
    "pack_words",
    "pair_spans",
    "read_labelled",
    "read_tagged",
    "shakespeare_genres",
    "SpamAssassin",
    "read_spam_assassin",
    "shakespeare_names",
    "seq2seq_examples",
    "split_sentences",
    "split_text_words",
    "read_squad",
    "shakespeare_speakers",
    "span_examples",
    "span_windows",
    "split_words",
    "token_characters",
    "window_shuffle",
    "word2vec_examples",
    "write_tokenized_corpus",
    "xlnet_examples",
]
