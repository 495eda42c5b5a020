"""A recurrent (GRU or LSTM, optionally bidirectional) encoder of embedded source tokens."""

import keras
from keras import ops

from lmpipe.arguments import check_dropout, check_positive_int
from lmpipe.layers.initializers import clone_initializer

CELLS = ("gru", "lstm")


@keras.saving.register_keras_serializable(package="lmpipe")
class RnnEncoder(keras.layers.Layer):
    """Reads a padded sequence with a GRU or an LSTM; returns every state and the final one.

    Padded positions (`padding_mask` 0, at the end of each row) are skipped: the final state
    is the state after the last real token, in both directions of a bidirectional encoder
    (whose backward direction starts at the last real token). Outputs at padded positions
    carry no meaning; attention over them must use the same `padding_mask`.

    A bidirectional encoder concatenates the forward and backward states, so both the
    sequence and the final state have `2 * units` features (Bahdanau et al.'s annotations).

    Args:
        units: size of the recurrent state (per direction).
        cell: "gru" or "lstm".
        bidirectional: read the sequence in both directions.
        dropout: dropout rate on the inputs of the recurrent layer.
        kernel_initializer: initializer of the input kernels.
        recurrent_initializer: initializer of the recurrent kernels.

    Call arguments:
        inputs: embedded tokens `[B, S, E]`.
        padding_mask: `[B, S]`, 1 for real tokens; None = no padding.
        training: enables dropout.

    Returns:
        `(sequence, final_state)`: `[B, S, D]` and a tuple of `[B, D]` tensors (`(h,)` for a
        GRU, `(h, c)` for an LSTM), D = `output_size`.

    Example:

    >>> encoder = RnnEncoder(16, cell="lstm", bidirectional=True)
    >>> sequence, (h, c) = encoder(keras.random.normal((2, 5, 8)))
    >>> tuple(sequence.shape), tuple(h.shape), tuple(c.shape)
    ((2, 5, 32), (2, 32), (2, 32))

    Reference: Sutskever et al., "Sequence to Sequence Learning with Neural Networks", 2014;
    Cho et al., "Learning Phrase Representations using RNN Encoder-Decoder", 2014; Bahdanau
    et al., 2015 (bidirectional encoder).
    """

    def __init__(
        self,
        units,
        cell="gru",
        bidirectional=False,
        dropout=0.0,
        kernel_initializer="glorot_uniform",
        recurrent_initializer="orthogonal",
        **kwargs,
    ):
        super().__init__(**kwargs)
        check_positive_int("units", units)
        if cell not in CELLS:
            raise ValueError(f"`cell` must be one of {CELLS}, got cell={cell!r}.")
        check_dropout("dropout", dropout)
        self.units = units
        self.cell = cell
        self.bidirectional = bool(bidirectional)
        self.dropout = dropout
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.recurrent_initializer = keras.initializers.get(recurrent_initializer)

    @property
    def output_size(self):
        """Features of every state: `units`, or `2 * units` when bidirectional."""
        return self.units * (2 if self.bidirectional else 1)

    def build(self, inputs_shape):
        layer_class = keras.layers.GRU if self.cell == "gru" else keras.layers.LSTM
        rnn = layer_class(
            self.units,
            return_sequences=True,
            return_state=True,
            dropout=self.dropout,
            kernel_initializer=clone_initializer(self.kernel_initializer),
            recurrent_initializer=clone_initializer(self.recurrent_initializer),
            dtype=self.dtype_policy,
            name=self.cell,
        )
        if self.bidirectional:
            rnn = keras.layers.Bidirectional(rnn, merge_mode="concat", name="bidirectional")
        rnn.build(inputs_shape)
        self.rnn = rnn
        self.built = True

    def call(self, inputs, padding_mask=None, training=None):
        mask = None if padding_mask is None else ops.cast(padding_mask, "bool")
        sequence, *states = self.rnn(inputs, mask=mask, training=training)  # [B, S, D]
        if self.bidirectional:
            # Keras lists the forward states, then the backward ones: pair them up.
            half = len(states) // 2
            states = [
                ops.concatenate([forward, backward], axis=-1)
                for forward, backward in zip(states[:half], states[half:], strict=True)
            ]
        return sequence, tuple(states)

    def compute_output_shape(self, inputs_shape, padding_mask_shape=None):
        batch = inputs_shape[0]
        state_shape = (batch, self.output_size)
        num_states = 2 if self.cell == "lstm" else 1
        return (tuple(inputs_shape[:2]) + (self.output_size,), (state_shape,) * num_states)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "units": self.units,
                "cell": self.cell,
                "bidirectional": self.bidirectional,
                "dropout": self.dropout,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "recurrent_initializer": keras.initializers.serialize(self.recurrent_initializer),
            }
        )
        return config
