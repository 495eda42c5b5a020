"""The samplers' shared loop and result: every sampler returns a `Decoded` whose padding mask
ends at the first end token, sampling is keyed by the seed, a nucleus of one token is greedy,
and decoding functions are traced once per model and settings."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from lmpipe.models.gpt import GptConfig, gpt
from lmpipe.models.samplers import (
    BeamSampler,
    Decoded,
    GreedySampler,
    TopKSampler,
    TopPSampler,
    decode,
    generate,
    sampler_for,
    traced_function,
)
from lmpipe.models.samplers.sampler import end_mask
from lmpipe.models.transformer import TransformerConfig, transformer

SOURCE = np.array([[5, 6, 7, 8], [9, 10, 0, 0]], "int32")
SOURCE_MASK = (SOURCE > 0).astype("int32")


@pytest.fixture(scope="module")
def seq2seq():
    keras.utils.set_random_seed(3)
    config = TransformerConfig.tiny(
        vocabulary_size=24, hidden_dim=16, num_heads=2, intermediate_dim=32, dropout=0.0
    )
    return transformer(config)


def test_every_sampler_returns_a_decoded_whose_mask_ends_at_the_end_token(seq2seq):
    # With EOS = the most frequent greedy token, most rows end early.
    greedy = decode(seq2seq, SOURCE, SOURCE_MASK, bos_id=1, eos_id=2, max_length=8)
    eos = int(np.bincount(greedy.token_ids.numpy().ravel()).argmax())
    for sampler in (GreedySampler(), TopKSampler(3), TopPSampler(0.9), BeamSampler(3)):
        decoded = decode(
            seq2seq, SOURCE, SOURCE_MASK, sampler, bos_id=1, eos_id=eos, max_length=8, seed=4
        )
        assert isinstance(decoded, Decoded) and decoded.logits is None
        ids, mask = decoded.token_ids.numpy(), decoded.padding_mask.numpy()
        assert ids.shape == mask.shape == (2, 8) and decoded.scores.shape == (2,)
        for row, row_mask in zip(ids, mask, strict=True):
            ends = np.flatnonzero(row == eos)
            length = ends[0] + 1 if ends.size else len(row)
            assert row_mask.tolist() == [1] * length + [0] * (len(row) - length), sampler
            assert set(row[length:].tolist()) <= {0}  # pad_id after the end
    np.testing.assert_array_equal(end_mask(tf.constant([[3, 2, 2, 0]]), 2), [[1, 1, 0, 0]])


def test_a_nucleus_of_one_token_and_top_1_are_greedy(seq2seq):
    settings = dict(bos_id=1, eos_id=2, max_length=6, seed=9)
    greedy = decode(seq2seq, SOURCE, SOURCE_MASK, GreedySampler(), **settings)
    for sampler in (TopPSampler(p=1e-6), TopKSampler(k=1)):
        sampled = decode(seq2seq, SOURCE, SOURCE_MASK, sampler, **settings)
        np.testing.assert_array_equal(sampled.token_ids, greedy.token_ids)
        np.testing.assert_allclose(sampled.scores, greedy.scores, rtol=1e-6)


def test_sampling_is_keyed_by_the_seed(seq2seq):
    settings = dict(bos_id=1, eos_id=23, max_length=10)
    sampler = TopKSampler(k=20, temperature=3.0)
    first = decode(seq2seq, SOURCE, SOURCE_MASK, sampler, seed=1, **settings).token_ids
    again = decode(seq2seq, SOURCE, SOURCE_MASK, TopKSampler(20, 3.0), seed=1, **settings)
    other = decode(seq2seq, SOURCE, SOURCE_MASK, sampler, seed=2, **settings).token_ids
    np.testing.assert_array_equal(first, again.token_ids)
    assert not np.array_equal(first, other)


def test_scores_are_the_log_probabilities_of_the_tokens_under_the_model():
    keras.utils.set_random_seed(5)
    model = gpt(GptConfig.tiny(vocabulary_size=30, hidden_dim=16, num_heads=2, dropout=0.0))
    prompts = np.array([[5, 6, 7]], "int32")
    out = generate(
        model, prompts, max_new_tokens=4, strategy="top_p", p=0.95, seed=3, return_logits=True
    )
    log_probs = tf.nn.log_softmax(out.logits[0]).numpy()  # [4, V]
    expected = sum(log_probs[step, token] for step, token in enumerate(out.token_ids.numpy()[0]))
    np.testing.assert_allclose(out.scores.numpy()[0], expected, rtol=1e-5)


def test_decoding_functions_are_traced_once_per_model_and_settings():
    made = []

    class Owner:
        pass

    def make():
        made.append(1)
        return tf.function(lambda x: x + 1)

    first, second = Owner(), Owner()
    function = traced_function(first, ("add", 1), make)
    assert traced_function(first, ("add", 1), make) is function and len(made) == 1
    traced_function(first, ("add", 2), make)
    traced_function(second, ("add", 1), make)
    assert len(made) == 3


def test_samplers_check_their_settings_by_name():
    for make, name in (
        (lambda: TopKSampler(k=0), "k"),
        (lambda: TopPSampler(p=1.5), "p"),
        (lambda: TopPSampler(temperature=0.0), "temperature"),
        (lambda: BeamSampler(beam_width=0), "beam_width"),
        (lambda: BeamSampler(length_penalty="wu"), "length_penalty"),
        (lambda: sampler_for("nucleus"), "strategy"),
    ):
        with pytest.raises(ValueError, match=name):
            make()
    assert isinstance(sampler_for("beam", beam_width=2), BeamSampler)
