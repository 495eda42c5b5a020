"""word2vec's two embedding tables and its negative-sampling scores."""

import keras
from keras import ops

from lmpipe.arguments import check_positive_int


@keras.saving.register_keras_serializable(package="lmpipe")
class Word2VecEmbedding(keras.layers.Layer):
    """word2vec's input ("syn0") and output ("syn1neg") vectors, scoring candidate words.

    Skip-gram: the input vector of each example's word is dotted with the output vectors of
    its candidates (the word to predict, then noise words). CBOW: the mean of the input vectors
    of the unmasked context words is dotted with the candidates' output vectors. As in the
    reference implementation with `cbow_mean=1` (word2vec.c, gensim), the gradient reaching
    each context word's vector is the gradient of that mean, not divided by the number of
    context words; the layer implements this as `sum + stop_gradient(mean - sum)`.

    Input vectors start uniform in `[-0.5 / vector_size, 0.5 / vector_size]` and output
    vectors at zero, as in the reference. Gradients of both tables are `IndexedSlices`, so
    plain SGD updates only the rows a batch uses (lmpipe's word2vec pipeline trains with the
    hand-written `lmpipe.models.word2vec.sparse_sgd_step` instead, which is faster). Both
    tables aggregate replica updates by summing them.

    Args:
        vocabulary_size: number of words V.
        vector_size: dimension D of the vectors.
        seed: seed of the input vectors' initialization (None: Keras' global seed).

    Call arguments:
        input_ids: int `[P]` (skip-gram: one word per example) or `[P, C]` (CBOW: context
            words).
        candidate_ids: int `[P, K]`, the words to score for each example.
        input_mask: float or bool `[P, C]`, 1 for a real context word (CBOW only). Examples
            need at least one.

    Returns:
        float32 logits `[P, K]`: the dot products of the input and candidate vectors.

    Example:

    >>> layer = Word2VecEmbedding(vocabulary_size=50, vector_size=8, seed=0)
    >>> layer(ops.array([3, 4]), ops.array([[5, 1, 2], [6, 7, 8]])).shape
    TensorShape([2, 3])

    Reference:
        Mikolov et al., "Distributed Representations of Words and Phrases and their
        Compositionality", NeurIPS 2013.
    """

    def __init__(self, vocabulary_size, vector_size, seed=None, **kwargs):
        super().__init__(**kwargs)
        check_positive_int("vocabulary_size", vocabulary_size)
        check_positive_int("vector_size", vector_size)
        self.vocabulary_size = vocabulary_size
        self.vector_size = vector_size
        self.seed = seed

    def build(self, input_ids_shape=None, candidate_ids_shape=None, input_mask_shape=None):
        limit = 0.5 / self.vector_size
        self.input_embeddings = self.add_weight(
            name="input_embeddings",
            shape=(self.vocabulary_size, self.vector_size),
            initializer=keras.initializers.RandomUniform(-limit, limit, seed=self.seed),
            aggregation="sum",  # replicas' sparse updates add up under tf.distribute
        )
        self.output_embeddings = self.add_weight(
            name="output_embeddings",
            shape=(self.vocabulary_size, self.vector_size),
            initializer="zeros",
            aggregation="sum",
        )
        self.built = True

    def call(self, input_ids, candidate_ids, input_mask=None):
        vectors = ops.take(self.input_embeddings, input_ids, axis=0)  # [P, D] or [P, C, D]
        if input_mask is not None:
            mask = ops.cast(input_mask, vectors.dtype)[..., None]  # [P, C, 1]
            summed = ops.sum(vectors * mask, axis=1)  # [P, D]
            count = ops.maximum(ops.sum(mask, axis=1), 1.0)  # [P, 1]
            # Forward: the mean. Backward: the full gradient to every context word, as the
            # reference implementation does.
            vectors = summed + ops.stop_gradient(summed / count - summed)
        candidates = ops.take(self.output_embeddings, candidate_ids, axis=0)  # [P, K, D]
        return ops.einsum("pd,pkd->pk", vectors, candidates)  # [P, K]

    def compute_output_shape(self, input_ids_shape, candidate_ids_shape, input_mask_shape=None):
        return tuple(candidate_ids_shape)

    def get_config(self):
        config = super().get_config()
        config.update(
            vocabulary_size=self.vocabulary_size, vector_size=self.vector_size, seed=self.seed
        )
        return config
