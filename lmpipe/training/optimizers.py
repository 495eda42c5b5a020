"""The optimizers of the training recipes and their learning-rate schedules: BERT's AdamW
with warmup and linear decay, the Transformer's Adam with the inverse-square-root schedule,
and the recurrent encoder-decoders' Adam with a constant rate."""

import keras
import tensorflow as tf
from keras import ops

from lmpipe.arguments import check_number
from lmpipe.training.gradient_norms import global_norm, global_norm_scale, summed_rows


@keras.saving.register_keras_serializable(package="lmpipe")
class WarmupLinearDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warmup from 0 to `peak_learning_rate` over `warmup_steps`, then linear decay to
    `end_learning_rate` at `total_steps` (BERT's schedule, appendix A.2 of the paper).

    lr(step) = peak * step / warmup                                   for step < warmup
    lr(step) = end + (peak - end) * (total - step) / (total - warmup)   after, floored at `end`
    """

    def __init__(self, peak_learning_rate, warmup_steps, total_steps, end_learning_rate=0.0):
        check_number("learning_rate", peak_learning_rate, above=0)
        check_number("warmup_steps", warmup_steps, minimum=0, integer=True)
        check_number("total_steps", total_steps, minimum=1, integer=True)
        check_number("end_learning_rate", end_learning_rate, minimum=0)
        if warmup_steps > total_steps:
            raise ValueError(
                "Need 0 <= `warmup_steps` <= `total_steps` and `total_steps` >= 1, got "
                f"warmup_steps={warmup_steps!r}, total_steps={total_steps!r}."
            )
        self.peak_learning_rate = float(peak_learning_rate)
        self.warmup_steps = int(warmup_steps)
        self.total_steps = int(total_steps)
        self.end_learning_rate = float(end_learning_rate)

    def __call__(self, step):
        step = ops.cast(step, "float32")
        peak, end = self.peak_learning_rate, self.end_learning_rate
        warmup = peak * step / max(self.warmup_steps, 1)
        decay_steps = max(self.total_steps - self.warmup_steps, 1)
        remaining = ops.maximum(self.total_steps - step, 0.0) / decay_steps
        decay = end + (peak - end) * remaining
        return ops.where(step < self.warmup_steps, warmup, decay)

    def get_config(self):
        return {
            "peak_learning_rate": self.peak_learning_rate,
            "warmup_steps": self.warmup_steps,
            "total_steps": self.total_steps,
            "end_learning_rate": self.end_learning_rate,
        }


@keras.saving.register_keras_serializable(package="lmpipe")
class TransformerSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """The Transformer's schedule: linear warmup, then decay with the inverse square root.

    lr = factor * d_model^-0.5 * min(n^-0.5, n * warmup_steps^-1.5),  n = step + 1

    `step` is the optimizer's count of finished updates (0 for the first one), so `n` is the
    paper's `step_num`, which starts at 1. The peak, `factor * (d_model * warmup_steps)^-0.5`,
    is reached at `n = warmup_steps`.

    Args:
        d_model: the model width (`hidden_dim`).
        warmup_steps: steps of linear warmup (4000 in the paper).
        factor: a multiplier of the whole schedule (1 in the paper).

    Example:

    >>> schedule = TransformerSchedule(d_model=512, warmup_steps=4000)
    >>> round(float(schedule(3999)), 7)  # the peak: (512 * 4000) ** -0.5
    0.0006988

    Reference: Vaswani et al., "Attention Is All You Need", 2017, section 5.3.
    """

    def __init__(self, d_model, warmup_steps=4000, factor=1.0):
        check_number("d_model", d_model, minimum=1, integer=True)
        check_number("warmup_steps", warmup_steps, minimum=1, integer=True)
        check_number("factor", factor, above=0)
        self.d_model = d_model
        self.warmup_steps = warmup_steps
        self.factor = float(factor)

    def __call__(self, step):
        n = ops.cast(step, "float32") + 1.0
        scale = self.factor * self.d_model**-0.5
        return scale * ops.minimum(ops.rsqrt(n), n * float(self.warmup_steps) ** -1.5)

    def get_config(self):
        return {"d_model": self.d_model, "warmup_steps": self.warmup_steps, "factor": self.factor}


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

        Keras' own otherwise (clipping by each gradient's norm or value; several replicas,
        where Keras clips each replica's gradients before they are summed). Either way the
        rows of sparse gradients are summed by index first, so that each clipping measures
        the gradient itself (`gradient_norms`)."""
        self._gradient_scale = None
        if not (self.clipnorm or self.global_clipnorm or self.clipvalue):
            return grads
        grads = [summed_rows(g) for g in grads]
        one_replica = tf.distribute.get_strategy().num_replicas_in_sync == 1
        if self.amsgrad or not self.global_clipnorm or not one_replica:
            return super()._clip_gradients(grads)
        norm = global_norm(grads, rows_summed=True)
        self._gradient_scale = global_norm_scale(norm, self.global_clipnorm)
        return grads

    def _apply_weight_decay(self, variables):
        """Keras' decay for amsgrad; otherwise `update_step` decays each variable it updates."""
        if self.amsgrad:
            super()._apply_weight_decay(variables)

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
        if self.weight_decay is not None and self._use_weight_decay(variable):
            decay = tf.cast(learning_rate, dtype) * tf.cast(self.weight_decay, dtype)
        gradient = tf.cast(gradient, dtype)
        step = tf.cast(self.iterations + 1, dtype)
        beta_1 = tf.cast(self.beta_1, dtype)
        beta_2 = tf.cast(self.beta_2, dtype)
        epsilon = tf.cast(self.epsilon, dtype)
        learning_rate = tf.cast(learning_rate, dtype)
        index = self._get_variable_index(variable)
        m = _tf_variable(self._momentums[index])
        v = _tf_variable(self._velocities[index])
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


def adamw(learning_rate, total_steps, warmup_steps, weight_decay, clipnorm):
    """AdamW with BERT's schedule (linear warmup, then linear decay to 0), global-norm gradient
    clipping, and no weight decay on biases and LayerNorm parameters."""
    optimizer = FusedAdamW(
        learning_rate=WarmupLinearDecay(learning_rate, warmup_steps, total_steps),
        weight_decay=weight_decay,
        beta_1=0.9,
        beta_2=0.999,
        epsilon=1e-6,
        global_clipnorm=clipnorm,
    )
    optimizer.exclude_from_weight_decay(var_names=["bias", "gamma", "beta"])
    return optimizer


def transformer_adam(d_model, warmup_steps=4000, factor=1.0, clipnorm=None):
    """Adam with beta_1 0.9, beta_2 0.98, epsilon 1e-9 and `TransformerSchedule` (the paper's)."""
    return FusedAdam(
        learning_rate=TransformerSchedule(d_model, warmup_steps=warmup_steps, factor=factor),
        beta_1=0.9,
        beta_2=0.98,
        epsilon=1e-9,
        global_clipnorm=clipnorm,
    )


def seq2seq_optimizer(transformer_width=None, learning_rate=None, warmup_steps=None, clipnorm=1.0):
    """`(total_steps) -> optimizer` for an encoder-decoder, built inside the strategy scope.

    With a `transformer_width` (the Transformer's `hidden_dim`): `transformer_adam` with the
    paper's schedule scaled by `learning_rate` (default 1) and `warmup_steps` of warmup
    (default 4000, the paper's, or 10% of the steps for runs shorter than 40,000 steps).
    Without one (recurrent models): Adam with the constant `learning_rate` (default 1e-3).
    `clipnorm`: global gradient-norm clipping (None: none).
    """
    if transformer_width is not None:

        def transformer_optimizer(total_steps):
            warmup = warmup_steps
            if warmup is None:
                warmup = 4000 if total_steps >= 40000 else max(1, total_steps // 10)
            return transformer_adam(
                transformer_width,
                warmup_steps=warmup,
                factor=1.0 if learning_rate is None else learning_rate,
                clipnorm=clipnorm,
            )

        return transformer_optimizer

    def rnn_optimizer(total_steps):
        del total_steps
        return FusedAdam(
            learning_rate=1e-3 if learning_rate is None else learning_rate,
            global_clipnorm=clipnorm,
        )

    return rnn_optimizer
