"""The training machinery every pipeline shares: the loop, distribution, checkpoints and
resume, preemption, the tf.data service, early stopping, optimizers and schedules."""

from lmpipe.training.distribution import distribution_strategy
from lmpipe.training.optimizers import TransformerSchedule, WarmupLinearDecay
from lmpipe.training.preemption import PREEMPTED_EXIT_CODE, Preempted

__all__ = [
    "PREEMPTED_EXIT_CODE",
    "Preempted",
    "TransformerSchedule",
    "WarmupLinearDecay",
    "distribution_strategy",
]
