"""Keras layers of lmpipe, one concept per module. Importing registers them for deserialization."""

from lmpipe.layers.attention_mask import attention_mask
from lmpipe.layers.bert_embedding import BertEmbedding
from lmpipe.layers.character_cnn import CharacterCNN
from lmpipe.layers.classification_head import ClassificationHead
from lmpipe.layers.dropout import Dropout
from lmpipe.layers.layer_normalization import LayerNormalization
from lmpipe.layers.masked_lm_head import MaskedLMHead
from lmpipe.layers.mean_pooling import MaskedMeanPooling
from lmpipe.layers.multi_head_attention import MultiHeadAttention
from lmpipe.layers.position_embedding import PositionEmbedding
from lmpipe.layers.projected_lstm_cell import ProjectedLSTMCell
from lmpipe.layers.relative_attention import RelativeAttention
from lmpipe.layers.relative_position_encoding import RelativePositionEncoding
from lmpipe.layers.rnn_attention import RnnAttention
from lmpipe.layers.rnn_decoder import RnnDecoder
from lmpipe.layers.rnn_encoder import RnnEncoder
from lmpipe.layers.scalar_mix import ScalarMix
from lmpipe.layers.scaled_dot_product_attention import ScaledDotProductAttention
from lmpipe.layers.sinusoidal_position_encoding import SinusoidalPositionEncoding
from lmpipe.layers.span_head import SpanHead
from lmpipe.layers.token_classification_head import TokenClassificationHead
from lmpipe.layers.token_spelling import TokenSpelling
from lmpipe.layers.transformer_decoder_block import TransformerDecoderBlock
from lmpipe.layers.transformer_encoder_block import TransformerEncoderBlock
from lmpipe.layers.two_stream_relative_attention import TwoStreamRelativeAttention
from lmpipe.layers.word2vec_embedding import Word2VecEmbedding

__all__ = [
    "BertEmbedding",
    "CharacterCNN",
    "ClassificationHead",
    "Dropout",
    "LayerNormalization",
    "MaskedLMHead",
    "MaskedMeanPooling",
    "MultiHeadAttention",
    "PositionEmbedding",
    "ProjectedLSTMCell",
    "RelativeAttention",
    "RelativePositionEncoding",
    "RnnAttention",
    "RnnDecoder",
    "RnnEncoder",
    "ScalarMix",
    "ScaledDotProductAttention",
    "SinusoidalPositionEncoding",
    "SpanHead",
    "TokenClassificationHead",
    "TokenSpelling",
    "TransformerDecoderBlock",
    "TransformerEncoderBlock",
    "TwoStreamRelativeAttention",
    "Word2VecEmbedding",
    "attention_mask",
]
