"""The norms that gradient clipping divides by, taken of the gradient itself.

An embedding's gradient arrives as a `tf.IndexedSlices` with a row per lookup: a token seen
five times in the batch has five rows that all belong to the same row of the table. The
gradient is their sum, so its norm is that of the rows summed by index. Keras'
`clip_by_global_norm`, `clipnorm` (`tf.clip_by_norm`) and `tf.clip_by_global_norm` square the
rows as they come, repeated ones separately, and so clip a batch trained at once by another
scale than the same batch accumulated from micro-batches (whose gradients are summed dense).
`summed_rows` gives each index one row, and `global_norm` is the norm of the summed rows, so
the direct and the accumulated step clip by the same number.
"""

import tensorflow as tf


def summed_rows(gradient):
    """`gradient` with the rows of a `tf.IndexedSlices` summed by index (one row for each
    index, in the order of first appearance); a dense gradient or None as it is.

    The sum (`tf.math.unsorted_segment_sum` over `tf.unique` of the indices) reads the rows
    once, and XLA compiles it, so it runs inside a `jit_compile` train step too."""
    if not isinstance(gradient, tf.IndexedSlices):
        return gradient
    indices, positions = tf.unique(gradient.indices)
    values = tf.math.unsorted_segment_sum(gradient.values, positions, tf.shape(indices)[0])
    return tf.IndexedSlices(values, indices, gradient.dense_shape)


def squared_norm(gradient):
    """The squared Euclidean norm of one gradient, float32; a `tf.IndexedSlices` must have
    its rows summed by index already (`summed_rows`). One pass (`l2_loss`) over the values."""
    values = gradient.values if isinstance(gradient, tf.IndexedSlices) else gradient
    return 2.0 * tf.cast(tf.nn.l2_loss(values), "float32")


def global_norm(gradients, rows_summed=False):
    """The Euclidean norm of all `gradients` together (float32; None entries skipped), with
    the rows of `tf.IndexedSlices` summed by index: the norm of the dense gradient.
    `rows_summed`: they are already (`summed_rows`), not summed again.

    Example:

    >>> rows = tf.IndexedSlices(tf.constant([[3.0], [3.0]]), tf.constant([1, 1]),
    ...                         tf.constant([4, 1]))
    >>> float(global_norm([rows, tf.constant([8.0])]))  # row 1 holds 6: sqrt(36 + 64)
    10.0
    """
    if not rows_summed:
        gradients = [summed_rows(g) for g in gradients]
    squares = [squared_norm(g) for g in gradients if g is not None]
    return tf.sqrt(tf.add_n(squares))


def global_norm_scale(norm, clipnorm):
    """The factor Keras' `clip_by_global_norm` multiplies the gradients by for their global
    `norm`, with its formula: `clipnorm / norm` above `clipnorm`, `clipnorm * (1 / clipnorm)`
    (1, to float rounding) below it, NaN for a norm that is not finite (so that a NaN step
    is seen, not clipped away)."""
    return clipnorm * tf.minimum(1.0 / norm, 1.0 / clipnorm) + (norm - norm)
