"""The one home of lmpipe's calls into TensorFlow's and Keras' private modules.

Each private symbol is wrapped here in a named function whose docstring says what it wraps and
why no public API serves, so that a TensorFlow or Keras release that moves one breaks this
file alone, and the rest of lmpipe imports only public APIs and these functions. It imports
nothing of lmpipe: every floor may use it.
"""

import keras
import tensorflow as tf
from tensorflow.python.framework import config, ops
from tensorflow.python.ops import control_flow_util


def compiling_with_xla():
    """True while tracing a function that XLA compiles (`tf.function(jit_compile=True)`, Keras'
    `jit_compile=True`, or a function called from one); False in eager execution and in
    functions TensorFlow's executor runs.

    Wraps `control_flow_util.GraphOrParentsInXlaContext(ops.get_default_graph())`: TensorFlow
    answers the question only outside its public API.

    Why lmpipe asks: some of its ops are written for TensorFlow's executor, where each op is a
    pass over memory and a hand-written gradient saves passes (`LayerNormalization`,
    `sparse_cross_entropy`, the GELU's derivative in `lmpipe.layers.activations`, the dropout
    mask and masked LM's compiled kernels). XLA fuses TensorFlow's own ops into fewer passes,
    and there the hand-written gradients are slower (a float32 BERT-mini train step under XLA
    on a 2-core CPU is 7% faster with Keras' LayerNorm and TensorFlow's fused cross-entropy
    than with lmpipe's), and XLA cannot run the compiled kernels: those ops take TensorFlow's
    way under XLA.
    """
    return control_flow_util.GraphOrParentsInXlaContext(ops.get_default_graph())


def op_determinism_enabled():
    """Whether `tf.config.experimental.enable_op_determinism()` was called.

    Wraps `tensorflow.python.framework.config.is_op_determinism_enabled`: TensorFlow's public
    API sets op determinism but does not say whether it is on (Keras asks the same private
    function). Checked on TensorFlow 2.21.
    """
    return config.is_op_determinism_enabled()


def learning_rate_schedule(optimizer):
    """The `keras.optimizers.schedules.LearningRateSchedule` a Keras optimizer was made with,
    or None where its learning rate is a number or a variable.

    Wraps `optimizer._learning_rate`: the public `optimizer.learning_rate` is the schedule's
    value at the optimizer's current step, not the schedule, and lmpipe needs the rate of an
    earlier step (the update just made). Checked on Keras 3.15.
    """
    schedule = getattr(optimizer, "_learning_rate", None)
    return (
        schedule if isinstance(schedule, keras.optimizers.schedules.LearningRateSchedule) else None
    )


def loss_tracker(model):
    """The `keras.metrics.Mean` behind the "loss" that `fit` and `evaluate` report.

    Wraps `model._loss_tracker`: Keras has no public handle on it, and lmpipe's train and test
    steps that replace Keras' (gradient accumulation, the evaluation step that counts batches
    after their loss) must feed it as Keras' own step does. Checked on Keras 3.15.
    """
    return model._loss_tracker


def adam_moments(optimizer, variable):
    """`(m, v)`: the first and second moment variables a Keras Adam optimizer keeps for
    `variable` (Keras variables).

    Wraps `optimizer._momentums[optimizer._get_variable_index(variable)]` and
    `_velocities[...]`: Keras makes the moments in `build` but offers no public access, and
    lmpipe's fused Adam update (`lmpipe.training.optimizers`) writes them. Checked on
    Keras 3.15.
    """
    index = optimizer._get_variable_index(variable)
    return optimizer._momentums[index], optimizer._velocities[index]


def uses_weight_decay(optimizer, variable):
    """Whether a Keras optimizer decays `variable`: not when `exclude_from_weight_decay` names
    it or it was excluded by `optimizer.exclude_from_weight_decay(...)`.

    Wraps `optimizer._use_weight_decay(variable)`: the exclusion rules are Keras' and have no
    public query. Checked on Keras 3.15.
    """
    return optimizer._use_weight_decay(variable)


# Keras' private hooks that lmpipe's subclasses override (a subclass must define a method
# under Keras' own name to take its place); the functions below call Keras' versions from the
# overrides. tests/test_backend.py checks that Keras still calls each.
CLIP_GRADIENTS_HOOK = "_clip_gradients"
APPLY_WEIGHT_DECAY_HOOK = "_apply_weight_decay"
SYMBOLIC_BUILD_HOOK = "_maybe_symbolic_build"


def keras_clip_gradients(optimizer, below, grads):
    """Keras' own gradient clipping (by `clipnorm`, `clipvalue` or `global_clipnorm`) of
    `optimizer`, as the class after `below` in its method order does it.

    Wraps `Optimizer._clip_gradients`, the hook `optimizer.apply` calls before the update:
    Keras' clipping has no public function, and lmpipe's fused Adam overrides the hook to
    clip by a global norm inside its update (`lmpipe.training.optimizers`). Checked on
    Keras 3.15.
    """
    return getattr(super(below, optimizer), CLIP_GRADIENTS_HOOK)(grads)


def keras_apply_weight_decay(optimizer, below, variables):
    """Keras' own decoupled weight decay of `variables` (AdamW's), as the class after `below`
    in `optimizer`'s method order does it.

    Wraps `Optimizer._apply_weight_decay`, the hook `optimizer.apply` calls before the update:
    lmpipe's fused Adam overrides it to decay inside its update. Checked on Keras 3.15.
    """
    return getattr(super(below, optimizer), APPLY_WEIGHT_DECAY_HOOK)(variables)


def keras_symbolic_build(model, below, iterator=None, data_batch=None):
    """Keras' own build of a model before `fit`/`evaluate` (from one batch of the data where
    the model or its optimizer is not built yet), as the class after `below` does it.

    Wraps `Model._maybe_symbolic_build`, the hook `fit` and `evaluate` call first: lmpipe's
    models are built before `fit`, and the hook's averaging of a batch across replicas fails
    under MultiWorkerMirroredStrategy, so `lmpipe.models.trainable` skips it for built models.
    Checked on Keras 3.15.
    """
    hook = getattr(super(below, model), SYMBOLIC_BUILD_HOOK)
    return hook(iterator=iterator, data_batch=data_batch)


def trackable_base():
    """The base class of objects a `tf.train.Checkpoint` saves through their own
    `_serialize_to_tensors` and restores through `_restore_from_tensors`.

    Wraps `tf.__internal__.tracking.Trackable`: TensorFlow's public classes (`tf.Module`,
    `tf.train.Checkpoint`) save variables as they are, while `ReplicaLocalState` saves every
    replica's value of one variable, which needs the two methods. Checked on TensorFlow 2.21.
    """
    return tf.__internal__.tracking.Trackable
