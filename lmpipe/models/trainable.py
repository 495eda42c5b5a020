"""Keras model base classes for lmpipe's training models, working around Keras limits."""

import keras
import tensorflow as tf
from keras import ops

from lmpipe.backend import keras_symbolic_build, loss_tracker
from lmpipe.contract import STREAM_POSITION
from lmpipe.models.gradient_accumulation import accumulated_train_step


def without_stream_position(data):
    """`(data, position)`: a batch without the seekable stream's `stream_position` feature
    (see `lmpipe.datasets.examples.stream`), and that feature (None where it has none)."""
    if not isinstance(data, tuple) or not data or not isinstance(data[0], dict):
        return data, None
    if STREAM_POSITION not in data[0]:
        return data, None
    features = dict(data[0])
    position = features.pop(STREAM_POSITION)
    return (features, *data[1:]), position


def _keep_position(model, position):
    """Assign an example's stream `position` (`[3]`, or a mixture's `[1 + K, 3]`) to the
    variable `track_stream_position` gave for it, if any."""
    if position.shape.rank == 1:
        variable = model.__dict__.get("_stream_position")
        if variable is not None:
            variable.assign(position)
        return
    variable = model.__dict__.get("_stream_mixture_position")
    if variable is None:
        return
    values = tf.reshape(position, [-1])
    padding = variable.shape[0] - values.shape[0]
    if padding < 0:
        raise ValueError(
            f"A mixture position of {values.shape[0]} values does not fit the "
            f"{variable.shape[0]} of the position variable."
        )
    variable.assign(tf.pad(values, [[0, padding]], constant_values=-1))


def _in_replica_of_many():
    """True inside `strategy.run` of a strategy with several replicas."""
    context = tf.distribute.get_replica_context()  # None in a cross-replica context
    return context is not None and context.num_replicas_in_sync > 1


