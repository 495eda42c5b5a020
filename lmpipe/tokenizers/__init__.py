"""lmpipe's tokenizers, in the TensorFlow graph: BERT's WordPiece, SentencePiece (ALBERT,
XLNet) and GPT-2's byte-level BPE, their vocabulary learners, and the loading of saved and
Hugging Face tokenizer folders."""

from lmpipe.tokenizers.byte_pair import BytePairTokenizer
from lmpipe.tokenizers.sentence_piece import SentencePieceTokenizer
from lmpipe.tokenizers.token_characters import token_characters
from lmpipe.tokenizers.tokenizer import Tokenizer, load_tokenizer
from lmpipe.tokenizers.wordpiece import WordPieceTokenizer

__all__ = [
    "BytePairTokenizer",
    "SentencePieceTokenizer",
    "Tokenizer",
    "WordPieceTokenizer",
    "load_tokenizer",
    "token_characters",
]
