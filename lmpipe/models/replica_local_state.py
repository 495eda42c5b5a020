"""Per-replica variables in a checkpoint: every replica's own value, saved and restored."""

import tensorflow as tf

from lmpipe.backend import trackable_base


class ReplicaLocalState(trackable_base()):
    """Checkpoints `ON_READ` variables that hold a different value on each replica.

    A `tf.Variable` made with `synchronization=ON_READ` under a distribution strategy keeps one
    value per replica (XLNet's memory of the text each replica reads), but a checkpoint of the
    variable itself holds a single aggregate (with `ONLY_FIRST_REPLICA`, replica 0's value),
    and restoring writes that one value to every replica. Put in a `tf.train.Checkpoint`, this
    object saves each variable as `[R, *shape]`, the values of the `R` replicas in replica-id
    order gathered from every worker, and restores row `r` to replica `r`. Outside a strategy
    (`R = 1`) it saves the variable's value with a leading axis of 1.

    Saving and restoring run a collective gather under a multi-worker strategy, so every
    worker must save and restore together (as `TrainingCheckpoint` does). A checkpoint of
    another number of replicas or another shape does not restore: a ValueError says so.

    Args:
        variables: `{name: tf.Variable}`, the variables, created in `strategy`'s scope.
        strategy: the `tf.distribute.Strategy` they were created in; the current one (from
            `tf.distribute.get_strategy()`) by default.
    """

    def __init__(self, variables, strategy=None):
        self._variables = dict(variables)
        self._strategy = strategy or tf.distribute.get_strategy()

    def _serialize_to_tensors(self):
        tensors = {}
        for name, variable in self._variables.items():
            local = self._strategy.experimental_local_results(variable)
            if len(local) == self._strategy.num_replicas_in_sync:
                # Every replica is on this machine, its values in replica-id order: no
                # collective (which would also be traced anew at every save).
                tensors[name] = tf.stack([value.read_value() for value in local])
            else:
                values = self._strategy.run(lambda variable=variable: variable.read_value()[None])
                tensors[name] = self._strategy.gather(values, axis=0)
        return tensors  # {name: [R, *shape]}

    def _restore_from_tensors(self, restored_tensors):
        replicas = self._strategy.num_replicas_in_sync
        for name, variable in self._variables.items():
            saved = restored_tensors[name]
            expected = (replicas, *variable.shape)
            # Restoring inside a tf.function (several workers) may not know the shape: then
            # the assignment itself refuses a wrong one.
            if saved.shape.is_fully_defined() and tuple(saved.shape) != expected:
                raise ValueError(
                    f"The checkpoint holds `{name}` of shape {tuple(saved.shape)} (replicas, "
                    f"*shape), but this run has {expected}: resume with the number of replicas "
                    "and the per-replica batch size that wrote it."
                )
            local = self._strategy.experimental_local_results(variable)
            if len(local) == replicas:  # every replica here, in replica-id order
                for replica, component in enumerate(local):
                    component.assign(saved[replica])
                continue

            def assign(variable=variable, saved=saved):
                replica = tf.distribute.get_replica_context().replica_id_in_sync_group
                variable.assign(tf.gather(saved, replica))

            self._strategy.run(assign)
        return {}
