"""Sinusoidal encodings of relative distances, as Transformer-XL and XLNet use them."""

import keras
from keras import ops

from lmpipe.arguments import check_positive_int


@keras.saving.register_keras_serializable(package="lmpipe")
class RelativePositionEncoding(keras.layers.Layer):
    """R_k = [sin(k / 10000^(2i/d)), cos(k / 10000^(2i/d))] for the distances k of XLNet.

    For `Q` query positions that follow `M` memory positions (`K = M + Q` keys), the layer
    encodes the `K + Q` distances `K, K - 1, ..., -Q + 1` in this order (XLNet's bidirectional
    range: a query may look at keys before and after itself). Row `p` encodes the distance
    `K - p`; `RelativeAttention`'s relative shift picks, for query `i` and key `j`, the row of
    the distance `(M + i) - j`. As in XLNet (and unlike `SinusoidalPositionEncoding`) the sines
    fill the first half of the `d` features and the cosines the second half. With `clamp_len`
    the distances are clamped to `[-clamp_len, clamp_len]`. The layer has no weights.

    With `bi_data=True` (XLNet's `bi_data`: the second half of the batch is text read
    backward) each example gets its own encodings: the first `B // 2` rows the distances
    above, the other rows their negations `-K, -K + 1, ..., Q - 1`. A backward row holds the
    text in reverse order, so a key `d` positions before its query in the row is `d` positions
    after it in the text: its distance is `-d`, and the text keeps its real geometry.

    Args:
        hidden_dim: width `d` of the encodings (even).
        clamp_len: if set, the largest distance that is told apart.
        max_wavelength: the base of the geometric progression of wavelengths (10000).

    Call arguments:
        inputs: `[B, Q, *]`, the query positions; only its length is used.
        memory: optional `[B, M, *]`, memory positions before the queries; only its length is
            used.
        bi_data: a Python bool; True gives the second half of the batch (rows `B // 2` on) the
            negated distances.

    Returns:
        `[K + Q, hidden_dim]`, shared by every example of the batch; with `bi_data=True`,
        `[B, K + Q, hidden_dim]`, one per example.

    Example:

    >>> encoding = RelativePositionEncoding(hidden_dim=8)
    >>> tuple(encoding(keras.ops.zeros((2, 5, 8)), memory=keras.ops.zeros((2, 3, 8))).shape)
    (13, 8)
    >>> tuple(encoding(keras.ops.zeros((2, 5, 8)), bi_data=True).shape)
    (2, 10, 8)

    Reference: Dai et al., "Transformer-XL", 2019, section 3.3; Yang et al., "XLNet", 2019,
    and its open-source `relative_positional_encoding`.
    """

    def __init__(self, hidden_dim, clamp_len=None, max_wavelength=10000, **kwargs):
        super().__init__(**kwargs)
        check_positive_int("hidden_dim", hidden_dim)
        if hidden_dim % 2:
            raise ValueError(f"`hidden_dim` must be even, got hidden_dim={hidden_dim}.")
        if clamp_len is not None:
            check_positive_int("clamp_len", clamp_len)
        if max_wavelength <= 0:
            raise ValueError(
                f"`max_wavelength` must be positive, got max_wavelength={max_wavelength}."
            )
        self.hidden_dim = hidden_dim
        self.clamp_len = clamp_len
        self.max_wavelength = max_wavelength
        self.built = True

    def call(self, inputs, memory=None, bi_data=False):
        query_length = ops.shape(inputs)[1]
        memory_length = 0 if memory is None else ops.shape(memory)[1]
        key_length = memory_length + query_length
        # Distances K, K - 1, ..., -Q + 1.
        distances = ops.cast(key_length - ops.arange(key_length + query_length), "float32")
        if not bi_data:
            return self._encode(distances)  # [K + Q, d]
        # Rows of the second half read the text backward: the same keys at minus the distance.
        both = ops.stack([self._encode(distances), self._encode(-distances)])  # [2, K + Q, d]
        batch = ops.shape(inputs)[0]
        backward = ops.cast(ops.arange(batch) >= batch // 2, "int32")  # [B]
        return ops.take(both, backward, axis=0)  # [B, K + Q, d]

    def _encode(self, distances):
        if self.clamp_len is not None:
            distances = ops.clip(distances, -self.clamp_len, self.clamp_len)
        exponents = ops.arange(0, self.hidden_dim, 2, dtype="float32") / self.hidden_dim
        inverse_frequency = 1.0 / ops.power(float(self.max_wavelength), exponents)  # [d / 2]
        angles = distances[:, None] * inverse_frequency[None, :]  # [K + Q, d / 2]
        encoding = ops.concatenate([ops.sin(angles), ops.cos(angles)], axis=-1)  # [K + Q, d]
        return ops.cast(encoding, self.compute_dtype)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "hidden_dim": self.hidden_dim,
                "clamp_len": self.clamp_len,
                "max_wavelength": self.max_wavelength,
            }
        )
        return config
