"""BERT's input embedding, and ALBERT's factorized variant of it."""

import keras
from keras import ops

from lmpipe.arguments import check_dropout, check_positive_int
from lmpipe.layers.dropout import Dropout
from lmpipe.layers.initializers import bert_initializer, clone_initializer
from lmpipe.layers.layer_normalization import LayerNormalization
from lmpipe.layers.position_embedding import PositionEmbedding


@keras.saving.register_keras_serializable(package="lmpipe")
class BertEmbedding(keras.layers.Layer):
    """Token + segment + learned position embeddings, then LayerNorm and dropout.

    With `embedding_dim` smaller than `hidden_dim` this is ALBERT's factorized embedding:
    the vocabulary is embedded in `E = embedding_dim` dimensions (a V x E table instead of
    V x H), segment and position embeddings are added and normalized in that space, and an
    E x H projection maps the result to the encoder's width.

    The token table is the `token_embedding` sublayer (a `keras.layers.Embedding`); a masked-LM
    head ties its output weights to `token_embedding.embeddings`.

    Args:
        vocabulary_size: number of token ids `V`.
        hidden_dim: width `H` of the output.
        max_sequence_length: number of learned positions.
        num_segments: number of segment (token type) ids.
        embedding_dim: width `E` of the embedding tables; defaults to `hidden_dim`.
        dropout: dropout rate applied after the LayerNorm.
        layer_norm_epsilon: epsilon of the LayerNorm.
        initializer: initializer of the tables and the projection.

    Call arguments:
        token_ids: `[B, S]` int token ids.
        segment_ids: `[B, S]` int segment ids; all zeros if omitted.
        training: enables dropout.

    Example:

    >>> embedding = BertEmbedding(vocabulary_size=100, hidden_dim=32, embedding_dim=8)
    >>> tuple(embedding(ops.ones((2, 5), "int32")).shape)
    (2, 5, 32)

    Reference: Devlin et al., "BERT", 2019, figure 2; Lan et al., "ALBERT", 2020, section 3.1.
    """

    def __init__(
        self,
        vocabulary_size,
        hidden_dim,
        max_sequence_length=512,
        num_segments=2,
        embedding_dim=None,
        dropout=0.1,
        layer_norm_epsilon=1e-12,
        initializer=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        check_positive_int("vocabulary_size", vocabulary_size)
        check_positive_int("hidden_dim", hidden_dim)
        check_positive_int("max_sequence_length", max_sequence_length)
        check_positive_int("num_segments", num_segments)
        if embedding_dim is not None:
            check_positive_int("embedding_dim", embedding_dim)
        check_dropout("dropout", dropout)
        self.vocabulary_size = vocabulary_size
        self.hidden_dim = hidden_dim
        self.max_sequence_length = max_sequence_length
        self.num_segments = num_segments
        self.embedding_dim = embedding_dim
        self.dropout = dropout
        self.layer_norm_epsilon = layer_norm_epsilon
        self.initializer = keras.initializers.get(initializer or bert_initializer())

        width = embedding_dim or hidden_dim
        self.token_embedding = keras.layers.Embedding(
            vocabulary_size,
            width,
            embeddings_initializer=clone_initializer(self.initializer),
            dtype=self.dtype_policy,
            name="token_embedding",
        )
        self.segment_embedding = keras.layers.Embedding(
            num_segments,
            width,
            embeddings_initializer=clone_initializer(self.initializer),
            dtype=self.dtype_policy,
            name="segment_embedding",
        )
        self.position_embedding = PositionEmbedding(
            max_sequence_length,
            initializer=clone_initializer(self.initializer),
            dtype=self.dtype_policy,
            name="position_embedding",
        )
        self.layer_norm = LayerNormalization(
            epsilon=layer_norm_epsilon, dtype=self.dtype_policy, name="layer_norm"
        )
        self.dropout_layer = Dropout(dropout, dtype=self.dtype_policy)
        self.projection = None
        if embedding_dim is not None and embedding_dim != hidden_dim:
            self.projection = keras.layers.Dense(
                hidden_dim,
                kernel_initializer=clone_initializer(self.initializer),
                dtype=self.dtype_policy,
                name="projection",
            )

    def build(self, token_ids_shape, segment_ids_shape=None):
        width = self.embedding_dim or self.hidden_dim
        self.token_embedding.build(token_ids_shape)
        self.segment_embedding.build(token_ids_shape)
        embedded_shape = tuple(token_ids_shape) + (width,)
        self.position_embedding.build(embedded_shape)
        self.layer_norm.build(embedded_shape)
        if self.projection is not None:
            self.projection.build(embedded_shape)
        self.built = True

    def call(self, token_ids, segment_ids=None, training=None):
        if segment_ids is None:
            segment_ids = ops.zeros_like(token_ids)
        embedded = self.token_embedding(token_ids) + self.segment_embedding(segment_ids)
        embedded = embedded + self.position_embedding(embedded)  # [B, S, E]
        embedded = self.dropout_layer(self.layer_norm(embedded), training=training)
        if self.projection is not None:
            embedded = self.projection(embedded)  # [B, S, H]
        return embedded

    def compute_output_shape(self, token_ids_shape, segment_ids_shape=None):
        return tuple(token_ids_shape) + (self.hidden_dim,)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocabulary_size": self.vocabulary_size,
                "hidden_dim": self.hidden_dim,
                "max_sequence_length": self.max_sequence_length,
                "num_segments": self.num_segments,
                "embedding_dim": self.embedding_dim,
                "dropout": self.dropout,
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "initializer": keras.initializers.serialize(self.initializer),
            }
        )
        return config
