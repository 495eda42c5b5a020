import collections
import math

import numpy as np
import pytest
import tensorflow as tf

from lmpipe.datasets.examples.word2vec_examples import (
    alias_table,
    cbow_examples,
    negative_samples,
    reduced_windows,
    sentence_word_ids,
    skipgram_pairs,
    subsample,
    word2vec_examples,
)
from lmpipe.datasets.examples.word2vec_vocabulary import Word2VecVocabulary, split_words

SEED = tf.constant([3, 4], tf.int64)


@pytest.fixture(scope="module")
def comedy_vocabulary(comedies):
    return Word2VecVocabulary.learn(comedies, min_count=5)


def test_words_are_lowercased_runs_of_letters_digits_and_inner_apostrophes():
    words = split_words(tf.constant(["'Tis  the King\u2019s 2nd cat--O'er!", "Été, été."]))
    assert words.to_list() == [
        [b"tis", b"the", b"king's", b"2nd", b"cat", b"o'er"],
        ["été".encode(), "été".encode()],
    ]
    assert split_words(tf.constant(["Keep Case"]), lower_case=False).to_list() == [
        [b"Keep", b"Case"]
    ]


def test_vocabulary_counts_match_a_python_count_and_sort_by_count(comedies):
    vocabulary = Word2VecVocabulary.learn(comedies, min_count=3)
    expected = collections.Counter()
    for document in comedies.iter_documents():
        for words in split_words(tf.constant(document)).to_list():
            expected.update(word.decode("utf-8") for word in words)
    kept = {word: count for word, count in expected.items() if count >= 3}
    assert dict(zip(vocabulary.words, vocabulary.counts.tolist(), strict=True)) == kept
    assert vocabulary.total_words == sum(expected.values())
    assert list(vocabulary.counts) == sorted(vocabulary.counts, reverse=True)
    assert vocabulary.num_sentences == sum(len(d) for d in comedies.iter_documents())


def test_vocabulary_save_load_round_trip(comedy_vocabulary, tmp_path):
    comedy_vocabulary.save(str(tmp_path / "vocab.tsv"))
    loaded = Word2VecVocabulary.load(str(tmp_path / "vocab.tsv"))
    assert loaded.words == comedy_vocabulary.words
    assert np.array_equal(loaded.counts, comedy_vocabulary.counts)
    assert (loaded.total_words, loaded.min_count) == (comedy_vocabulary.total_words, 5)


def test_min_count_above_every_count_names_min_count_and_the_count():
    with pytest.raises(ValueError, match=r"min_count=4.*most frequent occurs 3 times"):
        Word2VecVocabulary.from_counts({"a": 3, "b": 1}, min_count=4)


def test_subsampling_keep_rates_follow_the_reference_formula(comedies, comedy_vocabulary):
    sample = 1e-3
    keep = comedy_vocabulary.keep_probabilities(sample)
    ids = next(iter(sentence_word_ids(comedies, comedy_vocabulary, sentences_per_batch=10**6)))
    ids_flat = ids.flat_values.numpy()
    occurrences = np.bincount(ids_flat, minlength=len(comedy_vocabulary))
    kept = np.zeros(len(comedy_vocabulary))
    draws = 4
    for index in range(draws):
        seed = tf.random.experimental.stateless_fold_in(SEED, index)
        kept += np.bincount(subsample(ids, keep, seed).flat_values.numpy(), minlength=len(keep))
    frequency = comedy_vocabulary.counts / comedy_vocabulary.counts.sum()
    expected = np.minimum(1.0, (np.sqrt(frequency / sample) + 1) * sample / frequency)
    np.testing.assert_allclose(keep, expected)
    assert keep[0] < 0.3  # "the" is strongly subsampled, rare words are always kept
    assert np.all(keep[-100:] == 1.0)
    for word_id in range(30):  # the frequent words, where subsampling acts
        trials = draws * occurrences[word_id]
        sd = math.sqrt(trials * keep[word_id] * (1 - keep[word_id]))
        assert abs(kept[word_id] - trials * keep[word_id]) <= 4.5 * sd + 1
    assert np.array_equal(kept[keep == 1.0], draws * occurrences[keep == 1.0])


def test_sample_zero_keeps_every_word(comedy_vocabulary):
    assert np.all(comedy_vocabulary.keep_probabilities(0) == 1.0)


def test_negative_samples_follow_the_unigram_distribution_to_the_power_three_quarters(
    comedy_vocabulary,
):
    noise = comedy_vocabulary.noise_distribution()
    counts = comedy_vocabulary.counts.astype(np.float64)
    np.testing.assert_allclose(noise, counts**0.75 / np.sum(counts**0.75))
    thresholds, aliases = alias_table(noise)
    # The alias table's exact probabilities are the distribution.
    exact = thresholds / 2.0**32
    rebuilt = exact.copy()
    np.add.at(rebuilt, aliases, 1.0 - exact)
    np.testing.assert_allclose(rebuilt / len(noise), noise, rtol=1e-6, atol=1e-9)
    draws = 2_000_000
    ids = negative_samples(tf.constant(thresholds), tf.constant(aliases), [draws], SEED)
    measured = np.bincount(ids.numpy(), minlength=len(noise))
    sd = np.sqrt(draws * noise * (1 - noise))
    assert np.all(np.abs(measured - draws * noise) <= 5 * sd + 1)
    # The distribution is flatter than the unigram one: "the" is drawn less than its share.
    assert measured[0] / draws < counts[0] / counts.sum()


