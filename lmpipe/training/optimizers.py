"""Adam and AdamW with a fused update: `FusedAdam` and `FusedAdamW` give Keras' results (to
float rounding) in fewer passes over memory, with the weight decay and the global-norm clipping
joining the update (see `_FusedAdamUpdate`)."""

import keras
import tensorflow as tf

from lmpipe.backend import (
    adam_moments,
    keras_apply_weight_decay,
    keras_clip_gradients,
    uses_weight_decay,
)
from lmpipe.training.gradient_norms import global_norm, global_norm_scale, summed_rows

# Variables of at least this many elements (a vocabulary's embedding table, a large model's
# bigger matrices) take the XLA-compiled update with a weight decay or clipping: on a 2-core CPU
# a 4M-element variable's update takes 3.0 ms there against 4.6 ms with TensorFlow's ops (scale,
# decay, fused Adam); at 2^18 elements both take 0.4 ms, and smaller ones take the ops (no XLA
# compilation for each new shape).
XLA_UPDATE_MIN_SIZE = 2**20


class _FusedAdamUpdate:
    """Adam's update of a dense gradient in one pass over memory instead of Keras' seven
    elementwise ops, each a pass of its own, with the same formula as Keras' `Adam.update_step`:

        m += (g - m) (1 - beta_1);   v += (g^2 - v) (1 - beta_2)
        variable -= lr sqrt(1 - beta_2^t) / (1 - beta_1^t) * m / (sqrt(v) + epsilon)

    TensorFlow's fused kernel (`ResourceApplyAdam`) does it. A decoupled weight decay
    (`variable -= lr * weight_decay * variable`, before the update, as Keras' AdamW) and the
    scale of global-norm clipping (on one replica) are a pass each in Keras; here they join the
    update of each large variable in one XLA-compiled function (`_decayed_adam`, variables of
    `XLA_UPDATE_MIN_SIZE` elements or more), the global norm itself staying a pass over every
    gradient. On a 2-core CPU a BERT-mini train step takes 3.5% less time with the fused
    kernel, and AdamW with clipping costs at most about 1% more than plain Adam where Keras'
    cost 4-4.5% (`benchmarks/training.py`).

    A sparse gradient (`tf.IndexedSlices`, an embedding's) is clipped by the norm of its rows
    summed by index and updated as the dense gradient it stands for (`gradient_norms`): Keras'
    clipping and Adam's second moment square repeated rows separately, so that a batch would
    train otherwise than the same batch accumulated from micro-batches. amsgrad goes through
    Keras' update (with dense gradients too)."""

    # The clipping scale of the gradients `apply` is updating with, from `_clip_gradients`
    # (None: Keras clipped them, or no clipping).
    _gradient_scale = None

    def _clip_gradients(self, grads):
        """Global-norm clipping on one replica: the scale here, applied in `update_step`.

        After the replicas' sum on several replicas (`_clips_after_the_sum`); Keras' own
        otherwise (clipping by each gradient's norm or value, amsgrad). Either way the
        rows of sparse gradients are summed by index first, so that each clipping measures
        the gradient itself (`gradient_norms`)."""
        self._gradient_scale = None
        if not (self.clipnorm or self.global_clipnorm or self.clipvalue):
            return grads
        grads = [summed_rows(g) for g in grads]
        if self._clips_after_the_sum():
            return grads  # clipped in `_all_reduce_sum_gradients`, once summed
        one_replica = tf.distribute.get_strategy().num_replicas_in_sync == 1
        if self.amsgrad or not self.global_clipnorm or not one_replica:
            return keras_clip_gradients(self, _FusedAdamUpdate, grads)
        norm = global_norm(grads, rows_summed=True)
        self._gradient_scale = global_norm_scale(norm, self.global_clipnorm)
        return grads

    def _clips_after_the_sum(self):
        """Global-norm clipping on several replicas: by the norm of the gradient of the global
        batch (the replicas' sum), not of each replica's share (Keras clips those before
        summing them: a run on 2 replicas would train otherwise than on 1)."""
        replicas = tf.distribute.get_strategy().num_replicas_in_sync
        return bool(self.global_clipnorm) and not self.amsgrad and replicas > 1

    def _all_reduce_sum_gradients(self, grads_and_vars):
        """Keras' sum over the replicas, then the global-norm clipping of several replicas."""
        reduced = super()._all_reduce_sum_gradients(grads_and_vars)
        if not self._clips_after_the_sum():
            return reduced
        grads = [None if g is None else summed_rows(g) for g, _ in reduced]
        norm = global_norm([g for g in grads if g is not None], rows_summed=True)
        scale = global_norm_scale(norm, self.global_clipnorm)
        return [
            (None if g is None else _scaled(g, scale), variable)
            for g, (_, variable) in zip(grads, reduced, strict=True)
        ]

    def _apply_weight_decay(self, variables):
        """Keras' decay for amsgrad; otherwise `update_step` decays each variable it updates."""
        if self.amsgrad:
            keras_apply_weight_decay(self, _FusedAdamUpdate, variables)

    def update_step(self, gradient, variable, learning_rate):
        if isinstance(gradient, tf.IndexedSlices):
            # The dense gradient: repeated rows summed (Keras' update of the slices would
            # square them one by one, and makes the moments dense anyway).
            gradient = tf.convert_to_tensor(gradient)
        if self.amsgrad:
            return super().update_step(gradient, variable, learning_rate)
        variable = _tf_variable(variable)
        dtype = variable.dtype
        scale = self._gradient_scale
        decay = None
        if self.weight_decay is not None and uses_weight_decay(self, variable):
            decay = tf.cast(learning_rate, dtype) * tf.cast(self.weight_decay, dtype)
        gradient = tf.cast(gradient, dtype)
        step = tf.cast(self.iterations + 1, dtype)
        beta_1 = tf.cast(self.beta_1, dtype)
        beta_2 = tf.cast(self.beta_2, dtype)
        epsilon = tf.cast(self.epsilon, dtype)
        learning_rate = tf.cast(learning_rate, dtype)
        m, v = (_tf_variable(moment) for moment in adam_moments(self, variable))
        fused = scale is not None or decay is not None
        if fused and variable.shape.num_elements() >= XLA_UPDATE_MIN_SIZE:
            _decayed_adam(
                variable.handle,
                m.handle,
                v.handle,
                gradient,
                tf.cast(1.0 if scale is None else scale, dtype),
                tf.zeros([], dtype) if decay is None else decay,
                learning_rate,
                step,
                beta_1,
                beta_2,
                epsilon,
            )
            return
        if scale is not None:
            gradient = gradient * tf.cast(scale, dtype)
        if decay is not None:
            variable.assign_sub(variable * decay)
        tf.raw_ops.ResourceApplyAdam(
            var=variable.handle,
            m=m.handle,
            v=v.handle,
            beta1_power=tf.pow(beta_1, step),
            beta2_power=tf.pow(beta_2, step),
            lr=learning_rate,
            beta1=beta_1,
            beta2=beta_2,
            epsilon=epsilon,
            grad=gradient,
        )


