"""The one training loss: the masked mean over the global batch, and its trackers."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from lmpipe.models.losses import masked_cross_entropy, masked_mean, sparse_cross_entropy
from tests.fresh_process import run_script

RNG = np.random.default_rng(0)
LOGITS = RNG.normal(size=(4, 5, 7)).astype("float32")
TARGETS = RNG.integers(0, 7, size=(4, 5))
WEIGHTS = np.array([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 0, 0, 0, 0], [0, 0, 0, 0, 0]], "float32")


def reference(targets, logits, weights):
    """Cross-entropy by hand: mean of -log softmax(logits)[target] over the weighted tokens."""
    shifted = logits - logits.max(axis=-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    picked = np.take_along_axis(log_probs, targets[..., None], axis=-1)[..., 0]
    return float(-(picked * weights).sum() / max(weights.sum(), 1.0))


def test_masked_cross_entropy_is_the_mean_over_the_real_tokens_and_feeds_its_trackers():
    loss_tracker = keras.metrics.Mean(name="loss")
    accuracy_tracker = keras.metrics.Mean(name="accuracy")
    loss = masked_cross_entropy(TARGETS, LOGITS, WEIGHTS, loss_tracker, accuracy_tracker)
    expected = reference(TARGETS, LOGITS, WEIGHTS)
    np.testing.assert_allclose(float(loss), expected, rtol=1e-5)
    np.testing.assert_allclose(float(loss_tracker.result()), expected, rtol=1e-5)
    correct = (LOGITS.argmax(-1) == TARGETS) * WEIGHTS
    np.testing.assert_allclose(float(accuracy_tracker.result()), correct.sum() / WEIGHTS.sum())
    # No real token: a loss of 0, not NaN.
    assert float(masked_cross_entropy(TARGETS, LOGITS, np.zeros_like(WEIGHTS))) == 0.0


def test_the_tracker_can_report_another_quantity_than_the_loss():
    tracker = keras.metrics.Mean()
    per_token = np.full((2, 3), 4.0, "float32")
    reported = np.full((2, 3), 1.5, "float32")
    loss = masked_mean(per_token, np.ones((2, 3)), tracker, tracked=reported)
    assert float(loss) == 4.0 and float(tracker.result()) == 1.5


REPLICAS_SCRIPT = """
import numpy as np
import pytest
import tensorflow as tf

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import keras

from lmpipe.models.losses import masked_cross_entropy
from tests.models.test_losses import LOGITS, TARGETS, WEIGHTS, reference

strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
with strategy.scope():
    tracker = keras.metrics.Mean()
dataset = tf.data.Dataset.from_tensors((TARGETS, LOGITS, WEIGHTS))
batch = next(iter(strategy.experimental_distribute_dataset(dataset.unbatch().batch(4))))


@tf.function
def step(targets, logits, weights):
    return masked_cross_entropy(targets, logits, weights, tracker)


losses = strategy.run(step, args=batch)
total = float(strategy.reduce("SUM", losses, axis=None))
# Replica 0 got rows 0-1 (7 real tokens), replica 1 rows 2-3 (1): the replicas' losses add up
# to the mean over the 8 real tokens of the global batch, as does the tracker.
expected = reference(TARGETS, LOGITS, WEIGHTS)
np.testing.assert_allclose(total, expected, rtol=1e-5)
np.testing.assert_allclose(float(tracker.result()), expected, rtol=1e-5)
print("OK")
"""


def test_replica_losses_add_up_to_the_global_masked_mean():
    run_script(REPLICAS_SCRIPT)


def test_sparse_cross_entropy_and_its_gradient_match_tensorflows_fused_op():
    rng = np.random.default_rng(1)
    logits = tf.constant(rng.normal(scale=4.0, size=(3, 6, 50)).astype("float32"))
    # Far apart logits: the target's probability underflows float32 (exp(-300)), the loss not.
    logits = tf.tensor_scatter_nd_update(logits, [[0, 0, 0], [0, 1, 7]], [300.0, -300.0])
    targets = tf.constant(rng.integers(0, 50, size=(3, 6)), tf.int32)
    targets = tf.tensor_scatter_nd_update(targets, [[0, 0], [0, 1]], [3, 7])
    upstream = tf.constant(rng.uniform(size=(3, 6)).astype("float32"))
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(logits)
        ours = sparse_cross_entropy(targets, logits)
        fused = tf.nn.sparse_softmax_cross_entropy_with_logits(targets, logits)
        ours_total = tf.reduce_sum(ours * upstream)
        fused_total = tf.reduce_sum(fused * upstream)
    np.testing.assert_allclose(ours, fused, rtol=1e-5, atol=1e-5)
    assert float(ours[0, 0]) > 290 and float(ours[0, 1]) > 290  # finite, about 300 + log terms
    np.testing.assert_allclose(
        tape.gradient(ours_total, logits), tape.gradient(fused_total, logits), atol=1e-6
    )
    # 16-bit logits are computed in float32 and the gradient comes back in their dtype.
    half = tf.cast(logits, "bfloat16")
    with tf.GradientTape() as tape:
        tape.watch(half)
        total = tf.reduce_sum(sparse_cross_entropy(targets, half))
    assert tape.gradient(total, half).dtype == tf.bfloat16
    # Targets with a trailing axis of 1, as Keras accepts them.
    np.testing.assert_allclose(sparse_cross_entropy(targets[..., None], logits), ours)


def test_sparse_cross_entropy_refuses_targets_outside_the_vocabulary():
    logits = tf.zeros((2, 5))
    with pytest.raises(tf.errors.InvalidArgumentError, match="not in"):
        sparse_cross_entropy(tf.constant([1, 5]), logits)


def test_under_xla_the_cross_entropy_is_tensorflows_fused_op():
    """XLA fuses TensorFlow's op well (lmpipe.backend.compiling_with_xla): the same losses and
    gradients as without XLA, and a target outside the vocabulary gives a NaN loss there."""
    rng = np.random.default_rng(2)
    logits = tf.constant(rng.normal(scale=4.0, size=(4, 30)).astype("float32"))
    targets = tf.constant([0, 29, 7, 3])

    def loss_and_gradient(targets, logits):
        with tf.GradientTape() as tape:
            tape.watch(logits)
            loss = sparse_cross_entropy(targets, logits)
            total = tf.reduce_sum(loss)
        return loss, tape.gradient(total, logits)

    compiled = tf.function(loss_and_gradient, jit_compile=True, autograph=False)
    for ours, expected in zip(
        compiled(targets, logits), loss_and_gradient(targets, logits), strict=True
    ):
        np.testing.assert_allclose(ours, expected, rtol=1e-5, atol=1e-6)
    loss, _ = compiled(tf.constant([0, 30, -1, 3]), logits)
    assert np.isnan(np.array(loss)).tolist() == [False, True, True, False]
