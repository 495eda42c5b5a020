"""ELMo's scalar mix: a learned, softmax-weighted sum of a model's layer representations."""

import keras
from keras import ops

from lmpipe.arguments import check_bool, check_number


@keras.saving.register_keras_serializable(package="lmpipe")
class ScalarMix(keras.layers.Layer):
    """`ELMo_k = gamma * sum_j softmax(s)_j h_{k,j}`: one learned weight per layer, and a scale.

    The input stacks the `L` layer representations of a model on axis 1, `[B, L, S, D]` (any
    number of middle axes works), for instance ELMo's `[B, L + 1, S, 2H]`; the output drops
    that axis, `[B, S, D]`. The weights `s` start at 0 (an equal mix) and `gamma` at
    `initial_scale`.

    With `layer_norm=True` each layer is first normalized, as the paper suggests for some
    tasks: `(h_j - mean_j) / sqrt(var_j + epsilon)`, with one mean and variance per layer and
    example over all its real positions and features (`padding_mask`, if given, marks the real
    positions of `[B, S]`, so padding does not shift the statistics).

    Args:
        layer_norm: normalize each layer before mixing.
        initial_scale: initial value of `gamma`.
        epsilon: added to the variance with `layer_norm`.

    Call arguments:
        inputs: `[B, L, S, D]`.
        padding_mask: optional `[B, S]`, 1 on real positions (used by `layer_norm`).

    Example:

    >>> layers = keras.random.normal((2, 3, 5, 8))
    >>> tuple(ScalarMix()(layers).shape)
    (2, 5, 8)

    Reference: Peters et al., "Deep contextualized word representations", 2018, equation 1.
    """

    def __init__(self, layer_norm=False, initial_scale=1.0, epsilon=1e-12, **kwargs):
        super().__init__(**kwargs)
        check_bool("layer_norm", layer_norm)
        check_number("initial_scale", initial_scale)
        check_number("epsilon", epsilon, above=0)
        self.layer_norm = layer_norm
        self.initial_scale = float(initial_scale)
        self.epsilon = float(epsilon)

    def build(self, inputs_shape, padding_mask_shape=None):
        if len(inputs_shape) < 3 or inputs_shape[1] is None:
            raise ValueError(
                "ScalarMix expects layers stacked on axis 1, [batch, layers, ..., features], "
                f"with a known number of layers; got shape {tuple(inputs_shape)}."
            )
        self.num_layers = inputs_shape[1]
        self.layer_weights = self.add_weight(
            name="layer_weights", shape=(self.num_layers,), initializer="zeros"
        )
        self.gamma = self.add_weight(
            name="gamma", shape=(), initializer=keras.initializers.Constant(self.initial_scale)
        )
        self.built = True

    def call(self, inputs, padding_mask=None):
        x = inputs  # [B, L, S, D]
        if self.layer_norm:
            x = self._normalize(x, padding_mask)
        weights = ops.softmax(self.layer_weights)  # [L]
        shape = (1, self.num_layers) + (1,) * (len(x.shape) - 2)
        mixed = ops.sum(ops.reshape(ops.cast(weights, x.dtype), shape) * x, axis=1)
        return ops.cast(self.gamma, x.dtype) * mixed  # [B, S, D]

    def _normalize(self, x, mask):
        reduce_axes = tuple(range(2, len(x.shape)))
        if mask is None:
            mean = ops.mean(x, axis=reduce_axes, keepdims=True)  # [B, L, 1, 1]
            variance = ops.mean(ops.square(x - mean), axis=reduce_axes, keepdims=True)
        else:
            # [B, S] -> [B, 1, S, 1]: real positions of every layer and feature.
            weights = ops.cast(mask, x.dtype)
            weights = ops.reshape(weights, (ops.shape(weights)[0], 1) + tuple(weights.shape[1:]))
            weights = ops.expand_dims(weights, -1)
            count = ops.sum(weights, axis=reduce_axes, keepdims=True) * x.shape[-1]
            count = ops.maximum(count, 1.0)
            mean = ops.sum(x * weights, axis=reduce_axes, keepdims=True) / count
            variance = ops.sum(ops.square(x - mean) * weights, axis=reduce_axes, keepdims=True)
            variance = variance / count
        return (x - mean) / ops.sqrt(variance + self.epsilon)

    def compute_output_shape(self, inputs_shape, padding_mask_shape=None):
        return (inputs_shape[0],) + tuple(inputs_shape[2:])

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "layer_norm": self.layer_norm,
                "initial_scale": self.initial_scale,
                "epsilon": self.epsilon,
            }
        )
        return config
