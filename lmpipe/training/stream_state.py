"""The training run's place in the seekable stream (see `lmpipe.datasets.examples.stream`).

The training step keeps, in a variable, the stream position of the first example of the last
batch it trained (replica 0's first example: the global batch's first, on any number of
replicas); the checkpoint saves it with the number of replicas that trained. A resumed run
starts its stream one global batch after it, whatever the number of replicas now: nothing is
rebuilt to get there, and the global batches from there on are those of an uninterrupted run.
"""

import tensorflow as tf

from lmpipe.datasets.examples.stream_position import MixturePosition, StreamPosition

NOT_RECORDED = -1


class StreamState:
    """The position variable a training model keeps up to date, and the replica count.

    Made inside the strategy's scope: `variables` go into the checkpoint (`TrainingCheckpoint`'s
    `stream_state`), `position` into the model (`track_stream_position`).
    """

    def __init__(self, strategy):
        self.replicas = strategy.num_replicas_in_sync
        self.position = tf.Variable(
            tf.fill([3], tf.constant(NOT_RECORDED, tf.int64)),
            trainable=False,
            name="stream_position",
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

    def last_batch(self):
        """The `StreamPosition` of the first example of the last batch trained, or None if no
        batch of a stream was trained (or the checkpoint predates the stream)."""
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
