"""Fine-tuning at the speed of the step: batches grouped by length and cut to a few bucket
lengths, the same examples and the same predictions; no function traced again across epochs or
calls; examples per second in each epoch's logs."""

import collections

import keras
import numpy as np
import pytest

from lmpipe.datasets import WordPieceTokenizer
from lmpipe.datasets.examples.length_groups import bucket_lengths
from lmpipe.models import BertConfig, bert
from lmpipe.models.sequence_classifier import SequenceClassifier
from lmpipe.pipelines import TextClassifier

WORDS = [
    *("the", "a", "king", "queen", "sword", "crown", "night", "day", "love", "death"),
    *("fool", "lord", "lady", "ghost", "storm", "sea", "land", "moon", "sun", "wine"),
]
COLOURS = ["red", "green", "blue"]
VOCABULARY = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ","] + WORDS + COLOURS
SEQ_LEN = 64


def colour_examples(count, seed):
    """Texts of 1 to 70 words (some cut at SEQ_LEN) that name one colour; the label is its
    index."""
    rng = np.random.default_rng(seed)
    texts, labels = [], []
    for _ in range(count):
        # Mostly short texts, as fine-tuning sets are, and a few long ones.
        size = int(min(rng.geometric(0.08), 70))
        words = list(rng.choice(WORDS, size))
        label = int(rng.integers(len(COLOURS)))
        words.insert(int(rng.integers(min(len(words), 10) + 1)), COLOURS[label])
        texts.append(" ".join(words))
        labels.append(label)
    return texts, labels


@pytest.fixture(scope="module")
def tokenizer():
    return WordPieceTokenizer(VOCABULARY)


def classifier(tokenizer, seed=0):
    keras.utils.set_random_seed(seed)
    config = BertConfig.tiny(
        vocabulary_size=tokenizer.vocabulary_size,
        hidden_dim=32,
        intermediate_dim=64,
        max_sequence_length=SEQ_LEN,
    )
    return TextClassifier(tokenizer, bert(config), num_classes=3, seq_len=SEQ_LEN, seed=seed)


def rows(batches):
    """Each example of `batches` as (its real token ids, its label), and the batches' shapes
    and padding masks."""
    examples, shapes, masks = [], [], []
    for features, labels in batches:
        ids, mask = features["token_ids"].numpy(), features["padding_mask"].numpy()
        shapes.append(ids.shape)
        masks.append(mask)
        for row, real, label in zip(ids, mask, labels["labels"].numpy(), strict=True):
            examples.append((tuple(row[real == 1]), int(label)))
    return examples, shapes, masks


def padding_share(masks):
    return sum(int((mask == 0).sum()) for mask in masks) / sum(mask.size for mask in masks)


# Batches ----------------------------------------------------------------------------------------


def test_bucket_lengths_grow_by_half_and_end_at_seq_len():
    assert bucket_lengths(128) == (16, 24, 32, 48, 64, 96, 128)
    assert bucket_lengths(512)[-3:] == (256, 384, 512)
    assert bucket_lengths(100) == (16, 24, 32, 48, 64, 96, 100)
    assert bucket_lengths(16) == (16,) and bucket_lengths(8) == (8,)


@pytest.mark.parametrize("shuffle", [True, False])
def test_length_buckets_keep_every_example_once_and_pad_less(tokenizer, shuffle):
    pipe = classifier(tokenizer)
    source = pipe.check_data(colour_examples(450, seed=0))
    # batch 4: chunks of 200 examples (50 batches), the last one of 50.
    padded = pipe.batches(source, 4, shuffle, 1, None, False)
    bucketed = pipe.batches(source, 4, shuffle, 1, None, False, length_buckets=True)
    before, before_shapes, before_masks = rows(padded)
    after, shapes, masks = rows(bucketed)
    assert collections.Counter(after) == collections.Counter(before)
    assert len(after) == 450 and len(shapes) == len(before_shapes) == 113  # ceil(450 / 4)
    assert all(shape == (4, SEQ_LEN) for shape in before_shapes[:-1])
    for (_, length), mask in zip(shapes, masks, strict=True):
        longest = int(mask.sum(axis=1).max())
        # The smallest bucket length that holds the batch's longest example.
        assert length == min(bucket for bucket in bucket_lengths(SEQ_LEN) if bucket >= longest)
    assert sum(size < 4 for size, _ in shapes) == 1  # one partial batch, as without buckets
    # Measured: 0.77 of the positions are padding at seq_len 64, 0.32 with buckets (half of
    # the texts are shorter than the shortest bucket, 16).
    assert padding_share(before_masks) > 0.7
    assert padding_share(masks) < 0.35
    positions = sum(mask.size for mask in masks) / sum(mask.size for mask in before_masks)
    assert positions < 0.4


