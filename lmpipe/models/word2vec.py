"""The word2vec model: input and output vectors scored with the negative-sampling loss, and
the hand-written sparse SGD step that trains them."""

import keras
import tensorflow as tf
from keras import ops

from lmpipe.kernels import load_kernel
from lmpipe.layers.word2vec_embedding import Word2VecEmbedding


def negative_sampling_loss(logits, weights):
    """word2vec's negative-sampling logistic loss, summed over the examples.

    `loss = sum_p [ -w_p0 log sigmoid(s_p0) - sum_k w_pk log sigmoid(-s_pk) ]`: column 0 holds
    the word to predict, the other columns noise words. Summed rather than averaged, so that
    a learning rate means what it means in the reference implementation, which takes one SGD
    step per example.

    Args:
        logits: float `[P, 1 + K]` scores.
        weights: float `[P, 1 + K]`, 0 for candidates to ignore.

    Returns:
        A float32 scalar.
    """
    logits = ops.cast(logits, "float32")
    signs = ops.concatenate(
        [ops.ones_like(logits[:, :1]), -ops.ones_like(logits[:, 1:])], axis=1
    )  # [P, 1 + K]
    # -log sigmoid(x) = softplus(-x)
    return ops.sum(ops.cast(weights, "float32") * ops.softplus(-signs * logits))


@keras.saving.register_keras_serializable(package="lmpipe")
class Word2VecModel(keras.Model):
    """word2vec (skip-gram or CBOW with negative sampling) as a Keras model.

    Called on a batch of `lmpipe.datasets.examples.word2vec_examples` (a dict with
    `input_ids`, `candidate_ids` and, for CBOW, `input_mask`), it returns the candidates'
    logits `[P, 1 + K]`; `negative_sampling_loss` turns them into the training loss. The word
    vectors are the input embeddings (`vectors`).

    Args:
        vocabulary_size: number of words.
        vector_size: dimension of the vectors.
        seed: seed of the vectors' initialization.

    Example:

    >>> model = Word2VecModel(vocabulary_size=20, vector_size=4, seed=0)
    >>> logits = model({"input_ids": ops.array([1, 2]), "candidate_ids": ops.array([[3, 4]] * 2)})
    >>> tuple(logits.shape), model.vectors.shape
    ((2, 2), (20, 4))

    Reference:
        Mikolov et al., "Efficient Estimation of Word Representations in Vector Space", 2013.
    """

    def __init__(self, vocabulary_size, vector_size, seed=None, **kwargs):
        super().__init__(**kwargs)
        self.vocabulary_size = vocabulary_size
        self.vector_size = vector_size
        self.seed = seed
        self.embedding = Word2VecEmbedding(vocabulary_size, vector_size, seed=seed, name="w2v")
        self.embedding.build()

    def call(self, features):
        return self.embedding(
            features["input_ids"], features["candidate_ids"], features.get("input_mask")
        )

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        del y, sample_weight, training
        return negative_sampling_loss(y_pred, x["candidate_weights"])

    def sgd_step(self, features, learning_rate, sequential=False):
        """One SGD step on a batch: `sparse_sgd_step` (the batch's updates summed per row), or
        with `sequential=True` `sequential_sgd_step` (example by example, lmpipe's kernel).
        Returns `(loss, examples)`."""
        step = sequential_sgd_step if sequential else sparse_sgd_step
        return step(
            self.embedding.input_embeddings.value,
            self.embedding.output_embeddings.value,
            features,
            learning_rate,
        )

    @property
    def vectors(self):
        """The word vectors (input embeddings), a numpy array `[V, D]`."""
        return ops.convert_to_numpy(self.embedding.input_embeddings)

    def get_config(self):
        config = super().get_config()
        config.update(
            vocabulary_size=self.vocabulary_size, vector_size=self.vector_size, seed=self.seed
        )
        return config


def sequential_sgd_step(input_table, output_table, features, learning_rate):
    """SGD on the negative-sampling loss example by example, as the reference implementation
    (word2vec.c, gensim) updates the vectors, in lmpipe's compiled kernel
    (`lmpipe/kernels/word2vec_sgd.cc`; see `lmpipe.kernels`).

    Each example, in order, scores its candidates with the vectors as the examples before it
    left them and updates them at once (the updates of `sparse_sgd_step` for one example, at
    rate `learning_rate`). One CPU thread walks the batch, so a batch's result depends only
    on its inputs. The tables must be resource variables on the CPU.

    Args:
        input_table, output_table: the input and output vectors, `tf.Variable`s `[V, D]`.
        features: a batch of `lmpipe.datasets.examples.word2vec_examples`, of any size.
        learning_rate: float32 scalar.

    Returns:
        `(loss, examples)`: the summed loss, each example's before its own update (float32),
        and the number of examples (int64), padding examples (weight 0) not counted.

    Raises:
        lmpipe.kernels.KernelUnavailableError: the kernel cannot be built here (no C++ compiler).
    """
    kernel = load_kernel("word2vec_sgd")
    input_ids = features["input_ids"]
    mask = features.get("input_mask")
    if mask is None:
        mask = tf.zeros([0], tf.float32)
    loss, examples = kernel.lmpipe_word2vec_sgd(
        input_table.handle,
        output_table.handle,
        tf.cast(input_ids, tf.int32),
        tf.cast(mask, tf.float32),
        tf.cast(features["candidate_ids"], tf.int32),
        tf.cast(features["candidate_weights"], tf.float32),
        tf.cast(learning_rate, tf.float32),
    )
    return tf.cast(loss, tf.float32), examples


