"""Token ids to the characters that spell them, from a table saved with the model's weights."""

import keras
import numpy as np
from keras import ops

from lmpipe.arguments import check_positive_int


@keras.saving.register_keras_serializable(package="lmpipe")
class TokenSpelling(keras.layers.Layer):
    """Looks up each token's character ids: `spellings[token_ids]`, `[B, S, max_characters]`.

    The table `[vocabulary_size, max_characters]` is a non-trainable int32 weight, so it is
    saved, checkpointed and exported with the model, and a model reads characters from the
    token ids of the data contract (no character input). It starts as zeros (no character)
    until `set_spellings` fills it, e.g. with `lmpipe.tokenizers.token_characters(tokenizer)`;
    loading saved weights fills it too.

    Args:
        vocabulary_size: rows of the table.
        max_characters: characters per token.

    Call arguments:
        token_ids: int `[B, S]`.

    Returns:
        int32 `[B, S, max_characters]`.

    Example:

    >>> spelling = TokenSpelling(3, 4)
    >>> spelling.set_spellings([[0, 0, 0, 0], [259, 105, 260, 261], [259, 106, 260, 261]])
    >>> keras.ops.convert_to_numpy(spelling(keras.ops.array([[2, 1]]))).tolist()
    [[[259, 106, 260, 261], [259, 105, 260, 261]]]
    """

    def __init__(self, vocabulary_size, max_characters, **kwargs):
        super().__init__(**kwargs)
        check_positive_int("vocabulary_size", vocabulary_size)
        check_positive_int("max_characters", max_characters)
        self.vocabulary_size = vocabulary_size
        self.max_characters = max_characters

    def build(self, token_ids_shape=None):
        self.spellings = self.add_weight(
            name="spellings",
            shape=(self.vocabulary_size, self.max_characters),
            initializer="zeros",
            dtype="int32",
            trainable=False,
        )
        self.built = True

    def set_spellings(self, spellings):
        """Fill the table with `spellings`, int `[vocabulary_size, max_characters]`."""
        spellings = np.asarray(spellings)
        expected = (self.vocabulary_size, self.max_characters)
        if spellings.shape != expected or not np.issubdtype(spellings.dtype, np.integer):
            raise ValueError(
                f"`spellings` must be integers of shape {expected} "
                f"(vocabulary_size, max_characters), got {spellings.dtype} {spellings.shape}."
            )
        if not self.built:
            self.build()
        self.spellings.assign(spellings.astype(np.int32))

    def call(self, token_ids):
        return ops.take(self.spellings, ops.cast(token_ids, "int32"), axis=0)

    def compute_output_shape(self, token_ids_shape):
        return tuple(token_ids_shape) + (self.max_characters,)

    def compute_output_spec(self, token_ids):
        shape = self.compute_output_shape(token_ids.shape)
        return keras.KerasTensor(shape, dtype="int32")

    def get_config(self):
        config = super().get_config()
        config.update(
            {"vocabulary_size": self.vocabulary_size, "max_characters": self.max_characters}
        )
        return config
