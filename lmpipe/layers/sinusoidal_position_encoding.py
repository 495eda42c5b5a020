"""Fixed sinusoidal position encoding of the original Transformer."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="lmpipe")
class SinusoidalPositionEncoding(keras.layers.Layer):
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d)).

    Returns the encoding of the positions of `inputs` (`[batch, length, d]`), broadcast to
    the input's shape, to be added to the embeddings. The layer has no weights. For
    incremental decoding, `start_index` gives the absolute position of the first step.

    Args:
        max_wavelength: the base of the geometric progression of wavelengths (10000).

    Call arguments:
        inputs: `[B, S, d]`; only its shape is used.
        start_index: absolute position of the first element (int or scalar tensor).

    Example:

    >>> embeddings = keras.random.normal((2, 10, 16))
    >>> tuple((embeddings + SinusoidalPositionEncoding()(embeddings)).shape)
    (2, 10, 16)

    Reference: Vaswani et al., "Attention Is All You Need", 2017, section 3.5.
    """

    def __init__(self, max_wavelength=10000, **kwargs):
        super().__init__(**kwargs)
        if max_wavelength <= 0:
            raise ValueError(
                f"`max_wavelength` must be positive, got max_wavelength={max_wavelength}."
            )
        self.max_wavelength = max_wavelength
        self.built = True

    def call(self, inputs, start_index=0):
        shape = ops.shape(inputs)
        length, dim = shape[-2], shape[-1]
        positions = ops.cast(ops.arange(length) + start_index, "float32")  # [S]
        # Dimension k uses the exponent 2i/d with i = k // 2: sin on even k, cos on odd k.
        pair_index = ops.cast(ops.arange(dim) // 2 * 2, "float32")  # [d]
        inverse_frequency = ops.power(
            ops.cast(self.max_wavelength, "float32"), -pair_index / ops.cast(dim, "float32")
        )
        angles = positions[:, None] * inverse_frequency[None, :]  # [S, d]
        is_even = ops.arange(dim) % 2 == 0
        encoding = ops.where(is_even[None, :], ops.sin(angles), ops.cos(angles))
        return ops.broadcast_to(ops.cast(encoding, self.compute_dtype), shape)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update({"max_wavelength": self.max_wavelength})
        return config
