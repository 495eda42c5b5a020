import keras
import numpy as np
import pytest

from lmpipe.layers.rnn_decoder import RnnDecoder
from lmpipe.layers.rnn_encoder import RnnEncoder
from tests.layer_checks import check_layer

RNG = np.random.default_rng(11)


def padded_sequence(batch=3, length=6, dim=8):
    padding_mask = np.ones((batch, length), "int32")
    padding_mask[1, 4:] = 0
    padding_mask[2, 2:] = 0
    return RNG.normal(size=(batch, length, dim)).astype("float32"), padding_mask


@pytest.mark.parametrize(
    ("cell", "bidirectional"), [("gru", False), ("lstm", True)], ids=["gru", "bilstm"]
)
def test_rnn_encoder_passes_the_standard_layer_checks(cell, bidirectional):
    inputs, padding_mask = padded_sequence()
    check_layer(
        RnnEncoder,
        {"units": 5, "cell": cell, "bidirectional": bidirectional},
        {"inputs": inputs, "padding_mask": padding_mask},
        expected_output_shape=(3, 6, 10 if bidirectional else 5),
        run_jit=False,
    )


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_final_state_is_the_state_after_the_last_real_token_in_both_directions(cell):
    inputs, padding_mask = padded_sequence()
    encoder = RnnEncoder(4, cell=cell, bidirectional=True)
    sequence, final_state = encoder(inputs, padding_mask=padding_mask)
    for row in range(3):
        length = int(padding_mask[row].sum())
        alone_sequence, alone_state = encoder(inputs[row : row + 1, :length])
        for state, alone in zip(final_state, alone_state, strict=True):
            np.testing.assert_allclose(state[row], alone[0], atol=1e-5)
        np.testing.assert_allclose(sequence[row, :length], alone_sequence[0], atol=1e-5)


def test_encoder_and_decoder_survive_a_keras_file_round_trip(tmp_path):
    # check_layer's own round trip compares nested tuples with the lists Keras restores:
    # compare the flattened outputs instead.
    inputs, padding_mask = padded_sequence(dim=12)
    symbolic_inputs = keras.Input((None, 12), name="source")
    symbolic_mask = keras.Input((None,), dtype="int32", name="source_mask")
    symbolic_targets = keras.Input((None, 8), name="targets")
    sequence, state = RnnEncoder(5, cell="lstm", bidirectional=True)(
        symbolic_inputs, padding_mask=symbolic_mask
    )
    outputs, _ = RnnDecoder(10, form="attention", cell="lstm")(
        symbolic_targets, state, encoder_sequence=sequence, encoder_padding_mask=symbolic_mask
    )
    model = keras.Model([symbolic_inputs, symbolic_mask, symbolic_targets], [outputs, *state])
    batch = [inputs, padding_mask, RNG.normal(size=(3, 4, 8)).astype("float32")]
    path = tmp_path / "rnn.keras"
    model.save(path)
    restored = keras.models.load_model(path)
    for expected, actual in zip(model(batch), restored(batch), strict=True):
        np.testing.assert_allclose(actual, expected, atol=1e-6)


def decoder_inputs(form, batch=3, steps=4):
    inputs, padding_mask = padded_sequence(batch=batch, dim=12)
    values = {
        "inputs": RNG.normal(size=(batch, steps, 8)).astype("float32"),
        "initial_state": RNG.normal(size=(batch, 10)).astype("float32"),
    }
    if form == "context":
        values["context"] = RNG.normal(size=(batch, 12)).astype("float32")
    if form == "attention":
        values["encoder_sequence"] = inputs
        values["encoder_padding_mask"] = padding_mask
    return values


@pytest.mark.parametrize(("form", "extra"), [("plain", 0), ("context", 12), ("attention", 12)])
def test_rnn_decoder_passes_the_standard_layer_checks(form, extra):
    check_layer(
        RnnDecoder,
        {"units": 10, "form": form, "attention_score": "general"},
        decoder_inputs(form),
        expected_output_shape=(3, 4, 10 + extra),
        run_jit=False,
    )


