"""The loss every lmpipe training model computes: a masked mean over the global batch.

Under a distribution strategy each replica computes its loss on its share of the batch and
the gradients are summed across replicas. A replica's loss is therefore its sum of weighted
per-token losses divided by the weights summed over all replicas (`global_sum`): the
replicas' losses add up to the masked mean over the global batch, whatever the share of
real tokens each replica got. The metric trackers receive each replica's local mean,
weighted by its local count, so that they too average over the global batch.

Gradient accumulation (`TrainingSteps` with `accumulation_steps > 1`) extends "global" to the
micro-batches of one update: each loss term is named (`term`), the model says which weights
each term averages over (`loss_weights`), and inside `accumulated_totals` a term is divided by
its count summed over every micro-batch and replica, so that the micro-batches' losses (and
gradients) add up to those of the whole batch.
"""

import contextlib
import threading

import tensorflow as tf
from keras import ops

from lmpipe.backend import compiling_with_xla

# Set by `accumulated_totals` in the thread of one replica (MirroredStrategy runs each
# replica's step in a thread of its own).
_accumulation = threading.local()


def global_sum(value):
    """Sum of `value` over all replicas (the value itself outside a distribution strategy).

    Losses divided by a global count add up, as gradients are summed across replicas, to the
    mean over the global batch."""
    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync == 1:
        return value
    return context.all_reduce(tf.distribute.ReduceOp.SUM, value)


@contextlib.contextmanager
def accumulated_totals(totals):
    """Inside: `masked_mean(..., term=name)` divides by `totals[name]` (a scalar tensor, the
    term's weights summed over the micro-batches of the update and over the replicas)."""
    previous = getattr(_accumulation, "totals", None)
    _accumulation.totals = totals
    try:
        yield
    finally:
        _accumulation.totals = previous


def _denominator(local_count, term):
    totals = getattr(_accumulation, "totals", None)
    if totals is None:
        return global_sum(local_count)
    if term not in totals:
        raise ValueError(
            f"A loss term {term!r} is not among the model's loss_weights() ({sorted(totals)}): "
            "gradient accumulation needs every masked_mean of compute_loss named there."
        )
    return totals[term]


def masked_mean(per_token, weights, tracker=None, tracked=None, term=None):
    """`sum(per_token * weights)` divided by the global sum of `weights` (at least 1).

    Args:
        per_token: float `[...]`, a loss per token (or per example).
        weights: `[...]`, 1 for real tokens, 0 for padding (or any non-negative weights).
        tracker: a `keras.metrics.Mean` given the local weighted mean of `tracked`.
        tracked: what the tracker reports, `[...]` (default `per_token`), e.g. the negative
            log-likelihood when `per_token` is label-smoothed.
        term: the loss term's name in the model's `loss_weights`: with gradient accumulation
            the sum is divided by that term's count over all the micro-batches.

    Returns:
        The scalar loss of this replica.

    >>> float(masked_mean(ops.convert_to_tensor([1.0, 3.0, 9.0]), [1.0, 1.0, 0.0]))
    2.0
    """
    weights = ops.cast(weights, "float32")
    per_token = ops.cast(per_token, "float32")
    local_count = ops.sum(weights)
    denominator = _denominator(local_count, term)
    loss = ops.sum(per_token * weights) / ops.maximum(denominator, 1.0)
    if tracker is not None:
        tracked = per_token if tracked is None else ops.cast(tracked, "float32")
        tracker.update_state(
            ops.sum(tracked * weights) / ops.maximum(local_count, 1.0), sample_weight=local_count
        )
    return loss


def track_accuracy(tracker, targets, logits, weights):
    """Give `tracker` (a `keras.metrics.Mean`) the local weighted share of `targets` that are
    the argmax of `logits`."""
    weights = ops.cast(weights, "float32")
    local_count = ops.sum(weights)
    # tf.argmax itself: Keras' ops.argmax first rewrites -0.0 to -inf, four more passes over
    # the logits (as long as the argmax over a masked-LM batch's 30,522-word logits).
    predicted = tf.argmax(logits, axis=-1, output_type=tf.int32)
    correct = ops.cast(predicted == ops.cast(targets, "int32"), "float32")
    tracker.update_state(
        ops.sum(correct * weights) / ops.maximum(local_count, 1.0), sample_weight=local_count
    )


