"""An LSTM cell whose recurrent state is a projection of its output (LSTMP), with clipping."""

import keras
from keras import ops

from lmpipe.arguments import check_bool, check_number, check_positive_int
from lmpipe.layers.initializers import clone_initializer


@keras.saving.register_keras_serializable(package="lmpipe")
class ProjectedLSTMCell(keras.layers.Layer):
    """One step of an LSTM with a recurrent projection layer (LSTMP), for `keras.layers.RNN`.

        i, f, g, o = split(x_t W + h_{t-1} R + b)             # 4 x [B, units]
        c_t = clip(sigmoid(f) c_{t-1} + sigmoid(i) tanh(g), cell_clip)
        m_t = sigmoid(o) tanh(c_t)                            # [B, units]
        h_t = clip(m_t P, proj_clip)                          # [B, projection_dim]

    `h_t` is both the output and the recurrent state fed back into the gates, so the
    recurrent kernel is `[projection_dim, 4 * units]` rather than `[units, 4 * units]`: the
    cell of TensorFlow 1's `LSTMCell(num_proj=..., cell_clip=..., proj_clip=...)`, which
    bilm-tf trains ELMo with. Without `projection_dim` it is a plain LSTM (`h_t = m_t`, still
    clipped by `proj_clip` if given). A clip of None leaves the values unbounded.

    Gates are in Keras' order (input, forget, cell, output; TensorFlow 1 orders them input,
    cell, forget, output). TensorFlow 1 adds a constant `forget_bias` of 1.0 to the forget
    gate's pre-activation on every step; here `unit_forget_bias=True` starts the forget bias
    at 1.0 instead, the same function at initialization and under training (a bilm-tf
    checkpoint's bias needs 1.0 added to its forget slice). The projection has no bias.

    Masking: `keras.layers.RNN` carries the state over masked steps; `ElmoLanguageModel`
    pads rows at the end only, so padding never reaches a real position's output.

    Args:
        units: number of LSTM cells (the size of `c_t`).
        projection_dim: size of `h_t`, the projected output and recurrent state; None: no
            projection (`units`).
        cell_clip: clip `c_t` to `[-cell_clip, cell_clip]`; None: no clipping.
        proj_clip: clip `h_t` to `[-proj_clip, proj_clip]`; None: no clipping.
        kernel_initializer: initializer of the input kernel `W` `[input_dim, 4 * units]`.
        recurrent_initializer: initializer of the recurrent kernel `R`.
        projection_initializer: initializer of the projection `P` `[units, projection_dim]`.
        bias_initializer: initializer of the gates' bias `b`.
        unit_forget_bias: start the forget gate's bias at 1.0 (then `bias_initializer`
            initializes the other gates' biases).

    Call arguments:
        inputs: `x_t` `[B, input_dim]`.
        states: `[h_{t-1}, c_{t-1}]`, `[B, projection_dim]` and `[B, units]`.

    Returns:
        `(h_t, [h_t, c_t])`.

    Example:

    >>> cell = ProjectedLSTMCell(16, projection_dim=4, cell_clip=3.0, proj_clip=3.0)
    >>> outputs = keras.layers.RNN(cell, return_sequences=True)(keras.random.normal((2, 5, 8)))
    >>> tuple(outputs.shape), cell.count_params()
    ((2, 5, 4), 896)

    Reference: Sak et al., "Long Short-Term Memory Based Recurrent Neural Network
    Architectures for Large Vocabulary Speech Recognition", 2014 (LSTMP); Peters et al.,
    "Deep contextualized word representations", 2018 (ELMo's 4096 cells projected to 512,
    clipped at 3).
    """

    def __init__(
        self,
        units,
        projection_dim=None,
        cell_clip=None,
        proj_clip=None,
        kernel_initializer="glorot_uniform",
        recurrent_initializer="orthogonal",
        projection_initializer="glorot_uniform",
        bias_initializer="zeros",
        unit_forget_bias=True,
        **kwargs,
    ):
        super().__init__(**kwargs)
        check_positive_int("units", units)
        check_positive_int("projection_dim", projection_dim, none=True)
        check_number("cell_clip", cell_clip, above=0, none=True)
        check_number("proj_clip", proj_clip, above=0, none=True)
        check_bool("unit_forget_bias", unit_forget_bias)
        self.units = units
        self.projection_dim = projection_dim
        self.cell_clip = None if cell_clip is None else float(cell_clip)
        self.proj_clip = None if proj_clip is None else float(proj_clip)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.recurrent_initializer = keras.initializers.get(recurrent_initializer)
        self.projection_initializer = keras.initializers.get(projection_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.unit_forget_bias = unit_forget_bias
        self.output_size = projection_dim or units
        self.state_size = [self.output_size, units]

    def build(self, inputs_shape):
        input_dim = inputs_shape[-1]
        units = self.units
        self.kernel = self.add_weight(
            name="kernel",
            shape=(input_dim, 4 * units),
            initializer=clone_initializer(self.kernel_initializer),
        )
        self.recurrent_kernel = self.add_weight(
            name="recurrent_kernel",
            shape=(self.output_size, 4 * units),
            initializer=clone_initializer(self.recurrent_initializer),
        )
        bias_initializer = clone_initializer(self.bias_initializer)
        if self.unit_forget_bias:
            other = bias_initializer

            def bias_initializer(shape, dtype=None):
                del shape
                return ops.concatenate(
                    [
                        other((units,), dtype=dtype),
                        ops.ones((units,), dtype=dtype),
                        other((2 * units,), dtype=dtype),
                    ]
                )

        self.bias = self.add_weight(name="bias", shape=(4 * units,), initializer=bias_initializer)
        self.projection_kernel = None
        if self.projection_dim is not None:
            self.projection_kernel = self.add_weight(
                name="projection_kernel",
                shape=(units, self.projection_dim),
                initializer=clone_initializer(self.projection_initializer),
            )
        self.built = True

    def call(self, inputs, states, training=None):
        del training
        h, c = states  # [B, P], [B, U]
        z = ops.matmul(inputs, self.kernel) + ops.matmul(h, self.recurrent_kernel) + self.bias
        i, f, g, o = ops.split(z, 4, axis=-1)  # 4 x [B, U]
        c = ops.sigmoid(f) * c + ops.sigmoid(i) * ops.tanh(g)
        if self.cell_clip is not None:
            c = ops.clip(c, -self.cell_clip, self.cell_clip)
        h = ops.sigmoid(o) * ops.tanh(c)
        if self.projection_kernel is not None:
            h = ops.matmul(h, self.projection_kernel)  # [B, P]
        if self.proj_clip is not None:
            h = ops.clip(h, -self.proj_clip, self.proj_clip)
        return h, [h, c]

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "units": self.units,
                "projection_dim": self.projection_dim,
                "cell_clip": self.cell_clip,
                "proj_clip": self.proj_clip,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "recurrent_initializer": keras.initializers.serialize(self.recurrent_initializer),
                "projection_initializer": keras.initializers.serialize(self.projection_initializer),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
                "unit_forget_bias": self.unit_forget_bias,
            }
        )
        return config