def test_dynamic_window_is_uniform_over_one_to_window():
    window, draws = 5, 60_000
    values = reduced_windows(draws, window, SEED).numpy()
    assert values.min() >= 1 and values.max() <= window
    observed = np.bincount(values, minlength=window + 1)[1:]
    expected = draws / window
    chi_square = np.sum((observed - expected) ** 2 / expected)
    assert chi_square < 18.5  # 99.9% quantile of chi-square with 4 degrees of freedom


def test_skipgram_pairs_of_a_hand_checked_sentence():
    ids = tf.ragged.constant([[10, 11, 12, 13], [20, 21]], dtype=tf.int32)
    windows = tf.constant([2, 1, 2, 1, 2, 2])
    centers, contexts = skipgram_pairs(ids, 2, windows)
    pairs = list(zip(centers.numpy().tolist(), contexts.numpy().tolist(), strict=True))
    assert pairs == [
        (10, 11), (10, 12),  # b=2
        (11, 10), (11, 12),  # b=1
        (12, 10), (12, 11), (12, 13),  # b=2
        (13, 12),  # b=1
        (20, 21), (21, 20),  # never across sentences
    ]  # fmt: skip


def test_cbow_examples_of_a_hand_checked_sentence():
    ids = tf.ragged.constant([[10, 11, 12, 13], [20]], dtype=tf.int32)
    windows = tf.constant([2, 1, 2, 1, 2])
    centers, contexts, mask = cbow_examples(ids, 2, windows)
    assert centers.numpy().tolist() == [10, 11, 12, 13]  # 20 has no context: no example
    got = [
        sorted(c for c, m in zip(row, row_mask, strict=True) if m)
        for row, row_mask in zip(contexts.numpy().tolist(), mask.numpy().tolist(), strict=True)
    ]
    assert got == [[11, 12], [10, 12], [10, 11, 13], [12]]


def test_examples_are_identical_for_the_same_seed_and_differ_across_epochs(
    comedies, comedy_vocabulary
):
    def first_batches(seed, epochs=2):
        dataset = word2vec_examples(
            comedies, comedy_vocabulary, seed=seed, sentences_per_batch=200, epochs=epochs
        )
        return [batch["candidate_ids"].numpy() for batch in dataset.take(2)]

    a, b = first_batches(0), first_batches(0)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not np.array_equal(first_batches(1)[0], a[0])
    epochs = word2vec_examples(
        comedies, comedy_vocabulary, sentences_per_batch=10**6, epochs=2, sample=1e-3
    )
    first, second = (batch["input_ids"].numpy() for batch in epochs)
    assert len(first) != len(second) or not np.array_equal(first, second)


def test_cbow_batches_hold_masked_contexts_and_negatives_skip_the_target(
    comedies, comedy_vocabulary
):
    dataset = word2vec_examples(
        comedies, comedy_vocabulary, method="cbow", window=3, negative=4, sentences_per_batch=300
    )
    batch = next(iter(dataset))
    assert batch["input_ids"].shape[1] == 6 and batch["candidate_ids"].shape[1] == 5
    assert np.all(batch["input_mask"].numpy().sum(axis=1) >= 1)
    candidates, weights = batch["candidate_ids"].numpy(), batch["candidate_weights"].numpy()
    assert np.all(weights[:, 0] == 1)
    assert np.array_equal(weights[:, 1:] == 0, candidates[:, 1:] == candidates[:, :1])


@pytest.mark.parametrize(
    "options, message",
    [
        ({"window": 0}, "window"),
        ({"negative": 0}, "negative"),
        ({"method": "glove"}, "method"),
        ({"sample": 1.5}, "sample"),
    ],
)
def test_bad_options_are_rejected_by_name(comedies, comedy_vocabulary, options, message):
    with pytest.raises(ValueError, match=message):
        word2vec_examples(comedies, comedy_vocabulary, **options)


@pytest.mark.parametrize("method", ["skipgram", "cbow"])
def test_fixed_size_batches_hold_the_same_examples_padded_with_weightless_ones(
    comedies, comedy_vocabulary, method
):
    options = {"method": method, "sentences_per_batch": 400, "seed": 5}
    varying = list(word2vec_examples(comedies, comedy_vocabulary, **options))
    fixed = list(word2vec_examples(comedies, comedy_vocabulary, examples_per_batch=1000, **options))
    assert all(batch["candidate_ids"].shape[0] == 1000 for batch in fixed)

    def stacked(batches, name):
        return np.concatenate([batch[name].numpy() for batch in batches])

    weights = stacked(fixed, "candidate_weights")
    real = weights[:, 0] > 0  # padding examples weigh 0 everywhere
    assert not weights[~real].any() and not stacked(fixed, "words")[~real].any()
    for name in ("input_ids", "candidate_ids", "candidate_weights"):
        np.testing.assert_array_equal(stacked(fixed, name)[real], stacked(varying, name))
    # Each example carries its share of its sentences' words: the shares add up to the
    # vocabulary words of the corpus.
    assert stacked(fixed, "words").sum() == pytest.approx(comedy_vocabulary.retained_words)
    assert (~real).sum() < 1000 * len(varying)  # less than one batch of padding per split
