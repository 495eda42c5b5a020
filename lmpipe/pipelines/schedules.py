"""Learning-rate schedules of the pretraining recipes."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="lmpipe")
class WarmupLinearDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warmup from 0 to `peak_learning_rate` over `warmup_steps`, then linear decay to
    `end_learning_rate` at `total_steps` (BERT's schedule, appendix A.2 of the paper).

    lr(step) = peak * step / warmup                                   for step < warmup
    lr(step) = end + (peak - end) * (total - step) / (total - warmup)   after, floored at `end`
    """

    def __init__(self, peak_learning_rate, warmup_steps, total_steps, end_learning_rate=0.0):
        if peak_learning_rate <= 0:
            raise ValueError(f"`learning_rate` must be positive, got {peak_learning_rate!r}.")
        if warmup_steps < 0 or total_steps < 1 or warmup_steps > total_steps:
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