@pytest.mark.parametrize("form", ["context", "attention"])
@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_contextualized_and_attentional_decoders_use_the_source(form, cell):
    values = decoder_inputs(form)
    inputs = values.pop("inputs")
    initial_state = [values.pop("initial_state")] * (2 if cell == "lstm" else 1)
    decoder = RnnDecoder(10, form=form, cell=cell)
    outputs, _ = decoder(inputs, initial_state, **values)
    zeroed = {
        name: np.zeros_like(value) if name in ("context", "encoder_sequence") else value
        for name, value in values.items()
    }
    outputs_zeroed, _ = decoder(inputs, initial_state, **zeroed)
    # Same previous tokens, same initial state: only the source differs, and the decoder
    # state (the first `units` output features) changes at every step.
    difference = np.abs(np.asarray(outputs)[..., :10] - np.asarray(outputs_zeroed)[..., :10])
    assert difference.max(axis=-1).min() > 1e-4


def test_plain_decoder_has_no_source_input():
    values = decoder_inputs("attention")
    decoder = RnnDecoder(10, form="plain")
    outputs, _ = decoder(values["inputs"], [values["initial_state"]])
    assert outputs.shape == (3, 4, 10)
    with pytest.raises(ValueError, match="encoder_sequence"):
        decoder(
            values["inputs"],
            [values["initial_state"]],
            encoder_sequence=values["encoder_sequence"],
        )
    with pytest.raises(ValueError, match="context"):
        decoder(values["inputs"], [values["initial_state"]], context=values["initial_state"])
    # Its only access to the source is the initial state: a different one changes the output.
    other, _ = decoder(values["inputs"], [values["initial_state"] + 1.0])
    assert np.abs(np.asarray(other) - np.asarray(outputs)).min() > 1e-5


def test_attention_decoder_ignores_padded_encoder_positions():
    values = decoder_inputs("attention")
    decoder = RnnDecoder(10, form="attention", attention_score="additive")
    padded = values["encoder_padding_mask"][:, :, None] == 0
    outputs = []
    for fill in (50.0, -3.0):
        sequence = np.where(padded, fill, values["encoder_sequence"]).astype("float32")
        output, _ = decoder(
            values["inputs"],
            [values["initial_state"]],
            encoder_sequence=sequence,
            encoder_padding_mask=values["encoder_padding_mask"],
        )
        outputs.append(np.asarray(output))
    np.testing.assert_allclose(outputs[0], outputs[1], atol=1e-5)


@pytest.mark.parametrize("form", ["plain", "context", "attention"])
def test_stepping_reproduces_the_teacher_forced_outputs(form):
    values = decoder_inputs(form)
    inputs = values.pop("inputs")
    states = [values.pop("initial_state")] * 2
    decoder = RnnDecoder(10, form=form, cell="lstm", attention_score="general")
    outputs, final_state = decoder(inputs, states, **values)
    keys = None
    if form == "attention":
        keys = decoder.compute_keys(values["encoder_sequence"])
    for t in range(inputs.shape[1]):
        output, states = decoder.step(inputs[:, t], states, keys=keys, **values)
        np.testing.assert_allclose(output, outputs[:, t], atol=1e-5)
    for state, final in zip(states, final_state, strict=True):
        np.testing.assert_allclose(state, final, atol=1e-5)


def test_decoder_arguments_are_checked():
    with pytest.raises(ValueError, match="form"):
        RnnDecoder(8, form="bahdanau")
    with pytest.raises(ValueError, match="cell"):
        RnnDecoder(8, cell="rnn")
    with pytest.raises(ValueError, match="attention_score"):
        RnnDecoder(8, attention_score="cosine")
    with pytest.raises(ValueError, match="units"):
        RnnEncoder(0)
    with pytest.raises(ValueError, match="context"):
        RnnDecoder(8, form="context")(np.zeros((2, 3, 4), "float32"), [np.zeros((2, 8))])
    assert keras.saving.get_registered_object("lmpipe>RnnDecoder") is RnnDecoder
