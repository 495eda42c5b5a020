import keras
import numpy as np
import pytest
import tensorflow as tf

from lmpipe.models.bert import count_parameters
from lmpipe.models.transformer import TransformerConfig, TransformerSeq2Seq, transformer

RNG = np.random.default_rng(8)
BOS, EOS = 1, 2


def seq2seq_batch(vocabulary_size, batch=3, source_length=7, target_length=5):
    encoder_mask = (np.arange(source_length)[None, :] < np.array([[7], [4], [2]])).astype("int32")
    decoder_ids = RNG.integers(3, vocabulary_size, (batch, target_length)).astype("int32")
    decoder_ids[:, 0] = BOS
    return {
        "encoder_ids": RNG.integers(3, vocabulary_size, (batch, source_length)).astype("int32")
        * encoder_mask,
        "encoder_mask": encoder_mask,
        "decoder_ids": decoder_ids,
        "decoder_mask": np.ones_like(decoder_ids),
    }


def base_parameter_count(V, d, layers, d_ff):
    """The paper's base model, shared source/target embedding tied to the output layer."""
    attention = 4 * (d * d + d)  # W_Q, W_K, W_V, W_O with biases
    ffn = d * d_ff + d_ff + d_ff * d + d  # W_1, b_1, W_2, b_2
    layer_norm = 2 * d
    encoder_layer = attention + ffn + 2 * layer_norm
    decoder_layer = 2 * attention + ffn + 3 * layer_norm
    return V * d + layers * (encoder_layer + decoder_layer)  # positions are sinusoidal


def test_base_model_has_the_papers_parameter_count():
    # Vaswani et al. report ~65M parameters for the base model (Table 3) with a shared
    # source-target BPE vocabulary of about 37000 tokens; the exact count is 63,082,496.
    expected = base_parameter_count(V=37000, d=512, layers=6, d_ff=2048)
    assert expected == 63_082_496
    model = transformer(TransformerConfig.base())
    assert model.count_params() == expected
    assert count_parameters(model) == expected


def test_unshared_untied_embeddings_add_a_source_table_and_an_output_matrix():
    shared = TransformerConfig.tiny(vocabulary_size=50)
    separate = TransformerConfig.tiny(
        vocabulary_size=50, target_vocabulary_size=60, share_embeddings=False, tie_output=False
    )
    difference = transformer(separate).count_params() - transformer(shared).count_params()
    assert difference == 50 * 32 + 10 * 32 + 60 * 32  # source table, 10 more rows, W_out


def test_cached_decoding_steps_equal_teacher_forcing_on_the_full_prefix():
    model = transformer(TransformerConfig.tiny(vocabulary_size=40))
    batch = seq2seq_batch(40)
    expected = np.asarray(model(batch))  # [B, T, V]
    state = model.encode(batch["encoder_ids"], batch["encoder_mask"], max_length=5)
    step_function = tf.function(model.decode_step)
    for step in range(5):
        logits, state = step_function(
            tf.constant(batch["decoder_ids"][:, step]), state, tf.constant(step)
        )
        np.testing.assert_allclose(logits, expected[:, step], atol=1e-4)


def test_logits_never_depend_on_future_targets_or_padded_sources():
    model = transformer(TransformerConfig.tiny(vocabulary_size=40))
    batch = seq2seq_batch(40)
    reference = np.asarray(model(batch))
    changed = dict(batch)
    changed["encoder_ids"] = np.where(batch["encoder_mask"] == 1, batch["encoder_ids"], 7)
    changed["decoder_ids"] = batch["decoder_ids"].copy()
    changed["decoder_ids"][:, 3:] = 9
    output = np.asarray(model(changed))
    np.testing.assert_allclose(output[:, :3], reference[:, :3], atol=1e-5)
    assert np.abs(output[:, 3:] - reference[:, 3:]).max() > 1e-4


def test_transformer_survives_a_keras_file_round_trip(tmp_path):
    config = TransformerConfig.tiny(
        vocabulary_size=40, target_vocabulary_size=30, share_embeddings=False
    )
    model = transformer(config)
    batch = seq2seq_batch(30)
    path = tmp_path / "transformer.keras"
    model.save(path)
    restored = keras.models.load_model(path)
    assert isinstance(restored, TransformerSeq2Seq)
    assert restored.config == config
    np.testing.assert_allclose(restored(batch), model(batch), atol=1e-6)


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"hidden_dim": 30, "num_heads": 4}, "hidden_dim"),
        ({"num_encoder_layers": 0}, "num_encoder_layers"),
        ({"dropout": 1.0}, "dropout"),
        ({"vocabulary_size": 10, "target_vocabulary_size": 12}, "share_embeddings"),
        ({"target_vocabulary_size": -1, "share_embeddings": False}, "target_vocabulary_size"),
        ({"layer_norm_epsilon": 0}, "layer_norm_epsilon"),
    ],
)
def test_config_rejects_bad_values_naming_the_field(overrides, field):
    with pytest.raises(ValueError, match=field):
        TransformerConfig.tiny(**overrides)


def test_model_rejects_inputs_missing_a_feature():
    model = transformer(TransformerConfig.tiny(vocabulary_size=40))
    batch = seq2seq_batch(40)
    del batch["decoder_mask"]
    with pytest.raises(ValueError, match="decoder_mask"):
        model(batch)


def reverse_task(vocabulary_size, count, length, seed):
    """Sources of random tokens; targets are the reversed sources, then EOS."""
    rng = np.random.default_rng(seed)
    source = rng.integers(3, vocabulary_size, (count, length)).astype("int32")
    target = np.concatenate([source[:, ::-1], np.full((count, 1), EOS, "int32")], axis=1)
    decoder_ids = np.concatenate([np.full((count, 1), BOS, "int32"), target[:, :-1]], axis=1)
    features = {
        "encoder_ids": source,
        "encoder_mask": np.ones_like(source),
        "decoder_ids": decoder_ids,
        "decoder_mask": np.ones_like(decoder_ids),
    }
    return features, target


@pytest.mark.slow
def test_a_few_training_steps_learn_to_reverse():
    keras.utils.set_random_seed(0)
    model = transformer(TransformerConfig.tiny(vocabulary_size=12, dropout=0.0))
    model.compile(
        optimizer=keras.optimizers.Adam(3e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    features, target = reverse_task(12, 256, 4, seed=1)
    history = model.fit(features, target, batch_size=32, epochs=6, verbose=0)
    losses = history.history["loss"]
    # Uniform guessing costs log(12) = 2.48 nats per token.
    assert losses[0] > 1.8
    assert losses[-1] < 0.6 * losses[0]
