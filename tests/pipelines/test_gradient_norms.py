"""Clipping measures the gradient itself: a sparse gradient's repeated rows are summed by index
before any norm is taken, and the optimizer updates with the dense gradient they stand for."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from lmpipe.training import optimizers as optimizer_module
from lmpipe.training.gradient_norms import global_norm, summed_rows
from lmpipe.training.optimizers import FusedAdam, FusedAdamW
from tests.fresh_process import run_script


def repeated_rows(rng, rows=10, width=3, lookups=12):
    """An embedding-like gradient: `lookups` rows of a [rows, width] table, indices repeated,
    values alike (as those of one token are), so that summing them is not squaring them."""
    indices = rng.integers(0, rows, size=lookups)
    assert len(set(indices.tolist())) < lookups
    return tf.IndexedSlices(
        tf.constant(rng.normal(1.0, 0.5, size=(lookups, width)), "float32"),
        tf.constant(indices, "int32"),
        tf.constant([rows, width]),
    )


def test_global_norm_of_repeated_rows_is_the_dense_gradients_norm():
    rng = np.random.default_rng(0)
    sparse = repeated_rows(rng)
    dense = tf.constant(rng.normal(size=(4, 3)), "float32")
    expected = np.sqrt(np.sum(np.square(tf.convert_to_tensor(sparse))) + np.sum(np.square(dense)))
    np.testing.assert_allclose(float(global_norm([sparse, None, dense])), expected, rtol=1e-6)
    # Squaring the rows as they come, as Keras and tf.clip_by_global_norm do, is another number.
    as_they_come = float(tf.linalg.global_norm([sparse.values, dense]))
    assert as_they_come < 0.8 * expected
    summed = summed_rows(sparse)
    assert sorted(summed.indices.numpy().tolist()) == sorted(set(sparse.indices.numpy().tolist()))
    np.testing.assert_allclose(tf.convert_to_tensor(summed), tf.convert_to_tensor(sparse))
    assert summed_rows(dense) is dense and summed_rows(None) is None


def test_global_norm_compiles_with_xla():
    sparse = repeated_rows(np.random.default_rng(1))
    compiled = tf.function(lambda: global_norm([sparse]), jit_compile=True)
    np.testing.assert_allclose(
        float(compiled()), float(tf.norm(tf.convert_to_tensor(sparse))), rtol=1e-6
    )


@pytest.mark.parametrize(
    "clipping",
    [{"global_clipnorm": 0.5}, {"clipnorm": 0.5}, {"clipvalue": 0.2}, {}, {"amsgrad": True}],
    ids=["global-clipnorm", "clipnorm", "clipvalue", "no-clip", "amsgrad"],
)
@pytest.mark.parametrize("kind", [FusedAdam, FusedAdamW])
@pytest.mark.parametrize("xla", [True, False], ids=["xla", "ops"])
def test_repeated_rows_update_as_the_dense_gradient(kind, clipping, xla, monkeypatch):
    """The optimizer given an embedding's slices with repeated rows moves the weights (and
    its moments) as given the dense gradient, clipped (norms near 8: every clip bites) or
    not."""
    monkeypatch.setattr(optimizer_module, "XLA_UPDATE_MIN_SIZE", 0 if xla else 10**9)
    rng = np.random.default_rng(2)
    initial = [rng.normal(size=(10, 3)), rng.normal(size=(4,))]
    optimizers, variables = {}, {}
    for form in ("sparse", "dense"):
        optimizers[form] = kind(learning_rate=1e-2, **clipping)
        variables[form] = [keras.Variable(value.astype("float32")) for value in initial]
    for _ in range(4):
        sparse = repeated_rows(rng)
        other = tf.constant(rng.normal(size=(4,)), "float32")
        optimizers["sparse"].apply_gradients(zip([sparse, other], variables["sparse"], strict=True))
        dense = tf.convert_to_tensor(sparse)
        optimizers["dense"].apply_gradients(zip([dense, other], variables["dense"], strict=True))
    for name in ("sparse", "dense"):
        # The dense gradient moves every row of the table (Adam's moments decay in all).
        assert not np.allclose(np.array(variables[name][0]), initial[0])
    for found, expected in zip(
        variables["sparse"] + optimizers["sparse"].variables,
        variables["dense"] + optimizers["dense"].variables,
        strict=True,
    ):
        np.testing.assert_allclose(np.array(found), np.array(expected), rtol=1e-6, atol=1e-7)


MIRRORED_SPARSE_SCRIPT = """
import numpy as np
import tensorflow as tf
(cpu,) = tf.config.list_physical_devices("CPU")
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import keras
from lmpipe.training.optimizers import FusedAdamW
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
rng = np.random.default_rng(3)
initial = rng.normal(size=(6, 2)).astype("float32")
# Each replica's lookups: row 1 four times on the first, rows once each on the second (so
# Keras' norms of the slices would be off by another factor on each), row 1 on both.
indices = np.array([[1, 1, 1, 1, 0], [4, 2, 1, 3, 5]], "int32")
values = rng.normal(1.0, 0.5, size=(3, 2, 5, 2)).astype("float32")  # [steps, replicas, ...]
results = {}
for form in ("sparse", "dense"):
    with strategy.scope():
        variable = keras.Variable(initial)
        optimizer = FusedAdamW(learning_rate=0.01, weight_decay=0.1, global_clipnorm=1.0)
        optimizer.build([variable])

    def replica_step(step_values, form=form, variable=variable, optimizer=optimizer):
        index = tf.distribute.get_replica_context().replica_id_in_sync_group
        gradient = tf.IndexedSlices(
            tf.gather(step_values, index), tf.gather(tf.constant(indices), index),
            tf.constant([6, 2]),
        )
        if form == "dense":
            gradient = tf.convert_to_tensor(gradient)
        optimizer.apply_gradients([(gradient, variable)])

    step = tf.function(
        lambda step_values, replica_step=replica_step: strategy.run(
            replica_step, args=(step_values,)
        )
    )
    for step_values in values:
        step(tf.constant(step_values))
    results[form] = [np.array(v) for v in strategy.experimental_local_results(variable.value)]
