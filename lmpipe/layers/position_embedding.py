"""Learned absolute position embedding, as in BERT and GPT."""

import keras
from keras import ops

from lmpipe.arguments import check_positive_int
from lmpipe.layers.initializers import bert_initializer


@keras.saving.register_keras_serializable(package="lmpipe")
class PositionEmbedding(keras.layers.Layer):
    """A learned vector per position, returned for the positions of `inputs`.

    The table has `sequence_length` rows; the layer returns rows `start_index ..
    start_index + length - 1`, broadcast to the input's shape `[batch, length, d]`, to be added
    to the token embeddings.

    Args:
        sequence_length: the largest number of positions the model will see.
        initializer: initializer of the table (BERT's truncated normal, stddev 0.02).

    Call arguments:
        inputs: `[B, S, d]`; only its shape is used.
        start_index: absolute position of the first element (int or scalar tensor).

    Example:

    >>> embeddings = keras.random.normal((2, 10, 16))
    >>> tuple(PositionEmbedding(sequence_length=128)(embeddings).shape)
    (2, 10, 16)

    Reference: Devlin et al., "BERT", 2019, section 3 (input representation).
    """

    def __init__(self, sequence_length, initializer=None, **kwargs):
        super().__init__(**kwargs)
        check_positive_int("sequence_length", sequence_length)
        self.sequence_length = sequence_length
        self.initializer = keras.initializers.get(initializer or bert_initializer())

    def build(self, input_shape):
        self.position_embeddings = self.add_weight(
            name="embeddings",
            shape=(self.sequence_length, input_shape[-1]),
            initializer=self.initializer,
            trainable=True,
        )
        self.built = True

    def call(self, inputs, start_index=0):
        shape = ops.shape(inputs)
        length = shape[-2]
        static = isinstance(length, int) and isinstance(start_index, int)
        if static and start_index + length > self.sequence_length:
            raise ValueError(
                f"The input has {length} positions from position {start_index}, more than "
                f"`sequence_length`={self.sequence_length}."
            )
        table = ops.convert_to_tensor(self.position_embeddings)
        positions = ops.slice(table, (start_index, 0), (length, shape[-1]))  # [S, d]
        return ops.broadcast_to(ops.cast(positions, self.compute_dtype), shape)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "sequence_length": self.sequence_length,
                "initializer": keras.initializers.serialize(self.initializer),
            }
        )
        return config
