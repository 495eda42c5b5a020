"""lmpipe's Dropout: Keras' contract (rate, scale, identity at inference) with a cheaper mask."""

import contextlib

import keras
import numpy as np
import pytest
import tensorflow as tf

from lmpipe import kernels
from lmpipe.layers import Dropout
from tests.fresh_process import run_script


@pytest.mark.parametrize("rate", [0.1, 0.5, 1e-4])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_dropout_drops_at_the_rate_and_scales_the_rest(rate, dtype):
    layer = Dropout(rate, seed=3, dtype=dtype)
    x = tf.ones((1001, 999), dtype)  # an odd number of elements: the last word's half unused
    y = np.array(tf.cast(layer(x, training=True), "float32"))
    dropped = float((y == 0).mean())
    # Within 5 binomial standard deviations of the rate.
    assert abs(dropped - rate) < 5 * np.sqrt(rate * (1 - rate) / y.size), dropped
    scale = float(tf.cast(tf.cast(1 / (1 - rate), dtype), "float32"))
    np.testing.assert_array_equal(np.unique(y), [0.0, scale])
    assert layer(x).dtype == x.dtype
    np.testing.assert_array_equal(layer(x), x)  # not training


def test_dropout_masks_follow_the_seed():
    x = tf.ones((64, 64))
    first, second = Dropout(0.3, seed=7), Dropout(0.3, seed=7)
    a, b = first(x, training=True), second(x, training=True)
    np.testing.assert_array_equal(a, b)  # the same seed, the same mask
    assert not np.array_equal(a, first(x, training=True))  # the next call draws anew
    assert not np.array_equal(a, Dropout(0.3, seed=8)(x, training=True))
    # Masks of neighbouring elements are independent: both halves of a 32-bit word are used.
    kept = np.array(a).ravel() != 0
    pairs = np.stack([kept[0::2], kept[1::2]], -1)
    both_dropped = float(np.mean(~pairs[:, 0] & ~pairs[:, 1]))
    assert abs(both_dropped - 0.09) < 0.02


