"""The training run's place in the seekable stream (see `lmpipe.datasets.examples.stream`).

The training step keeps, in a variable, the stream position of the first example of the last
batch it trained (replica 0's first example: the global batch's first, on any number of
replicas); the checkpoint saves it with the number of replicas that trained. A resumed run
starts its stream one global batch after it, whatever the number of replicas now: nothing is
rebuilt to get there, and the global batches from there on are those of an uninterrupted run.

A `CorpusMixture`'s examples have a `[1 + K, 3]` position (`MixturePosition`); the step keeps
it, flattened and padded with -1, in a second variable of `(1 + MAX_SOURCES) * 3` values,
checkpointed under its own name: a checkpoint written before mixtures restores without it.
"""

import tensorflow as tf

from lmpipe.contract import STREAM_POSITION
from lmpipe.datasets.corpora.corpus_mixture import MAX_SOURCES
from lmpipe.datasets.examples.stream_position import MixturePosition, StreamPosition

NOT_RECORDED = -1

MIXTURE_POSITION_SIZE = (1 + MAX_SOURCES) * 3
"""The values of the mixture position variable: a `MixturePosition` of up to 8 sources."""


class StreamState:
    """The position variable a training model keeps up to date, and the replica count.

    Made inside the strategy's scope: `checkpointed` goes into the checkpoint
    (`TrainingCheckpoint`'s `stream_state`), `position` and `mixture_position` into the model
    (`track_stream_position`).
    """

    def __init__(self, strategy):
        self.replicas = strategy.num_replicas_in_sync
        self.position = tf.Variable(
            tf.fill([3], tf.constant(NOT_RECORDED, tf.int64)),
            trainable=False,
            name=STREAM_POSITION,
            aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
        )
        self.mixture_position = tf.Variable(
            tf.fill([MIXTURE_POSITION_SIZE], tf.constant(NOT_RECORDED, tf.int64)),
            trainable=False,
            name="stream_mixture_position",
            aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
        )
        self.saved_replicas = tf.Variable(
            tf.constant(self.replicas, tf.int64),
            trainable=False,
            name="stream_replicas",
            aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
        )

    @property
    def variables(self):
        """`{name: variable}` for the checkpoint."""
        return {"position": self.position, "replicas": self.saved_replicas}

    @property
    def checkpointed(self):
        """`{name: {name: variable}}`, the checkpoint's optional entries: a checkpoint written
        before the stream lacks both, one written before mixtures the second."""
        return {"stream": self.variables, "stream_mixture": {"position": self.mixture_position}}

    def last_batch(self):
        """The `StreamPosition` (a mixture's: `MixturePosition`) of the first example of the
        last batch trained, or None if no batch of a stream was trained (or the checkpoint
        predates the stream)."""
        mixed = self.mixture_position.numpy()
        if mixed[0] != NOT_RECORDED:
            return MixturePosition.of(mixed)
        values = self.position.numpy()
        if values[0] == NOT_RECORDED:
            return None
        return StreamPosition(*(int(value) for value in values))

    def restored_replicas(self):
        """The number of replicas that trained the restored checkpoint."""
        return int(self.saved_replicas.numpy())

    def mark_replicas(self):
        """Record this run's number of replicas (saved with the next checkpoint)."""
        self.saved_replicas.assign(self.replicas)
