import keras
import numpy as np
import pytest
import tensorflow as tf

from lmpipe.models.rnn_seq2seq import RnnSeq2Seq, RnnSeq2SeqConfig, rnn_seq2seq
from tests.models.test_transformer import reverse_task, seq2seq_batch

FORMS = ["plain", "context", "attention"]


@pytest.mark.parametrize(
    "config",
    [
        RnnSeq2SeqConfig.tiny(vocabulary_size=40, form="plain", cell="lstm"),
        RnnSeq2SeqConfig.tiny(vocabulary_size=40, form="context", bidirectional=True),
        RnnSeq2SeqConfig.tiny(vocabulary_size=40, form="attention", attention_score="dot"),
        RnnSeq2SeqConfig.tiny(
            vocabulary_size=40, form="attention", cell="lstm", bidirectional=True
        ),
    ],
    ids=["plain-lstm", "context-bigru", "dot-gru", "additive-bilstm"],
)
def test_decoding_steps_equal_teacher_forcing(config):
    model = rnn_seq2seq(config)
    batch = seq2seq_batch(40)
    expected = np.asarray(model(batch))  # [B, T, V]
    state = model.encode(batch["encoder_ids"], batch["encoder_mask"])
    step_function = tf.function(model.decode_step)
    for step in range(batch["decoder_ids"].shape[1]):
        logits, state = step_function(
            tf.constant(batch["decoder_ids"][:, step]), state, tf.constant(step)
        )
        np.testing.assert_allclose(logits, expected[:, step], atol=1e-4)


@pytest.mark.parametrize("form", FORMS)
def test_padded_source_tokens_never_change_the_logits(form):
    model = rnn_seq2seq(
        RnnSeq2SeqConfig.tiny(vocabulary_size=40, form=form, bidirectional=True, dropout=0.0)
    )
    batch = seq2seq_batch(40)
    changed = dict(batch)
    changed["encoder_ids"] = np.where(batch["encoder_mask"] == 1, batch["encoder_ids"], 9)
    np.testing.assert_allclose(model(changed), model(batch), atol=1e-5)


def test_plain_decoding_state_holds_only_the_final_encoder_state():
    plain = rnn_seq2seq(RnnSeq2SeqConfig.tiny(vocabulary_size=40, form="plain", cell="lstm"))
    batch = seq2seq_batch(40)
    state = plain.encode(batch["encoder_ids"], batch["encoder_mask"])
    assert set(state) == {"decoder_state"}
    assert [tuple(t.shape) for t in state["decoder_state"]] == [(3, 32), (3, 32)]
    attention = rnn_seq2seq(RnnSeq2SeqConfig.tiny(vocabulary_size=40, form="attention"))
    state = attention.encode(batch["encoder_ids"], batch["encoder_mask"])
    assert set(state) == {"decoder_state", "encoder_sequence", "encoder_padding_mask", "keys"}


@pytest.mark.parametrize("form", ["plain", "attention"])
def test_rnn_seq2seq_survives_a_keras_file_round_trip(form, tmp_path):
    config = RnnSeq2SeqConfig.tiny(
        vocabulary_size=40, target_vocabulary_size=30, form=form, cell="lstm", bidirectional=True
    )
    model = rnn_seq2seq(config)
    batch = seq2seq_batch(30)
    path = tmp_path / "rnn.keras"
    model.save(path)
    restored = keras.models.load_model(path)
    assert isinstance(restored, RnnSeq2Seq) and restored.config == config
    np.testing.assert_allclose(restored(batch), model(batch), atol=1e-6)


def test_presets_follow_the_papers():
    assert (RnnSeq2SeqConfig.sutskever().cell, RnnSeq2SeqConfig.sutskever().form) == (
        "lstm",
        "plain",
    )
    assert RnnSeq2SeqConfig.cho().form == "context"
    bahdanau = RnnSeq2SeqConfig.bahdanau()
    assert (bahdanau.attention_score, bahdanau.bidirectional) == ("additive", True)
    assert RnnSeq2SeqConfig.luong().attention_score == "general"


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"cell": "rnn"}, "cell"),
        ({"form": "bahdanau"}, "form"),
        ({"attention_score": "cosine"}, "attention_score"),
        ({"hidden_dim": 0}, "hidden_dim"),
        ({"target_vocabulary_size": 0}, "target_vocabulary_size"),
        ({"dropout": -0.1}, "dropout"),
    ],
)
def test_config_rejects_bad_values_naming_the_field(overrides, field):
    with pytest.raises(ValueError, match=field):
        RnnSeq2SeqConfig.tiny(**overrides)


@pytest.mark.slow
@pytest.mark.parametrize("form", FORMS)
def test_a_few_training_steps_lower_the_loss_of_every_form(form):
    keras.utils.set_random_seed(0)
    model = rnn_seq2seq(RnnSeq2SeqConfig.tiny(vocabulary_size=12, form=form, dropout=0.0))
    model.compile(
        optimizer=keras.optimizers.Adam(1e-2),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    features, target = reverse_task(12, 128, 4, seed=1)
    history = model.fit(features, target, batch_size=32, epochs=4, verbose=0)
    losses = history.history["loss"]
    # Uniform guessing costs log(12) = 2.48 nats per token.
    assert losses[0] > 1.8
    assert losses[-1] < 0.85 * losses[0]
