"""Recurrent decoders in their three historical forms: plain, fixed context, attention."""

import keras
from keras import ops

from lmpipe.arguments import check_positive_int
from lmpipe.layers.initializers import clone_initializer
from lmpipe.layers.rnn_attention import SCORES, RnnAttention
from lmpipe.layers.rnn_encoder import CELLS

FORMS = ("plain", "context", "attention")


@keras.saving.register_keras_serializable(package="lmpipe")
class RnnDecoder(keras.layers.Layer):
    """A GRU/LSTM decoder that sees the source in one of three ways, by `form`:

        "plain"      s_t = f(s_{t-1}, y_{t-1});           o_t = s_t
                     the encoder's final state only initializes s_0 (Sutskever et al., 2014).
        "context"    s_t = f(s_{t-1}, [y_{t-1}; c]);      o_t = [s_t; c]
                     a fixed summary c of the source enters every step (Cho et al., 2014).
        "attention"  c_t = Attend(s_{t-1}, h_1..h_S);     s_t = f(s_{t-1}, [y_{t-1}; c_t]);
                     o_t = [s_t; c_t]: the context is recomputed at every step from the
                     previous state (Bahdanau et al., 2015), with an additive, dot or general
                     score (`RnnAttention`; the latter two are Luong et al.'s, 2015).
    `y_{t-1}` is the embedded previous target token (the call's `inputs`), `f` the GRU or LSTM
    cell, and `o_t` the output from which a projection predicts `y_t`.

    The teacher-forced call and the one-step `step` share one code path (a scan over `step`),
    so incremental decoding reproduces the teacher-forced outputs exactly. Outputs at padded
    target positions are computed but carry no meaning.

    Args:
        units: size of the decoder state (and of the initial state: 2 x the encoder units for a
            bidirectional encoder).
        form: "plain", "context" or "attention".
        cell: "gru" or "lstm".
        attention_score: "additive", "dot" or "general" (form "attention" only).
        attention_units: hidden size of the additive score; defaults to `units`.
        kernel_initializer: initializer of the input and attention kernels.
        recurrent_initializer: initializer of the recurrent kernels.

    Call arguments:
        inputs: embedded previous target tokens `[B, T, E]`.
        initial_state: list or tuple of `[B, units]` tensors (h for a GRU, h and c for an LSTM).
        context: `[B, C]`, the source summary; form "context" only.
        encoder_sequence: `[B, S, H]`, the encoder states; form "attention" only.
        encoder_padding_mask: `[B, S]`, 1 for real source positions (form "attention").

    Returns:
        `(outputs, final_state)`: `[B, T, output_size]` and the tuple of final states.

    Example:

    >>> decoder = RnnDecoder(16, form="attention", attention_score="general")
    >>> outputs, (state,) = decoder(
    ...     keras.random.normal((2, 4, 8)),
    ...     [keras.random.normal((2, 16))],
    ...     encoder_sequence=keras.random.normal((2, 6, 32)),
    ... )
    >>> tuple(outputs.shape), tuple(state.shape)
    ((2, 4, 48), (2, 16))

    Reference: Sutskever et al., "Sequence to Sequence Learning with Neural Networks", 2014;
    Cho et al., "Learning Phrase Representations using RNN Encoder-Decoder", 2014; Bahdanau
    et al., "Neural Machine Translation by Jointly Learning to Align and Translate", 2015;
    Luong et al., "Effective Approaches to Attention-based Neural Machine Translation", 2015.
    """

    def __init__(
        self,
        units,
        form="attention",
        cell="gru",
        attention_score="additive",
        attention_units=None,
        kernel_initializer="glorot_uniform",
        recurrent_initializer="orthogonal",
        **kwargs,
    ):
        super().__init__(**kwargs)
        check_positive_int("units", units)
        if form not in FORMS:
            raise ValueError(f"`form` must be one of {FORMS}, got form={form!r}.")
        if cell not in CELLS:
            raise ValueError(f"`cell` must be one of {CELLS}, got cell={cell!r}.")
        if attention_score not in SCORES:
            raise ValueError(f"`attention_score` must be one of {SCORES}, got {attention_score!r}.")
        if attention_units is not None:
            check_positive_int("attention_units", attention_units)
        self.units = units
        self.form = form
        self.cell = cell
        self.attention_score = attention_score
        self.attention_units = attention_units
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.recurrent_initializer = keras.initializers.get(recurrent_initializer)

    def build(
        self,
        inputs_shape,
        initial_state_shape=None,
        context_shape=None,
        encoder_sequence_shape=None,
        encoder_padding_mask_shape=None,
    ):
        batch, embedding_dim = inputs_shape[0], inputs_shape[-1]
        source_dim = 0
        self.attention = None
        if self.form == "context":
            if context_shape is None:
                raise ValueError('A decoder of form "context" is built with `context_shape`.')
            source_dim = context_shape[-1]
        if self.form == "attention":
            if encoder_sequence_shape is None:
                raise ValueError(
                    'A decoder of form "attention" is built with `encoder_sequence_shape`.'
                )
            source_dim = encoder_sequence_shape[-1]
            self.attention = RnnAttention(
                self.attention_score,
                units=self.attention_units or self.units,
                kernel_initializer=clone_initializer(self.kernel_initializer),
                dtype=self.dtype_policy,
                name="attention",
            )
            self.attention.build((batch, self.units), encoder_sequence_shape)
        cell_class = keras.layers.GRUCell if self.cell == "gru" else keras.layers.LSTMCell
        self.recurrent_cell = cell_class(
            self.units,
            kernel_initializer=clone_initializer(self.kernel_initializer),
            recurrent_initializer=clone_initializer(self.recurrent_initializer),
            dtype=self.dtype_policy,
            name=f"{self.cell}_cell",
        )
        self.recurrent_cell.build((batch, embedding_dim + source_dim))
        self.output_size = self.units + source_dim
        self.built = True

    def _check_source(self, context, encoder_sequence):
        given = {"context": context is not None, "encoder_sequence": encoder_sequence is not None}
        needed = {"plain": None, "context": "context", "attention": "encoder_sequence"}[self.form]
        for name, present in given.items():
            if present and name != needed:
                raise ValueError(f'A decoder of form "{self.form}" takes no `{name}`.')
        if needed is not None and not given[needed]:
            raise ValueError(f'A decoder of form "{self.form}" needs `{needed}`.')

    def compute_keys(self, encoder_sequence):
        """The attention's encoder-side projections, computed once per source (or None)."""
        if self.attention is None:
            return None
        return self.attention.compute_keys(encoder_sequence)

    def step(
        self,
        inputs,
        states,
        context=None,
        encoder_sequence=None,
        encoder_padding_mask=None,
        keys=None,
    ):
        """One decoding step: `(output [B, output_size], new_states)` for `inputs` `[B, E]`."""
        if self.form == "attention":
            # The context comes from the previous state s_{t-1} (its h for an LSTM).
            context, _ = self.attention(
                states[0], encoder_sequence, padding_mask=encoder_padding_mask, keys=keys
            )  # [B, H]
        if context is not None:
            inputs = ops.concatenate([inputs, ops.cast(context, inputs.dtype)], axis=-1)
        output, states = self.recurrent_cell(inputs, list(states))  # [B, units]
        if context is not None:
            output = ops.concatenate([output, ops.cast(context, output.dtype)], axis=-1)
        return output, tuple(states)

    def call(
        self,
        inputs,
        initial_state,
        context=None,
        encoder_sequence=None,
        encoder_padding_mask=None,
    ):
        self._check_source(context, encoder_sequence)
        if not isinstance(initial_state, (list, tuple)):
            initial_state = [initial_state]
        keys = self.compute_keys(encoder_sequence) if encoder_sequence is not None else None

        def scan_step(carry, step_inputs):
            output, states = self.step(
                step_inputs,
                carry[:-1],
                context=context,
                encoder_sequence=encoder_sequence,
                encoder_padding_mask=encoder_padding_mask,
                keys=keys,
            )
            # keras.ops.scan stacks outputs shaped like the carry: the output rides along in it.
            carry = [*states, output]
            return carry, carry

        time_major = ops.transpose(inputs, (1, 0, 2))  # [T, B, E]
        first_output = ops.zeros((ops.shape(inputs)[0], self.output_size), dtype=self.compute_dtype)
        carry, stacked = ops.scan(scan_step, [*initial_state, first_output], time_major)
        outputs, final_state = stacked[-1], carry[:-1]  # [T, B, output_size]
        return ops.transpose(outputs, (1, 0, 2)), tuple(final_state)  # [B, T, output_size]

    def compute_output_shape(
        self,
        inputs_shape,
        initial_state_shape=None,
        context_shape=None,
        encoder_sequence_shape=None,
        encoder_padding_mask_shape=None,
    ):
        source_dim = {
            "plain": 0,
            "context": context_shape[-1] if context_shape else 0,
            "attention": encoder_sequence_shape[-1] if encoder_sequence_shape else 0,
        }[self.form]
        num_states = 2 if self.cell == "lstm" else 1
        output_shape = tuple(inputs_shape[:2]) + (self.units + source_dim,)
        return output_shape, ((inputs_shape[0], self.units),) * num_states

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "units": self.units,
                "form": self.form,
                "cell": self.cell,
                "attention_score": self.attention_score,
                "attention_units": self.attention_units,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "recurrent_initializer": keras.initializers.serialize(self.recurrent_initializer),
            }
        )
        return config
