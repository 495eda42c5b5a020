import math

import keras
import numpy as np
import pytest

from lmpipe.datasets.examples.stream import StreamPosition
from lmpipe.layers.scalar_mix import ScalarMix
from lmpipe.models.elmo import ElmoConfig
from lmpipe.pipelines.elmo_pretraining import ElmoPretraining

SEQ_LEN = 24


def tiny_config(tokenizer):
    return ElmoConfig.tiny(
        vocabulary_size=tokenizer.vocabulary_size,
        embedding_dim=32,
        lstm_units=32,
        projection_dim=32,
    )


@pytest.fixture(scope="module")
def trained(comedies, bert_tokenizer):
    pipe = ElmoPretraining(
        bert_tokenizer, seq_len=SEQ_LEN, config=tiny_config(bert_tokenizer), seed=2
    )
    history = pipe.fit(
        comedies, batch_size=16, epochs=3, steps_per_epoch=12, learning_rate=1e-2, verbose=0
    )
    return pipe, history


def test_batches_carry_both_directions_targets(comedies, bert_tokenizer):
    pipe = ElmoPretraining(bert_tokenizer, seq_len=SEQ_LEN, config=tiny_config(bert_tokenizer))
    features, labels = next(iter(pipe.dataset(comedies, batch_size=4)))
    assert sorted(labels) == ["next_ids", "previous_ids", "previous_weights", "weights"]
    ids, previous = features["token_ids"].numpy(), labels["previous_ids"].numpy()
    real = labels["previous_weights"].numpy()[:, 1:] == 1
    np.testing.assert_array_equal(previous[:, 1:][real], ids[:, :-1][real])

    # ELMo's LSTMs read across the documents of a row, as bilm-tf does: no document_ids.
    assert sorted(features) == ["padding_mask", "stream_position", "token_ids"]


def test_training_batches_resume_after_a_batch_as_the_uninterrupted_run(comedies, bert_tokenizer):
    pipe = ElmoPretraining(bert_tokenizer, seq_len=SEQ_LEN, config=tiny_config(bert_tokenizer))
    whole = [
        {name: value.numpy() for name, value in {**batch[0], **batch[1]}.items()}
        for batch in pipe.training_batches(comedies, 16, None).take(6)
    ]
    start = StreamPosition.after({"stream_position": whole[3]["stream_position"]})
    resumed = pipe.training_batches(comedies, 16, None, start=start).take(2)
    for batch, expected in zip(resumed, whole[4:], strict=True):
        for name, value in {**batch[0], **batch[1]}.items():
            assert value.numpy().tobytes() == expected[name].tobytes(), name


@pytest.mark.slow
def test_joint_pretraining_on_real_text_lowers_both_losses(trained, comedies):
    pipe, history = trained
    for direction in ("forward", "backward"):
        losses = history.history[f"{direction}_loss"]
        assert losses[0] > losses[-1] + 0.5, (direction, losses)
    results = pipe.evaluate(comedies, batch_size=16, steps=2, verbose=0)
    assert results["forward_perplexity"] == pytest.approx(math.exp(results["forward_loss"]))
    assert results["backward_perplexity"] < pipe.tokenizer.vocabulary_size / 4


@pytest.mark.slow
def test_scalar_mix_classifier_on_the_features_trains(trained):
    pipe, _ = trained
    keras.utils.set_random_seed(0)  # the head's initialization
    features = pipe.feature_model()
    features.trainable = False
    tokenizer = pipe.tokenizer
    texts = ["my good lord", "i pray you sir", "o sweet love", "what news from rome"] * 8
    labels = np.array([0, 1, 0, 1] * 8, np.int32)
    ids = tokenizer.tokenize(texts).to_tensor(default_value=tokenizer.pad_id).numpy()
    mask = (ids != tokenizer.pad_id).astype(np.int32)
    inputs = {
        name: keras.Input(shape=(None,), dtype="int32", name=name)
        for name in ("token_ids", "padding_mask")
    }
    layers = features(inputs)  # [B, L + 1, S, 2D]
    mixed = ScalarMix(layer_norm=True)(layers, padding_mask=inputs["padding_mask"])
    weights = keras.ops.expand_dims(keras.ops.cast(inputs["padding_mask"], "float32"), -1)
    pooled = keras.ops.sum(mixed * weights, axis=1) / keras.ops.sum(weights, axis=1)
    logits = keras.layers.Dense(2)(pooled)
    classifier = keras.Model(inputs, logits)
    classifier.compile(
        optimizer=keras.optimizers.Adam(0.05),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    frozen = [w.numpy().copy() for w in features.weights]
    history = classifier.fit(
        {"token_ids": ids, "padding_mask": mask}, labels, epochs=30, batch_size=32, verbose=0
    )
    assert history.history["loss"][-1] < 0.5 * history.history["loss"][0], history.history["loss"]
    for before, after in zip(frozen, features.weights, strict=True):
        np.testing.assert_array_equal(before, after.numpy())


@pytest.mark.slow
def test_save_and_load_give_the_same_features(trained, tmp_path):
    pipe, _ = trained
    pipe.save(str(tmp_path / "elmo"))
    restored = ElmoPretraining.load(str(tmp_path / "elmo"))
    ids = np.array([[101, 2026, 2204, 2935, 102, 0]], np.int32)
    batch = {"token_ids": ids, "padding_mask": (ids > 0).astype(np.int32)}
    np.testing.assert_allclose(
        restored.feature_model()(batch), pipe.feature_model()(batch), atol=1e-6
    )


def test_bad_pipeline_arguments_are_rejected_with_their_name(bert_tokenizer):
    with pytest.raises(ValueError, match="seq_len"):
        ElmoPretraining(bert_tokenizer, seq_len=1, config=tiny_config(bert_tokenizer))
    with pytest.raises(ValueError, match="ElmoConfig"):
        ElmoPretraining(bert_tokenizer, seq_len=8, config={"lstm_units": 3})
    with pytest.raises(ValueError, match="vocabulary_size"):
        ElmoPretraining(bert_tokenizer, seq_len=8, config=ElmoConfig.tiny(vocabulary_size=99))
    with pytest.raises(ValueError, match="no model yet"):
        ElmoPretraining(
            bert_tokenizer, seq_len=8, config=tiny_config(bert_tokenizer)
        ).feature_model()