def sparse_cross_entropy(targets, logits):
    """Cross-entropy `-log softmax(logits)[target]` per token, of `logits` `[..., V]` (computed
    in float32) against int `targets` `[...]`: Keras' `sparse_categorical_crossentropy` with
    `from_logits=True`, to float rounding, and its gradient `softmax - one_hot(target)`.

    TensorFlow's fused op for it (`SparseSoftmaxCrossEntropyWithLogits`, which Keras calls)
    runs 4x slower on a 2-core CPU with oneDNN than a softmax (oneDNN's) with the loss read
    off it and the gradient's `- upstream` taken off the target logits alone (no one-hot): for
    640 masked-LM predictions over 30,522 words, 76 ms forward and backward against 18 ms (97
    against 74 ms with oneDNN off). The log-sum-exp comes from the largest
    probability, `p_max = exp(z_max - z_max) / sum exp(z - z_max)`, which is at least `1 / V`
    and never underflows: `loss = (z_max - z_target) - log p_max`.

    Under XLA, which fuses TensorFlow's op well, it is TensorFlow's op (faster there, see
    `lmpipe.backend.compiling_with_xla`).

    Targets of shape `[..., 1]` against logits `[..., V]` are read as `[...]`, as Keras does.
    A target outside `[0, V)` is an error on the CPU without XLA (the gather's) and a NaN loss
    elsewhere.

    >>> logits = ops.convert_to_tensor([[2.0, 0.0], [0.0, 200.0]])
    >>> [round(float(x), 4) for x in sparse_cross_entropy(ops.convert_to_tensor([0, 0]), logits)]
    [0.1269, 200.0]
    """
    logits = tf.cast(logits, "float32")
    targets = tf.cast(targets, "int32")
    if targets.shape.rank == logits.shape.rank and targets.shape[-1] == 1:
        targets = tf.squeeze(targets, -1)
    if compiling_with_xla():
        return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=targets, logits=logits)
    return _sparse_cross_entropy(logits, targets)


@tf.custom_gradient
def _sparse_cross_entropy(logits, targets):
    probabilities = tf.nn.softmax(logits)
    vocabulary_size = tf.shape(logits)[-1]
    target_logits = tf.gather(logits, targets[..., None], batch_dims=targets.shape.rank)[..., 0]
    in_range = (targets >= 0) & (targets < vocabulary_size)
    target_logits = tf.where(in_range, target_logits, float("nan"))
    loss = (tf.reduce_max(logits, -1) - target_logits) - tf.math.log(
        tf.reduce_max(probabilities, -1)
    )

    def gradient(upstream):
        # (softmax - one_hot(target)) * upstream: the product over every logit, then upstream
        # taken off each row's target alone (no [..., V] one-hot and subtraction).
        rows = tf.reshape(probabilities * upstream[..., None], [-1, vocabulary_size])
        flat_targets = tf.reshape(targets, [-1])
        indices = tf.stack([tf.range(tf.size(flat_targets)), flat_targets], axis=1)
        rows = tf.tensor_scatter_nd_sub(rows, indices, tf.reshape(upstream, [-1]))
        return tf.reshape(rows, tf.shape(probabilities)), None

    return loss, gradient


def masked_cross_entropy(
    targets, logits, weights, loss_tracker=None, accuracy_tracker=None, term=None
):
    """The masked mean cross-entropy of `logits` `[..., V]` against int `targets` `[...]`
    over the global batch (see `masked_mean`, also for `term`), with its loss and accuracy
    trackers.

    >>> logits = ops.convert_to_tensor([[2.0, 0.0], [0.0, 2.0]])
    >>> round(float(masked_cross_entropy(ops.convert_to_tensor([0, 0]), logits, [1.0, 0.0])), 4)
    0.1269
    """
    per_token = sparse_cross_entropy(targets, logits)
    loss = masked_mean(per_token, weights, loss_tracker, term=term)
    if accuracy_tracker is not None:
        track_accuracy(accuracy_tracker, targets, logits, weights)
    return loss
