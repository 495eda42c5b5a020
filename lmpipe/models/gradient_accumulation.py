"""One optimizer update from several micro-batches: the gradients of a large batch with the
activation memory of a small one.

A batch of `steps * B` examples (per replica) is cut into `steps` micro-batches of `B`; a
`tf.while_loop` (one iteration at a time, so that one micro-batch's activations are alive at
once) runs the forward and backward pass of each and sums the gradients; then the optimizer
makes one update. The update counter (`optimizer.iterations`) therefore counts updates, not
micro-batches: the learning-rate schedule, `checkpoint_every` and the resume position (in
whole batches) mean the same with and without accumulation.

The losses are exact, not a mean of micro-batch means: each loss term divides its sum by the
count of its weights over the whole batch and every replica (`loss_weights` of the model,
summed before the loop; see `lmpipe.models.losses.accumulated_totals`), so the micro-batches'
gradients add up to the gradient of the batch trained at once (to float rounding; dropout
draws other random numbers). Loss scaling (mixed_float16) scales every micro-batch's loss and
the optimizer unscales the sum.
"""

import keras
import tensorflow as tf
from keras import ops

from lmpipe.backend import loss_tracker
from lmpipe.models.losses import accumulated_totals, global_sum


def accumulated_train_step(model, data, steps):
    """Keras' `train_step` for `model` (an lmpipe `TrainingSteps` model with `loss_weights`)
    on a batch of `steps` micro-batches; returns the metrics as `compute_metrics` does."""
    x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
    if sample_weight is not None:
        raise ValueError(
            "Gradient accumulation takes (features, labels) batches, no sample weights."
        )
    totals = {
        term: global_sum(ops.sum(ops.cast(weights, "float32")))
        for term, weights in model.loss_weights(x, y).items()
    }
    # [steps * B, ...] -> [steps, B, ...]
    micro_x, micro_y = tf.nest.map_structure(lambda t: _micro_batches(t, steps), (x, y))
    variables = model.trainable_weights
    without_gradient = set()  # found when the loop's body is traced

    def accumulate(index, summed, loss_sum):
        x_i, y_i = tf.nest.map_structure(lambda t: t[index], (micro_x, micro_y))
        with tf.GradientTape() as tape:
            y_pred = model(x_i, training=True)
            with accumulated_totals(totals):
                loss = model.compute_loss(x=x_i, y=y_i, y_pred=y_pred, training=True)
            scaled = model.optimizer.scale_loss(loss)
        gradients = tape.gradient(scaled, variables)
        summed = list(summed)
        for position, gradient in enumerate(gradients):
            if gradient is None:
                without_gradient.add(position)
            else:
                summed[position] = summed[position] + tf.convert_to_tensor(gradient)
        return index + 1, summed, loss_sum + loss

    _, summed, loss = tf.while_loop(
        lambda index, *_: index < steps,
        accumulate,
        (tf.constant(0), [tf.zeros(v.shape, v.dtype) for v in variables], tf.constant(0.0)),
        parallel_iterations=1,
    )
    gradients = [
        None if position in without_gradient else gradient
        for position, gradient in enumerate(summed)
    ]
    model.optimizer.apply_gradients(zip(gradients, variables, strict=True))
    # Keras' own loss tracker (`fit`'s "loss"), given what Keras' step gives it: the loss of
    # the replica's batch times the replicas (the losses are divided by global counts).
    replicas = tf.distribute.get_strategy().num_replicas_in_sync
    batch = tf.shape(tf.nest.flatten(x)[0])[0]
    loss_tracker(model).update_state(loss * replicas, sample_weight=batch)
    return model.compute_metrics(x, y, None)


def _micro_batches(tensor, steps):
    """`[steps * B, ...]` as `[steps, B, ...]`."""
    shape = tf.shape(tensor)
    tf.debugging.assert_equal(
        shape[0] % steps,
        0,
        message=f"A batch for gradient accumulation must hold {steps} equal micro-batches.",
    )
    return tf.reshape(tensor, tf.concat([[steps, shape[0] // steps], shape[1:]], axis=0))