def test_dropout_gradient_is_the_mask_and_it_compiles_with_xla():
    layer = Dropout(0.25, seed=1)
    x = tf.random.normal((8, 33))

    @tf.function(jit_compile=True)
    def forward_and_gradient(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = layer(x, training=True)
            total = tf.reduce_sum(y)
        return y, tape.gradient(total, x)

    y, gradient = forward_and_gradient(x)
    mask = np.where(np.array(y) == 0, 0.0, 1 / 0.75)
    np.testing.assert_allclose(gradient, mask, rtol=1e-6)
    np.testing.assert_allclose(y, np.array(x) * mask, rtol=1e-6)


def test_dropout_config_round_trip_and_noise_shape():
    layer = Dropout(0.2, noise_shape=(None, 1), seed=4)
    restored = keras.layers.deserialize(keras.layers.serialize(layer))
    assert type(restored) is Dropout
    assert (restored.rate, restored.noise_shape, restored.seed) == (0.2, (None, 1), 4)
    # A noise_shape goes through Keras' dropout: whole rows kept or dropped, Keras' values.
    y = np.array(restored(tf.ones((100, 5)), training=True))
    assert all(len(set(row)) == 1 for row in y.tolist())
    keras_layer = keras.layers.Dropout(0.2, noise_shape=(None, 1), seed=4)
    np.testing.assert_array_equal(y, keras_layer(tf.ones((100, 5)), training=True))


class _RowScale(keras.layers.Layer):
    """`x * w[row]`, `w` `[rows, D]` of ones, the row given by `x[:, 0]`: the gradient of the
    sum of a dropout of it shows in `w[row]` which elements the mask kept for that row."""

    def __init__(self, rows, **kwargs):
        super().__init__(**kwargs)
        self.rows = rows

    def build(self, shape):
        self.w = self.add_weight(shape=(self.rows, shape[-1]), initializer="ones")

    def call(self, x):
        return keras.ops.take(self.w, keras.ops.cast(x[:, 0], "int32"), axis=0)


def kept_by_step(model, data, steps):
    """Train `model` (SGD, learning rate 1, on the sum of its outputs) `steps` steps with
    `fit` on `data`; the elements each step's masks kept, `[steps, weights]` bools: those
    whose weight the step changed."""
    weights = []

    class Record(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            weights.append(np.concatenate([v.numpy().ravel() for v in model.trainable_weights]))

    weights.append(np.concatenate([v.numpy().ravel() for v in model.trainable_weights]))
    repeated = np.repeat(data, steps, axis=0)
    model.fit(
        repeated,
        np.zeros((len(repeated), 1), "float32"),
        batch_size=len(data),
        shuffle=False,
        verbose=0,
        callbacks=[Record()],
    )
    return np.diff(np.array(weights), axis=0) != 0


@pytest.mark.parametrize("path", ["compiled", "tensorflow-ops", "xla"])
def test_every_step_of_fit_and_every_call_draw_their_own_masks(path):
    """Inside `fit`'s traced step the seed must advance (not be captured as a constant), and
    the two calls of a block's one Dropout layer (both residual branches) must differ: at rate
    0.5, independent masks agree on half the elements, one mask drawn again on all of them."""
    if path == "compiled" and kernels.compiler() is None:
        pytest.skip("no C++ compiler to build lmpipe's kernels")
    size = 4096
    x = keras.Input((size,))
    dropout = Dropout(0.5)
    first, second = _RowScale(1, name="first"), _RowScale(1, name="second")
    both = keras.ops.concatenate([dropout(first(x)), dropout(second(x))], axis=-1)
    model = keras.Model(x, keras.ops.sum(both, axis=-1, keepdims=True))
    model.compile(
        optimizer=keras.optimizers.SGD(1.0),
        loss=lambda _, y: keras.ops.mean(y),
        jit_compile=path == "xla",
    )
    context = kernels.ops_only() if path == "tensorflow-ops" else contextlib.nullcontext()
    with context:
        kept = kept_by_step(model, np.zeros((1, size), "float32"), steps=3)
    calls = kept.reshape(3, 2, size)  # [step, call, element]
    # Within 6 standard deviations (1 / (2 sqrt(size)) = 0.008) of a half.
    assert np.all(np.abs(calls.mean(-1) - 0.5) < 0.05), calls.mean(-1)
    for step in range(3):
        assert abs(np.mean(calls[step, 0] == calls[step, 1]) - 0.5) < 0.05
        for earlier in range(step):
            assert abs(np.mean(kept[step] == kept[earlier]) - 0.5) < 0.05


def test_masks_of_successive_seeds_and_neighbouring_elements_are_independent():
    """The seeds a layer draws differ by one in their second word ([s, n], [s, n + 1]); the
    mask's neighbouring elements share a Philox word. Both must be independent: each pair's
    correlation within 5 standard deviations (1 / sqrt(pairs)) of 0."""
    from lmpipe.layers.dropout import scaled_keep_mask

    size = 2**20
    masks = [
        scaled_keep_mask(tf.constant([size]), 0.1, tf.constant([12345, n]), "float32").numpy() == 0
        for n in (7, 8)
    ]

    def correlation(a, b):
        return np.corrcoef(a.astype("float64"), b.astype("float64"))[0, 1]

    limit = 5 / np.sqrt(size / 2)
    assert abs(correlation(masks[0], masks[1])) < limit
    first = masks[0]
    assert abs(correlation(first[0::2], first[1::2])) < limit  # the halves of one word
    assert abs(correlation(first[1:-1:2], first[2::2])) < limit  # neighbouring words
    assert abs(first.mean() - 0.1) < 5 * np.sqrt(0.09 / size)


REPLICA_MASKS_SCRIPT = """
import numpy as np
import tensorflow as tf

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import keras

from lmpipe.layers import Dropout
from lmpipe.models.trainable import FunctionalTrainableModel
from tests.layers.test_dropout import _RowScale, kept_by_step

size = 4096
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
data = np.zeros((2, size), "float32")
data[1, 0] = 1  # row 0 (replica 0's) trains w[0], row 1 (replica 1's) w[1]
kept = {}
for per_replica_xla in (False, True):
    with strategy.scope():
        x = keras.Input((size,))
        y = Dropout(0.5, seed=3)(_RowScale(2)(x))
        model = FunctionalTrainableModel(x, keras.ops.sum(y, axis=-1, keepdims=True))
        model.compile(
            optimizer=keras.optimizers.SGD(1.0),
            loss=lambda _, y: keras.ops.sum(y),
            jit_compile=False,
        )
        model.jit_compile_per_replica(per_replica_xla)
    rows = kept_by_step(model, data, steps=1)[0].reshape(2, size)
    # Each replica's mask its own: they agree on half the elements, not on all.
    assert np.all(np.abs(rows.mean(-1) - 0.5) < 0.05), rows.mean(-1)
    assert abs(np.mean(rows[0] == rows[1]) - 0.5) < 0.05, np.mean(rows[0] == rows[1])
    kept[per_replica_xla] = {tuple(row) for row in rows}
# XLA draws the same masks.
assert kept[False] == kept[True]
print("OK")
"""


def test_replicas_draw_their_own_masks():
    """Every replica reads the same (mirrored) seed state; Keras' Dropout then drops row i of
    every replica's batch alike. lmpipe's folds the replica's id in, with and without the
    per-replica XLA forward pass."""
    run_script(REPLICA_MASKS_SCRIPT)


needs_kernel = pytest.mark.skipif(
    kernels.compiler() is None, reason="no C++ compiler to build lmpipe's kernels"
)


@needs_kernel
@pytest.mark.parametrize(
    "shape, rate, dtype, seed",
    [
        ((32, 4, 128, 128), 0.1, "float32", (5, 9)),  # attention probabilities: sharded
        ((1001, 999), 0.1, "bfloat16", (0, 0)),  # odd: the last word's high half unused
        ((3,), 0.5, "float16", (-1, 2**31 - 1)),  # fewer elements than one Philox block
        ((7, 19), 1e-4, "float32", (123, -456)),  # 32-bit words
        ((129,), 1e-4, "float64", (2**31 - 1, -(2**31))),  # one past 32-bit chunk boundaries
        ((257, 3), 0.9, "float32", (1, 1)),
        ((64, 33), 1 - 1e-6, "float32", (4, 2)),  # rounds to 2**16: nothing kept
        ((0, 5), 0.1, "float32", (1, 2)),  # empty
        ((2, 0, 3), 1e-4, "bfloat16", (1, 2)),
    ],
)
def test_compiled_mask_is_the_ops_mask(shape, rate, dtype, seed):
    from lmpipe.layers.dropout import scaled_keep_mask

    seed = tf.constant(seed, tf.int32)
    compiled = scaled_keep_mask(tf.constant(shape, tf.int32), rate, seed, dtype)
    with kernels.ops_only():
        reference = scaled_keep_mask(tf.constant(shape, tf.int32), rate, seed, dtype)
    assert compiled.dtype == reference.dtype and compiled.shape == tuple(shape)
    if rate > 1 - 2**-17:
        assert not np.any(compiled.numpy())
    np.testing.assert_array_equal(
        tf.bitcast(compiled, tf.uint8).numpy(), tf.bitcast(reference, tf.uint8).numpy()
    )


@needs_kernel
def test_compiled_mask_in_a_graph_with_its_gradient():
    layer = Dropout(0.25, seed=1)
    x = tf.random.normal((8, 33, 5))

    @tf.function
    def forward_and_gradient(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = layer(x, training=True)
            total = tf.reduce_sum(y * y)
        return y, tape.gradient(total, x)

    graph = forward_and_gradient.get_concrete_function(x).graph
    assert "LmpipeDropoutMask" in {op.type for op in graph.get_operations()}
    y, gradient = forward_and_gradient(x)
    mask = np.where(np.array(y) == 0, 0.0, 1 / 0.75)
    np.testing.assert_allclose(gradient, 2 * np.array(x) * mask**2, rtol=1e-6)
    with kernels.ops_only():
        np.testing.assert_array_equal(Dropout(0.25, seed=1)(x, training=True), y)


@pytest.mark.parametrize(
    ("rate", "dtype"),
    [(1.0, "float32"), (1.0, "bfloat16"), (1.0, "float16"), (0.99999, "float16")],
)
@pytest.mark.parametrize("path", ["compiled", "tensorflow-ops"])
def test_rates_that_keep_nothing_give_zeros_as_keras_does(rate, dtype, path):
    """Rate 1, and float16 rates whose scale 1 / (1 - rate) float16 cannot hold, give zeros
    (not a ZeroDivisionError, NaN or inf) on both paths, as Keras' Dropout does."""
    if path == "compiled" and kernels.compiler() is None:
        pytest.skip("no C++ compiler to build lmpipe's kernels")
    from lmpipe.layers.dropout import scaled_keep_mask

    x = tf.ones((64, 1024), dtype)
    context = kernels.ops_only() if path == "tensorflow-ops" else contextlib.nullcontext()
    with context:
        y = Dropout(rate, seed=5, dtype=dtype)(x, training=True)
        mask = scaled_keep_mask(tf.constant([64, 1024]), rate, tf.constant([5, 6]), dtype)
    assert y.dtype == mask.dtype == dtype
    np.testing.assert_array_equal(tf.cast(y, "float32").numpy(), np.zeros((64, 1024)))
    np.testing.assert_array_equal(tf.cast(mask, "float32").numpy(), np.zeros((64, 1024)))
    keras_output = keras.layers.Dropout(rate, seed=5, dtype=dtype)(x, training=True)
    np.testing.assert_array_equal(tf.cast(keras_output, "float32").numpy(), np.zeros((64, 1024)))


def test_rates_close_to_one_keep_some_where_the_dtype_holds_the_scale():
    layer = Dropout(0.99999, seed=5, dtype="float32")
    y = layer(tf.ones((1024, 1024)), training=True).numpy()  # 16 kept, on average
    assert set(np.unique(y).tolist()) == {0.0, np.float32(1 / (1 - 0.99999))}