np.testing.assert_array_equal(results["sparse"][0], results["sparse"][1])
np.testing.assert_allclose(results["sparse"][0], results["dense"][0], rtol=1e-6, atol=1e-7)
assert not np.allclose(results["sparse"][0][3], initial[3])  # dense: every row moves
print("OK")
"""


def test_repeated_rows_on_two_replicas_update_as_the_dense_gradient():
    """The replicas' slices summed, their rows summed by index, then clipped by the norm of
    the whole (see the next test) and updated as the dense gradient."""
    run_script(MIRRORED_SPARSE_SCRIPT)


MIRRORED_CLIPPING_SCRIPT = """
import numpy as np
import tensorflow as tf
(cpu,) = tf.config.list_physical_devices("CPU")
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import keras
from lmpipe.training.optimizers import FusedAdamW
rng = np.random.default_rng(5)
initial = rng.normal(size=(4, 3)).astype("float32")
# Each replica's gradient, large enough to clip; on one replica their sum is the gradient.
gradients = rng.normal(0.0, 3.0, size=(3, 2, 4, 3)).astype("float32")  # [steps, replicas, ...]


def run(strategy, replica_gradient):
    with strategy.scope():
        variable = keras.Variable(initial)
        optimizer = FusedAdamW(learning_rate=0.1, weight_decay=0.1, global_clipnorm=1.0)
        optimizer.build([variable])

    def replica_step(step_gradients):
        optimizer.apply_gradients([(replica_gradient(step_gradients), variable)])

    step = tf.function(lambda g: strategy.run(replica_step, args=(g,)))
    for step_gradients in gradients:
        step(tf.constant(step_gradients))
    return [np.array(v) for v in strategy.experimental_local_results(variable.value)]


def own_share(step_gradients):
    return tf.gather(step_gradients, tf.distribute.get_replica_context().replica_id_in_sync_group)


two = run(tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]), own_share)
one = run(tf.distribute.MirroredStrategy(["/cpu:0"]), lambda g: tf.reduce_sum(g, axis=0))
np.testing.assert_array_equal(two[0], two[1])
np.testing.assert_allclose(two[0], one[0], rtol=0, atol=1e-6)
print("OK")
"""


def test_global_norm_clipping_on_two_replicas_clips_their_sum():
    """The update of two replicas equals one replica's with the summed gradient: clipped by the
    global batch's norm, not each replica's share by its own (Keras' order)."""
    run_script(MIRRORED_CLIPPING_SCRIPT)
