"""tf.data building blocks of lmpipe: corpora, pretraining examples, labelled files and bundled
data; the tokenizers (whose home is `lmpipe.tokenizers`) are handed on under their old names."""

from lmpipe.datasets.bundled.labelled_text import LabelledSplits, shakespeare_genres
from lmpipe.datasets.bundled.shakespeare_names import TaggedSplits, shakespeare_names
from lmpipe.datasets.bundled.spam_assassin import SpamAssassin, read_spam_assassin
from lmpipe.datasets.bundled.speaker_questions import shakespeare_speakers
from lmpipe.datasets.corpora.corpus import FileStats, TextCorpus
from lmpipe.datasets.corpora.corpus_mixture import CorpusMixture
from lmpipe.datasets.corpora.parallel_text import ParallelCorpus
from lmpipe.datasets.corpora.sentences import split_sentences
from lmpipe.datasets.corpora.shuffling import by_epoch, window_shuffle
from lmpipe.datasets.corpora.tokenized_corpus import TokenizedCorpus, write_tokenized_corpus
from lmpipe.datasets.examples.bert_examples import bert_examples
from lmpipe.datasets.examples.causal_lm import causal_lm_examples
from lmpipe.datasets.examples.masking import MaskedLMMasker
from lmpipe.datasets.examples.permutation import PermutationLM
from lmpipe.datasets.examples.sentence_pairs import pair_spans
from lmpipe.datasets.examples.seq2seq_examples import seq2seq_examples
from lmpipe.datasets.examples.stream_position import MixturePosition, StreamPosition
from lmpipe.datasets.examples.word2vec_examples import word2vec_examples
from lmpipe.datasets.examples.word2vec_vocabulary import Word2VecVocabulary, split_words
from lmpipe.datasets.examples.xlnet_examples import xlnet_examples
from lmpipe.datasets.labelled.labelled_files import LabelledFile, read_labelled
from lmpipe.datasets.labelled.span_windows import span_windows
from lmpipe.datasets.labelled.squad import SpanExamples, read_squad, span_examples
from lmpipe.datasets.labelled.tagged_files import TaggedSentences, read_tagged
from lmpipe.datasets.labelled.word_pieces import pack_words, split_text_words
from lmpipe.tokenizers.byte_pair import BytePairTokenizer
from lmpipe.tokenizers.registry import load_tokenizer
from lmpipe.tokenizers.sentence_piece import SentencePieceTokenizer
from lmpipe.tokenizers.token_characters import token_characters
from lmpipe.tokenizers.tokenizer import Tokenizer
from lmpipe.tokenizers.wordpiece import WordPieceTokenizer

__all__ = [
    "BytePairTokenizer",
    "CorpusMixture",
    "MixturePosition",
    "StreamPosition",
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
