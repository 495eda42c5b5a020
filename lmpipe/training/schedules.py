"""The learning-rate schedules of the training recipes, and each recipe's choice of optimizer
and schedule: BERT's AdamW with warmup and linear decay (`adamw`), the Transformer's Adam with
the inverse-square-root schedule (`transformer_adam`), and the recurrent encoder-decoders' Adam
with a constant rate (`seq2seq_optimizer` picks between the last two)."""

import keras
from keras import ops

from lmpipe.arguments import check_number
from lmpipe.training.optimizers import FusedAdam, FusedAdamW


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
