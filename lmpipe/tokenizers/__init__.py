"""lmpipe's tokenizers, in the TensorFlow graph: BERT's WordPiece, SentencePiece (ALBERT,
XLNet) and GPT-2's byte-level BPE, their vocabulary learners, and the loading of saved and
Hugging Face tokenizer folders.

Importing any module of this package runs this file first, and with it the registry, which
gives every class's `train` its learner."""

from lmpipe.tokenizers.byte_pair import BytePairTokenizer
from lmpipe.tokenizers.registry import load_tokenizer, pretrained_tokenizer
from lmpipe.tokenizers.sentence_piece import SentencePieceTokenizer
from lmpipe.tokenizers.token_characters import token_characters
from lmpipe.tokenizers.tokenizer import Tokenizer
from lmpipe.tokenizers.wordpiece import WordPieceTokenizer

__all__ = [
    "BytePairTokenizer",
    "SentencePieceTokenizer",
    "Tokenizer",
    "WordPieceTokenizer",
    "load_tokenizer",
    "pretrained_tokenizer",
    "token_characters",
]
