"""tf.data building blocks of lmpipe: corpora, tokenizers and pretraining transforms."""

from lmpipe.datasets.bert_examples import bert_examples
from lmpipe.datasets.corpus import FileStats, TextCorpus
from lmpipe.datasets.labelled_text import LabelledSplits, shakespeare_genres
from lmpipe.datasets.masking import MaskedLMMasker
from lmpipe.datasets.sentence_pairs import pair_spans
from lmpipe.datasets.sentences import split_sentences
from lmpipe.datasets.tokenized_corpus import TokenizedCorpus, write_tokenized_corpus
from lmpipe.datasets.wordpiece import WordPieceTokenizer

__all__ = [
    "FileStats",
    "LabelledSplits",
    "MaskedLMMasker",
    "TextCorpus",
    "TokenizedCorpus",
    "WordPieceTokenizer",
    "bert_examples",
    "pair_spans",
    "shakespeare_genres",
    "split_sentences",
    "write_tokenized_corpus",
]
