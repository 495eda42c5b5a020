"""Keras layers of lmpipe, one concept per module. Importing registers them for deserialization."""

from lmpipe.layers.attention_mask import attention_mask
from lmpipe.layers.bert_embedding import BertEmbedding
from lmpipe.layers.classification_head import ClassificationHead
from lmpipe.layers.masked_lm_head import MaskedLMHead
from lmpipe.layers.multi_head_attention import MultiHeadAttention
from lmpipe.layers.position_embedding import PositionEmbedding
from lmpipe.layers.scaled_dot_product_attention import ScaledDotProductAttention
from lmpipe.layers.sinusoidal_position_encoding import SinusoidalPositionEncoding
from lmpipe.layers.span_head import SpanHead
from lmpipe.layers.token_classification_head import TokenClassificationHead
from lmpipe.layers.transformer_decoder_block import TransformerDecoderBlock
from lmpipe.layers.transformer_encoder_block import TransformerEncoderBlock

__all__ = [
    "BertEmbedding",
    "ClassificationHead",
    "MaskedLMHead",
    "MultiHeadAttention",
    "PositionEmbedding",
    "ScaledDotProductAttention",
    "SinusoidalPositionEncoding",
    "SpanHead",
    "TokenClassificationHead",
    "TransformerDecoderBlock",
    "TransformerEncoderBlock",
    "attention_mask",
]