@tf.function(jit_compile=True, autograph=False, reduce_retracing=True)
def _decayed_adam(
    variable, m, v, gradient, scale, decay, learning_rate, step, beta_1, beta_2, epsilon
):
    """Adam's update of the variable behind the handle `variable` (moments behind `m` and
    `v`) with `gradient * scale`, after its decay `variable -= decay * variable`, in one XLA
    computation: each element is read and written once."""
    dtype = gradient.dtype
    gradient = gradient * scale
    old_m = tf.raw_ops.ReadVariableOp(resource=m, dtype=dtype)
    old_v = tf.raw_ops.ReadVariableOp(resource=v, dtype=dtype)
    new_m = old_m + (gradient - old_m) * (1 - beta_1)
    new_v = old_v + (tf.square(gradient) - old_v) * (1 - beta_2)
    alpha = learning_rate * tf.sqrt(1 - beta_2**step) / (1 - beta_1**step)
    old = tf.raw_ops.ReadVariableOp(resource=variable, dtype=dtype)
    decayed = old - old * decay
    tf.raw_ops.AssignVariableOp(resource=m, value=new_m)
    tf.raw_ops.AssignVariableOp(resource=v, value=new_v)
    tf.raw_ops.AssignVariableOp(
        resource=variable, value=decayed - new_m * alpha / (tf.sqrt(new_v) + epsilon)
    )


def _tf_variable(variable):
    """The `tf.Variable` (or distributed variable) behind a Keras variable."""
    return variable.value if isinstance(variable, keras.Variable) else variable


@keras.saving.register_keras_serializable(package="lmpipe")
class FusedAdam(_FusedAdamUpdate, keras.optimizers.Adam):
    """`keras.optimizers.Adam` (same arguments, same results to float rounding) with the
    fused update of dense gradients (`_FusedAdamUpdate`)."""


@keras.saving.register_keras_serializable(package="lmpipe")
class FusedAdamW(_FusedAdamUpdate, keras.optimizers.AdamW):
    """`keras.optimizers.AdamW` (same arguments, same results to float rounding) with the
    fused Adam update of dense gradients, the weight decay and the clipping joining it
    (`_FusedAdamUpdate`)."""


def _scaled(gradient, scale):
    """`gradient` (a tensor or `tf.IndexedSlices`) times the scalar `scale`."""
    if isinstance(gradient, tf.IndexedSlices):
        values = gradient.values * tf.cast(scale, gradient.values.dtype)
        return tf.IndexedSlices(values, gradient.indices, gradient.dense_shape)
    return gradient * tf.cast(scale, gradient.dtype)