def sequential_step_scale(learning_rate, curvature):
    """The learning rate of a row's summed update: `lr * (1 - exp(-lr * c)) / (lr * c)`.

    The reference implementation updates a vector after every example; a batch sums the
    examples' updates of a row, all computed from the same vector. For a row used once, or
    whose loss is still flat, the two agree (the factor is 1). For a row used by many examples
    of a batch (a frequent word, a frequent noise word), `n` sequential steps of rate `lr` on a
    loss of curvature `c / n` each move it by `1 - exp(-lr * c)` of the way to the minimum,
    whereas the sum would step `lr * c` times as far, overshooting (and diverging) once `lr * c`
    exceeds 2. `c` is the summed curvature `sum sigmoid'(s) ||x||^2` of the row's terms.
    """
    x = tf.maximum(learning_rate * curvature, 1e-6)
    return learning_rate * (-tf.math.expm1(-x) / x)


def sparse_sgd_step(input_table, output_table, features, learning_rate):
    """One SGD step of the negative-sampling loss on a batch, gradients written by hand.

    For every example, the input vector `h` (skip-gram: its word's; CBOW: the mean of its
    context words') and the output vectors `c_k` of its candidates score `s_k = h . c_k`; with
    `g_k = w_k (label_k - sigmoid(s_k))` (label 1 for the target, 0 for noise words), the
    reference implementation adds `lr * g_k * h` to each `c_k` and `lr * sum_k g_k c_k` to
    the input vector (CBOW: to each context word's, undivided, as with `cbow_mean=1`). Here
    those updates are summed per row over the batch and scattered onto the rows the batch
    uses only, each row's learning rate corrected by `sequential_step_scale`.

    Args:
        input_table: the input vectors, a `tf.Variable` `[V, D]`.
        output_table: the output vectors, a `tf.Variable` `[V, D]`.
        features: a batch of `lmpipe.datasets.examples.word2vec_examples`.
        learning_rate: float32 scalar.

    Returns:
        `(loss, examples)`: the summed negative-sampling loss before the update (float32) and
        the number of examples (int64), padding examples (weight 0) not counted.
    """
    vocabulary_size = tf.shape(input_table)[0]
    candidates = features["candidate_ids"]  # [P, K]
    weights = features["candidate_weights"]  # [P, K]
    input_ids = features["input_ids"]  # [P] or [P, C]
    mask = features.get("input_mask")
    if mask is None:  # skip-gram
        inputs = tf.gather(input_table, input_ids)  # [P, D]
    else:  # CBOW: the mean of the context vectors
        mask = tf.cast(mask, tf.float32)
        count = tf.maximum(tf.reduce_sum(mask, axis=1, keepdims=True), 1.0)  # [P, 1]
        context = tf.gather(input_table, input_ids) * mask[..., None]  # [P, C, D]
        inputs = tf.reduce_sum(context, axis=1) / count  # [P, D]
    outputs = tf.gather(output_table, candidates)  # [P, K, D]
    scores = tf.einsum("pd,pkd->pk", inputs, outputs)  # [P, K]
    labels = tf.concat(
        [tf.ones_like(scores[:, :1]), tf.zeros_like(scores[:, 1:])], axis=1
    )  # [P, K]
    probabilities = tf.sigmoid(scores)
    signs = 2.0 * labels - 1.0
    loss = tf.reduce_sum(weights * tf.nn.softplus(-signs * scores))
    gradients = weights * (labels - probabilities)  # [P, K]: minus d loss / d score
    curvatures = weights * probabilities * (1.0 - probabilities)  # [P, K]: d2 loss / d score2

    # Output vectors: c_k += lr g_k h.
    flat_candidates = tf.reshape(candidates, [-1])  # [P K]
    output_curvature = tf.math.unsorted_segment_sum(
        tf.reshape(curvatures * tf.reduce_sum(tf.square(inputs), -1, keepdims=True), [-1]),
        flat_candidates,
        vocabulary_size,
    )  # [V]
    output_rates = tf.gather(
        sequential_step_scale(learning_rate, output_curvature), flat_candidates
    )  # [P K]
    output_updates = tf.reshape(gradients[..., None] * inputs[:, None, :], [-1, inputs.shape[-1]])
    # Input vectors: h += lr sum_k g_k c_k, computed from the output vectors before the update.
    input_update = tf.einsum("pk,pkd->pd", gradients, outputs)  # [P, D]
    input_curvature = tf.einsum("pk,pk->p", curvatures, tf.reduce_sum(tf.square(outputs), -1))
    if mask is None:
        row_curvature = tf.math.unsorted_segment_sum(input_curvature, input_ids, vocabulary_size)
        input_rates = tf.gather(sequential_step_scale(learning_rate, row_curvature), input_ids)
        input_table.scatter_add(tf.IndexedSlices(input_update * input_rates[:, None], input_ids))
    else:
        # A context word moves h by 1 / count of its own step.
        flat_ids = tf.reshape(input_ids, [-1])  # [P C]
        row_curvature = tf.math.unsorted_segment_sum(
            tf.reshape(mask * (input_curvature[:, None] / count), [-1]), flat_ids, vocabulary_size
        )
        input_rates = tf.gather(sequential_step_scale(learning_rate, row_curvature), input_ids)
        updates = input_update[:, None, :] * (mask * input_rates)[..., None]  # [P, C, D]
        input_table.scatter_add(
            tf.IndexedSlices(tf.reshape(updates, [-1, inputs.shape[-1]]), flat_ids)
        )
    output_table.scatter_add(
        tf.IndexedSlices(output_updates * output_rates[:, None], flat_candidates)
    )
    return loss, tf.reduce_sum(tf.cast(weights[:, 0] > 0, tf.int64))
