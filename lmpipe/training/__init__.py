"""The training machinery every pipeline shares: the loop, distribution, checkpoints and
resume, preemption, the tf.data service, early stopping, optimizers and schedules."""

from lmpipe.training.distribution import distribution_strategy
from lmpipe.training.preemption import PREEMPTED_EXIT_CODE, Preempted
from lmpipe.training.schedules import TransformerSchedule, WarmupLinearDecay

__all__ = [
    "PREEMPTED_EXIT_CODE",
    "Preempted",
    "TransformerSchedule",
    "WarmupLinearDecay",
    "distribution_strategy",
]