class TrainingSteps:
    """What lmpipe's training models add to `keras.Model`: for models that lmpipe builds
    completely before `fit`, and that report their metrics with `compute_metrics` returning
    `metric_results()`. Mixed in by `TrainableModel` and `FunctionalTrainableModel`.

    Two Keras 3 steps fail under MultiWorkerMirroredStrategy, and this class avoids them:
    - before training, Keras (`_maybe_symbolic_build`) pulls one batch and averages it across
      replicas with `strategy.reduce`, which cannot reduce a dict of batches there. lmpipe's
      models are built, compiled and have their optimizer built before `fit`, so that step
      has nothing to do: it is skipped then;
    - after each step Keras averages the metrics across workers with a reduction over axis 0,
      which fails on scalars: under that strategy the metrics are returned with shape [1].

    It also compiles the forward pass with XLA on each replica for strategies with several
    replicas, where Keras' `jit_compile=True` fails (see `jit_compile_per_replica`), and
    accumulates the gradients of several micro-batches into one update (see
    `accumulate_gradients`).
    """

    def accumulate_gradients(self, steps=1):
        """Train on batches of `steps` micro-batches: each step runs the forward and backward
        passes one micro-batch at a time (the memory of one) and makes one optimizer update
        with the gradients of the whole batch (see `gradient_accumulation`). 1: as Keras does.
        """
        # Set without Keras' attribute tracking: a training setting, not state to save.
        object.__setattr__(self, "_accumulation_steps", steps)

    def track_stream_position(self, variable, mixture_variable=None):
        """Keep in `variable` (int64 `[3]`, made in the strategy's scope with
        `aggregation=ONLY_FIRST_REPLICA`) the stream position of the first example of each
        batch trained: replica 0's, the first of the global batch. A mixture's example's
        position (`[1 + K, 3]`) goes flattened into `mixture_variable` (int64, at least `3 +
        3K` values), the rest of it -1. Batches without a `stream_position` leave them as
        they are. None: stop keeping it."""
        # Set without Keras' attribute tracking: the training loop checkpoints them.
        object.__setattr__(self, "_stream_position", variable)
        object.__setattr__(self, "_stream_mixture_position", mixture_variable)

    def train_step(self, data):
        data, position = without_stream_position(data)
        if position is not None:
            _keep_position(self, tf.cast(position[0], tf.int64))
        steps = self.__dict__.get("_accumulation_steps", 1)
        if steps == 1:
            return super().train_step(data)
        return accumulated_train_step(self, data, steps)

    def test_step(self, data):
        """Keras' evaluation step, but for the batch count of its `loss`.

        Keras weighs each batch's loss by `tf.shape(x)[0]`, which is a constant where the batch
        size is static (every pretraining dataset's). TensorFlow then runs that count without
        waiting for the data, also in the call that finds a finite dataset exhausted: Keras'
        `loss` of an evaluation counted one batch more than it saw (n / (n + 1) of the mean;
        half of it for one batch). Here the count waits for the batch's loss."""
        data, _ = without_stream_position(data)
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        y_pred = self(x, training=False)
        loss = self.compute_loss(
            x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=False
        )
        with tf.control_dependencies([loss]):
            batch = tf.identity(tf.shape(tf.nest.flatten(x)[0])[0])
        # What Keras' step gives its tracker: the replica's loss times the replicas (lmpipe's
        # losses are divided by global counts, see `lmpipe.models.losses`).
        replicas = tf.distribute.get_strategy().num_replicas_in_sync
        loss_tracker(self).update_state(loss * replicas, sample_weight=batch)
        return self.compute_metrics(x, y, y_pred, sample_weight=sample_weight)

    def jit_compile_per_replica(self, enabled=True):
        """XLA-compile the training forward pass (and with it the backward pass) on each
        replica, for training under a strategy with several replicas; compile the model with
        `jit_compile=False` then.

        Keras' `jit_compile=True` compiles the function that runs the step on every replica
        (`strategy.run` inside), one XLA program over the devices of all replicas, which XLA
        cannot place ("Trying to access resource ... located in device CPU:1 from device
        CPU:0"). TensorFlow compiles a function called inside `strategy.run` per replica, but
        only without cross-replica communication inside it on CPUs (a `merge_call` cannot run
        in a compiled function there). So the model's call is what is compiled: the loss
        (which sums counts over the replicas) and the optimizer (which sums the gradients)
        run outside XLA, as they run in Keras' step.
        """
        forward = None
        if enabled:
            # Keras' own `__call__`, so that its input conversion, dtype policy and training
            # argument work as usual inside the compiled function.
            forward = tf.function(
                lambda *args, **kwargs: keras.Model.__call__(self, *args, **kwargs),
                jit_compile=True,
                reduce_retracing=True,
            )
        # Set without Keras' attribute tracking: a function, not state to track or save.
        object.__setattr__(self, "_replica_forward", forward)

    def __call__(self, *args, **kwargs):
        if args and isinstance(args[0], dict) and STREAM_POSITION in args[0]:
            # A batch of the stream given as it is: its addresses are no input.
            args = ({k: v for k, v in args[0].items() if k != STREAM_POSITION}, *args[1:])
        forward = self.__dict__.get("_replica_forward")
        if forward is not None and kwargs.get("training") is True and _in_replica_of_many():
            return forward(*args, **kwargs)
        return super().__call__(*args, **kwargs)

    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        optimizer_ready = self.optimizer is None or self.optimizer.built
        if self.built and optimizer_ready:
            return
        keras_symbolic_build(self, TrainingSteps, iterator=iterator, data_batch=data_batch)

    def metric_results(self):
        """`{name: result}` of every metric, shaped for the current distribution strategy."""
        results = {metric.name: metric.result() for metric in self.metrics}
        if isinstance(tf.distribute.get_strategy(), tf.distribute.MultiWorkerMirroredStrategy):
            results = {name: ops.expand_dims(value, 0) for name, value in results.items()}
        return results

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        del x, y, y_pred, sample_weight
        return self.metric_results()


class TrainableModel(TrainingSteps, keras.Model):
    """Base of lmpipe's training models written as subclasses (layers made in `__init__`, a
    `call` method); see `TrainingSteps`."""


class FunctionalTrainableModel(TrainingSteps, keras.Model):
    """Base of lmpipe's training models built functionally, with
    `super().__init__(inputs=..., outputs=...)`; see `TrainingSteps`.

    Separate from `TrainableModel` because Keras turns the class hierarchy of a model built
    that way into a functional one for good (it rewrites the bases of its ancestors up to
    `keras.Model` to `Functional`): a shared base would then make every subclass-style model
    in the process fail with "missing 'inputs' and 'outputs'".
    """
