"""Gradient accumulation: N micro-batches make the update of the batch N times larger, with
exact loss denominators, and the update counter, schedule and resume count updates."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from lmpipe.datasets import TextCorpus
from lmpipe.models import BertConfig, GptConfig
from lmpipe.pipelines import BertPretraining, GptPretraining, XLNetPretraining
from lmpipe.training.gradient_norms import global_norm
from lmpipe.training.loop import train
from lmpipe.training.options import TrainingOptions


def bert_pipeline(tokenizer):
    config = BertConfig.tiny(
        vocabulary_size=tokenizer.vocabulary_size,
        hidden_dim=32,
        num_heads=2,
        intermediate_dim=64,
        max_sequence_length=48,
        dropout=0.0,  # dropout would draw other masks for two halves than for the whole
        attention_dropout=0.0,
    )
    return BertPretraining(tokenizer, seq_len=48, seed=1, config=config)


def sgd_update(pipe, batches, batch_size, accumulation_steps, steps=1, **options):
    """The weights after `steps` updates of SGD with learning rate 1 (the weights move by
    exactly the gradient) on `batches(examples_per_update)`, and the history."""
    model, history = train(
        pipe.build_model,
        lambda per_replica, context, skip: batches(per_replica).skip(skip),
        run_config={},
        batch_size=batch_size,
        epochs=1,
        steps_per_epoch=steps,
        seed=1,
        optimizer=lambda total_steps: keras.optimizers.SGD(1.0),
        options=TrainingOptions(verbose=0, accumulation_steps=accumulation_steps, **options),
    )
    assert int(model.optimizer.iterations.numpy()) == steps  # updates, not micro-batches
    return [weight.numpy() for weight in model.trainable_weights], history.history


def training_batches(pipe, corpus):
    return lambda batch_size: pipe.training_batches(corpus, batch_size, None)


def assert_same_update(whole, accumulated, atol):
    """The weights after the updates agree to `atol` (float rounding: the micro-batches sum
    in another order; a mean of micro-batch means misses by about 0.09 in the test below),
    and so do the logged losses and metrics, relatively, to 1e-5 or `atol` if larger (float16
    computation: 2.3e-5 apart with oneDNN off, as on AVX2 CPUs)."""
    (weights, history), (other_weights, other_history) = whole, accumulated
    for weight, other in zip(weights, other_weights, strict=True):
        np.testing.assert_allclose(other, weight, rtol=0, atol=atol)
    for name, values in history.items():
        np.testing.assert_allclose(other_history[name], values, rtol=max(1e-5, atol))


def test_micro_batches_give_the_gradient_of_the_whole_batch_with_exact_mlm_denominators(
    comedies, comedies_tokenizer
):
    pipe = bert_pipeline(comedies_tokenizer)
    features, labels = next(iter(pipe.dataset(comedies, 8)))
    # Fewer real predictions in the first examples: the micro-batches count different
    # numbers of them, so a mean of their means would not be the batch's mean.
    weights = labels["mask_weights"].numpy()
    weights[:3, 2:] = 0.0
    labels = {**labels, "mask_weights": tf.constant(weights)}
    for micro in (2, 4):
        counts = weights.reshape(8 // micro, micro, -1).sum(axis=(1, 2))
        assert len(set(counts.tolist())) > 1, counts

    def batches(batch_size):
        assert batch_size == 8
        return tf.data.Dataset.from_tensors((features, labels)).repeat()

    whole = sgd_update(pipe, batches, 8, 1)
    assert_same_update(whole, sgd_update(pipe, batches, 4, 2), atol=1e-5)
    assert_same_update(whole, sgd_update(pipe, batches, 2, 4), atol=1e-5)


@pytest.mark.parametrize(
    "options, atol",
    [({"jit_compile": True}, 2e-7), ({"mixed_precision": "mixed_float16"}, 1e-3)],
)
def test_accumulation_under_xla_and_loss_scaling(comedies, comedies_tokenizer, options, atol):
    pipe = bert_pipeline(comedies_tokenizer)
    batches = training_batches(pipe, comedies)
    whole = sgd_update(pipe, batches, 4, 1, steps=2, **options)
    assert_same_update(whole, sgd_update(pipe, batches, 2, 2, steps=2, **options), atol=atol)


def adamw_weights(pipe, corpus, batch_size, accumulation_steps, clipnorm, steps=12):
    """The weights after `steps` updates of the default AdamW (global-norm clipping at
    `clipnorm`, weight decay) on batches of `batch_size * accumulation_steps` examples."""
    model, _ = train(
        pipe.build_model,
        lambda per_replica, context, skip: pipe.training_batches(corpus, per_replica, None),
        run_config={},
        batch_size=batch_size,
        epochs=1,
        steps_per_epoch=steps,
        seed=1,
        options=TrainingOptions(
            verbose=0,
            learning_rate=1e-3,
            warmup_steps=0,
            clipnorm=clipnorm,
            accumulation_steps=accumulation_steps,
        ),
    )
    return [weight.numpy() for weight in model.trainable_weights]


@pytest.mark.slow
@pytest.mark.parametrize("clipnorm", [0.5, None], ids=["clipped", "no-clip"])
def test_accumulated_adamw_updates_are_the_whole_batchs_under_clipping(
    comedies, comedies_tokenizer, clipnorm
):
    """12 AdamW updates of 8 examples, at once or from k = 2, 4, 8 micro-batches: the same
    weights to float32 rounding of the sums taken in another order (1.7e-7 seen; 1e-6 asked).
    The big batch's embedding gradients are slices with repeated rows; clipped (or Adam's
    second moment taken) with the rows squared one by one they were 2.0e-4 apart with
    clipping (7.4e-3 without)."""
    pipe = bert_pipeline(comedies_tokenizer)
    if clipnorm is not None:
        # The clip bites: the first batch's gradient norm is above `clipnorm`, and its
        # segment embedding's gradient has repeated rows (two segments, 8 * 48 lookups).
        model = pipe.build_model()
        features, labels = next(iter(pipe.training_batches(comedies, 8, None)))
        with tf.GradientTape() as tape:
            predictions = model(features, training=True)
            loss = model.compute_loss(x=features, y=labels, y_pred=predictions)
        gradients = tape.gradient(loss, model.trainable_weights)
        sparse = [g for g in gradients if isinstance(g, tf.IndexedSlices)]
        assert any(len(np.unique(g.indices)) < len(g.indices) for g in sparse)
        assert float(global_norm(gradients)) > 2 * clipnorm
    whole = adamw_weights(pipe, comedies, 8, 1, clipnorm)
    for steps in (2, 4, 8):
        accumulated = adamw_weights(pipe, comedies, 8 // steps, steps, clipnorm)
        for weight, other in zip(whole, accumulated, strict=True):
            np.testing.assert_allclose(other, weight, rtol=0, atol=1e-6)


def test_causal_lm_micro_batches_give_the_whole_batchs_update(comedies, comedies_tokenizer):
    config = GptConfig.tiny(vocabulary_size=comedies_tokenizer.vocabulary_size, dropout=0.0)
    pipe = GptPretraining(comedies_tokenizer, seq_len=32, seed=1, config=config)
    batches = training_batches(pipe, comedies)
    whole = sgd_update(pipe, batches, 4, 1, steps=2)
    assert_same_update(whole, sgd_update(pipe, batches, 2, 2, steps=2), atol=1e-5)


def test_schedule_checkpoints_and_resume_count_updates(comedies, comedies_tokenizer, tmp_path):
    def fit(directory, epochs):
        pipe = bert_pipeline(comedies_tokenizer)
        pipe.fit(
            comedies,
            batch_size=2,
            epochs=epochs,
            steps_per_epoch=1,
            accumulation_steps=2,
            warmup_steps=1,
            checkpoint_dir=str(directory),
            verbose=0,
        )
        return pipe

    straight = fit(tmp_path / "straight", epochs=2)
    optimizer = straight.model.optimizer
    assert int(optimizer.iterations.numpy()) == 2
    # Linear decay over 2 updates: after the last one the learning rate is 0.
    assert float(optimizer.learning_rate) == pytest.approx(0.0, abs=1e-12)
    fit(tmp_path / "resumed", epochs=1)
    resumed = fit(tmp_path / "resumed", epochs=2)  # continues from update 1 of 2
    assert int(resumed.model.optimizer.iterations.numpy()) == 2
    for weight, other in zip(
        straight.model.trainable_weights, resumed.model.trainable_weights, strict=True
    ):
        # To float rounding: the resumed run's functions are traced again.
        np.testing.assert_allclose(other.numpy(), weight.numpy(), rtol=0, atol=1e-6)


def test_steps_per_epoch_counts_updates_of_accumulated_batches(comedies, comedies_tokenizer):
    scenes = TextCorpus.from_documents(list(comedies.iter_documents())[:2])
    pipe = bert_pipeline(comedies_tokenizer)
    whole = pipe.steps_in_one_pass(scenes, 8)
    assert whole > 1
    history = pipe.fit(scenes, batch_size=4, epochs=1, accumulation_steps=2, verbose=0)
    assert history.params["steps"] == whole


def test_bad_accumulation_steps_are_refused_by_name(comedies, comedies_tokenizer):
    for value in (0, 1.5, "2"):
        with pytest.raises(ValueError, match="accumulation_steps"):
            bert_pipeline(comedies_tokenizer).fit(comedies, batch_size=2, accumulation_steps=value)
    xlnet = XLNetPretraining(comedies_tokenizer, seq_len=16, mem_len=8, reuse_len=8)
    with pytest.raises(ValueError, match="accumulation_steps=2.*Transformer-XL memory"):
        xlnet.fit(comedies, batch_size=2, accumulation_steps=2)
