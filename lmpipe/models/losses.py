"""The loss every lmpipe training model computes: a masked mean over the global batch.

Under a distribution strategy each replica computes its loss on its share of the batch and
the gradients are summed across replicas. A replica's loss is therefore its sum of weighted
per-token losses divided by the weights summed over all replicas (`global_sum`): the
replicas' losses add up to the masked mean over the global batch, whatever the share of
real tokens each replica got. The metric trackers receive each replica's local mean,
weighted by its local count, so that they too average over the global batch.
"""

import keras
from keras import ops

from lmpipe.models.trainable import global_sum


def masked_mean(per_token, weights, tracker=None, tracked=None):
    """`sum(per_token * weights)` divided by the global sum of `weights` (at least 1).

    Args:
        per_token: float `[...]`, a loss per token (or per example).
        weights: `[...]`, 1 for real tokens, 0 for padding (or any non-negative weights).
        tracker: a `keras.metrics.Mean` given the local weighted mean of `tracked`.
        tracked: what the tracker reports, `[...]` (default `per_token`), e.g. the negative
            log-likelihood when `per_token` is label-smoothed.

    Returns:
        The scalar loss of this replica.

    >>> float(masked_mean(ops.convert_to_tensor([1.0, 3.0, 9.0]), [1.0, 1.0, 0.0]))
    2.0
    """
    weights = ops.cast(weights, "float32")
    per_token = ops.cast(per_token, "float32")
    local_count = ops.sum(weights)
    loss = ops.sum(per_token * weights) / ops.maximum(global_sum(local_count), 1.0)
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
    predicted = ops.cast(ops.argmax(logits, axis=-1), "int32")
    correct = ops.cast(predicted == ops.cast(targets, "int32"), "float32")
    tracker.update_state(
        ops.sum(correct * weights) / ops.maximum(local_count, 1.0), sample_weight=local_count
    )


def masked_cross_entropy(targets, logits, weights, loss_tracker=None, accuracy_tracker=None):
    """The masked mean cross-entropy of `logits` `[..., V]` against int `targets` `[...]`
    over the global batch (see `masked_mean`), with its loss and accuracy trackers.

    >>> logits = ops.convert_to_tensor([[2.0, 0.0], [0.0, 2.0]])
    >>> round(float(masked_cross_entropy(ops.convert_to_tensor([0, 0]), logits, [1.0, 0.0])), 4)
    0.1269
    """
    per_token = keras.losses.sparse_categorical_crossentropy(targets, logits, from_logits=True)
    loss = masked_mean(per_token, weights, loss_tracker)
    if accuracy_tracker is not None:
        track_accuracy(accuracy_tracker, targets, logits, weights)
    return loss
