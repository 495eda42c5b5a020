import keras
import numpy as np
import pytest

from lmpipe.layers.projected_lstm_cell import ProjectedLSTMCell
from tests.layer_checks import check_layer

INPUT_DIM, UNITS, PROJECTION = 3, 4, 2


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def lstmp_reference(x, kernel, recurrent_kernel, bias, projection_kernel, cell_clip, proj_clip):
    """TensorFlow 1's LSTMCell(num_proj, cell_clip, proj_clip) in NumPy, gates in Keras'
    order: returns every h, the last c, and the largest |c| and |h| before clipping."""
    batch, steps, _ = x.shape
    h = np.zeros((batch, projection_kernel.shape[1]))
    c = np.zeros((batch, UNITS))
    outputs, peak_c, peak_h = [], 0.0, 0.0
    for t in range(steps):
        z = x[:, t] @ kernel + h @ recurrent_kernel + bias
        i, f, g, o = np.split(z, 4, axis=-1)
        c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
        peak_c = max(peak_c, np.abs(c).max())
        c = np.clip(c, -cell_clip, cell_clip)
        h = (sigmoid(o) * np.tanh(c)) @ projection_kernel
        peak_h = max(peak_h, np.abs(h).max())
        h = np.clip(h, -proj_clip, proj_clip)
        outputs.append(h)
    return np.stack(outputs, axis=1), c, peak_c, peak_h


def hand_set_weights():
    # Large weights and inputs drive the cell state past cell_clip within a few steps.
    rng = np.random.default_rng(5)
    return {
        "kernel": rng.uniform(-2.0, 2.0, (INPUT_DIM, 4 * UNITS)),
        "recurrent_kernel": rng.uniform(-2.0, 2.0, (PROJECTION, 4 * UNITS)),
        # input and forget gates wide open, so c accumulates over the steps
        "bias": np.concatenate([np.full(UNITS, 3.0), np.full(UNITS, 4.0), np.zeros(2 * UNITS)]),
        "projection_kernel": rng.uniform(-1.5, 1.5, (UNITS, PROJECTION)),
    }


def test_recurrence_equals_the_numpy_lstmp_with_clipping_that_bites():
    weights = hand_set_weights()
    cell = ProjectedLSTMCell(UNITS, projection_dim=PROJECTION, cell_clip=1.5, proj_clip=0.4)
    rnn = keras.layers.RNN(cell, return_sequences=True, return_state=True)
    x = np.random.default_rng(6).uniform(0.0, 2.0, (2, 6, INPUT_DIM)).astype(np.float32)
    rnn.build(x.shape)
    for name, value in weights.items():
        getattr(cell, name).assign(value.astype(np.float32))
    outputs, h, c = (keras.ops.convert_to_numpy(t) for t in rnn(x))

    expected, expected_c, peak_c, peak_h = lstmp_reference(
        x.astype(np.float64), **weights, cell_clip=1.5, proj_clip=0.4
    )
    assert peak_c > 1.5 * 1.2 and peak_h > 0.4 * 1.2  # both clips change the result
    assert np.isclose(np.abs(expected_c).max(), 1.5)  # the clip holds the state
    # float32 steps against float64: a few ulps of values of order 1, over 6 steps.
    np.testing.assert_allclose(outputs, expected, atol=1e-5)
    np.testing.assert_allclose(h, expected[:, -1], atol=1e-5)
    np.testing.assert_allclose(c, expected_c, atol=1e-5)
    assert outputs.shape == (2, 6, PROJECTION) and c.shape == (2, UNITS)


def test_without_clips_or_projection_it_is_keras_lstm():
    x = np.random.default_rng(7).normal(size=(2, 5, INPUT_DIM)).astype(np.float32)
    cell = ProjectedLSTMCell(UNITS)
    ours = keras.layers.RNN(cell, return_sequences=True)
    reference = keras.layers.LSTM(UNITS, return_sequences=True)
    ours.build(x.shape)
    reference.build(x.shape)
    reference.set_weights(ours.get_weights())  # kernel, recurrent kernel, bias: same layout
    np.testing.assert_allclose(ours(x), reference(x), atol=1e-6)


def test_parameters_are_lstmp_counts_and_the_forget_bias_starts_at_one():
    cell = ProjectedLSTMCell(UNITS, projection_dim=PROJECTION)
    cell.build((None, INPUT_DIM))
    # 4U (I + P) gate kernels + 4U bias + U P projection (no bias): TF 1's LSTMCell(num_proj).
    expected = 4 * UNITS * (INPUT_DIM + PROJECTION) + 4 * UNITS + UNITS * PROJECTION
    assert cell.count_params() == expected == 104
    assert [tuple(w.shape) for w in cell.weights] == [(3, 16), (2, 16), (16,), (4, 2)]
    bias = keras.ops.convert_to_numpy(cell.bias)
    np.testing.assert_array_equal(bias, np.repeat([0.0, 1.0, 0.0, 0.0], UNITS))


@pytest.mark.parametrize("clip", [True, False], ids=["clipped", "unclipped"])
def test_projected_lstm_passes_the_standard_layer_checks(clip, tmp_path):
    clips = {"cell_clip": 0.5, "proj_clip": 0.5} if clip else {}
    check_layer(
        ProjectedLSTM,
        {"units": 6, "projection_dim": 3, **clips},
        {"inputs": np.random.default_rng(8).normal(size=(2, 5, 4)).astype(np.float32)},
        expected_output_shape=(2, 5, 3),
        tmp_path=tmp_path,
        expected_num_trainable_weights=4,
    )


def test_bad_arguments_are_rejected_with_their_name():
    for name, value in [
        ("units", 0),
        ("projection_dim", 2.5),
        ("cell_clip", 0.0),
        ("proj_clip", float("nan")),
        ("unit_forget_bias", 1),
    ]:
        arguments = {"units": 4, name: value}
        with pytest.raises(ValueError, match=name):
            ProjectedLSTMCell(**arguments)


@keras.saving.register_keras_serializable(package="lmpipe_tests")
class ProjectedLSTM(keras.layers.Layer):
    """`keras.layers.RNN(ProjectedLSTMCell(...), return_sequences=True)` as one layer, so that
    `check_layer` can make it from its arguments."""

    def __init__(self, **cell_arguments):
        layer_arguments = {
            key: cell_arguments.pop(key)
            for key in ("name", "dtype", "trainable")
            if key in cell_arguments
        }
        super().__init__(**layer_arguments)
        self.cell_arguments = cell_arguments
        self.rnn = keras.layers.RNN(
            ProjectedLSTMCell(**cell_arguments, dtype=self.dtype_policy),
            return_sequences=True,
            dtype=self.dtype_policy,
        )

    def build(self, inputs_shape):
        self.rnn.build(inputs_shape)
        self.built = True

    def call(self, inputs):
        return self.rnn(inputs)

    def get_config(self):
        return {**super().get_config(), **self.cell_arguments}