def test_length_buckets_are_keyed_by_the_seed_and_the_epoch(tokenizer):
    examples = colour_examples(300, seed=1)

    def label_order(seed, epochs=2):
        pipe = classifier(tokenizer, seed=seed)
        batches = pipe.batches(pipe.check_data(examples), 4, True, epochs, None, True, True)
        return [batch[1]["labels"].numpy().tolist() for batch in batches]

    first = label_order(3)
    assert first == label_order(3)
    assert first != label_order(4)
    assert first[:75] != first[75:]  # each epoch in its own order
    # With drop_remainder every batch is full, and 2 x 300 / 4 batches in all (the chunks run
    # on across the epochs).
    assert len(first) == 150 and all(len(labels) == 4 for labels in first)


def test_training_batches_have_a_static_batch_size(tokenizer):
    pipe = classifier(tokenizer)
    dataset = pipe.training_batches(pipe.check_data(colour_examples(100, seed=2)), 8, None)
    features, labels = dataset.element_spec
    assert features["token_ids"].shape.as_list() == [8, None]
    assert labels["labels"].shape.as_list() == [8]


# Results ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def trained(tokenizer):
    """A tiny classifier trained 3 epochs with validation, counting the traces of its train
    and test steps at the end of each epoch."""
    traces = collections.Counter()
    original = {name: getattr(SequenceClassifier, name) for name in ("train_step", "test_step")}

    def counting(name):
        def step(self, data):
            traces[name] += 1  # runs once per trace: the step is called inside tf.function
            return original[name](self, data)

        return step

    per_epoch = []

    class Traces(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            per_epoch.append(dict(traces))

    pipe = classifier(tokenizer)
    held_out = colour_examples(100, seed=5)
    with pytest.MonkeyPatch.context() as patch:
        for name in original:
            patch.setattr(SequenceClassifier, name, counting(name))
        history = pipe.fit(
            colour_examples(400, seed=4),
            batch_size=16,
            epochs=3,
            learning_rate=2e-3,
            validation=held_out,
            callbacks=[Traces()],
            verbose=0,
        )
        results = [pipe.evaluate(held_out, batch_size=16) for _ in range(2)]
        after_evaluate = dict(traces)
    return pipe, history, held_out, per_epoch, results, after_evaluate


def test_no_step_is_traced_again_after_the_first_epoch_nor_by_evaluate(trained):
    _, _, _, per_epoch, results, after_evaluate = trained
    first = per_epoch[0]
    # One trace of each step, for batches of any bucket length (the datasets' length is
    # None): the later epochs, the validations and two more evaluations reuse them.
    assert first == {"train_step": 1, "test_step": 1}
    assert per_epoch[1] == per_epoch[2] == first
    assert after_evaluate == first
    assert results[0] == results[1]


def test_predict_traces_once_and_equals_predictions_without_buckets(trained):
    pipe, _, (texts, _), _, _, _ = trained
    traces = collections.Counter()
    original = keras.Model.predict_step

    def step(self, data):
        traces["predict_step"] += 1
        return original(self, data)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(keras.Model, "predict_step", step)
        bucketed = pipe.predict(texts, batch_size=8)
        first = traces["predict_step"]
        again = pipe.predict(texts[:37], batch_size=8)
        assert traces["predict_step"] == first  # another call, other shapes: no new trace
    pipe.length_buckets = False
    try:
        padded = pipe.predict(texts, batch_size=8)
    finally:
        del pipe.length_buckets
    np.testing.assert_allclose(bucketed, padded, atol=1e-5)
    np.testing.assert_allclose(again, padded[:37], atol=1e-5)


def test_evaluation_with_buckets_equals_evaluation_padded_to_seq_len(trained):
    pipe, _, held_out, _, results, _ = trained
    pipe.length_buckets = False
    try:
        padded = pipe.evaluate(held_out, batch_size=16)
    finally:
        del pipe.length_buckets
    for name, value in padded.items():
        assert results[0][name] == pytest.approx(value, abs=1e-5)


def test_each_epoch_reports_examples_per_second(trained):
    _, history, _, _, _, _ = trained
    rates = history.history["examples_per_second"]
    assert len(rates) == 3 and all(rate > 0 for rate in rates)
    assert history.history["loss"][-1] < history.history["loss"][0]
