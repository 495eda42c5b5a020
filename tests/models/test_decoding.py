import itertools

import keras
import numpy as np
import pytest
import tensorflow as tf

from lmpipe.models.decoding import beam_search, greedy_search
from lmpipe.models.rnn_seq2seq import RnnSeq2SeqConfig, rnn_seq2seq
from lmpipe.models.transformer import TransformerConfig, transformer

VOCABULARY, BOS, EOS, PAD = 5, 1, 2, 0
SOURCE = np.array([[3, 4, 2, 0], [4, 4, 3, 2]], "int32")
SOURCE_MASK = (np.arange(4)[None, :] < np.array([[3], [4]])).astype("int32")


def peaked(model, factor):
    """Scale the output weights so that the step distributions are far from uniform, and
    ties between hypotheses (which any search may break either way) do not occur."""
    layer = model.target_embedding if hasattr(model, "decoder_blocks") else model.output_projection
    layer.set_weights([w * factor for w in layer.get_weights()])
    return model


@pytest.fixture(scope="module")
def tiny_transformer():
    keras.utils.set_random_seed(3)
    config = TransformerConfig.tiny(vocabulary_size=VOCABULARY, hidden_dim=16, dropout=0.0)
    return peaked(transformer(config), 4.0)


@pytest.fixture(scope="module")
def tiny_rnn():
    keras.utils.set_random_seed(4)
    config = RnnSeq2SeqConfig.tiny(
        vocabulary_size=VOCABULARY, embedding_dim=8, hidden_dim=16, dropout=0.0
    )
    return peaked(rnn_seq2seq(config), 3.0)


def step_log_probs(model, source, source_mask, length):
    """{prefix tuple: log-probs [V] of the next token}, by teacher forcing every prefix."""
    prefixes = list(itertools.product(range(VOCABULARY), repeat=length - 1))
    decoder_ids = np.array([[BOS, *prefix] for prefix in prefixes], "int32")
    count = len(prefixes)
    logits = model(
        {
            "encoder_ids": np.repeat(source[None], count, 0),
            "encoder_mask": np.repeat(source_mask[None], count, 0),
            "decoder_ids": decoder_ids,
            "decoder_mask": np.ones_like(decoder_ids),
        }
    )
    log_probs = np.asarray(tf.nn.log_softmax(logits))  # [count, length, V]
    table = {}
    for row, prefix in enumerate(prefixes):
        for t in range(length):
            table[prefix[:t]] = log_probs[row, t]
    return table


def penalty(length, length_penalty, alpha):
    if length_penalty == "average":
        return length
    if length_penalty == "gnmt":
        return ((5 + length) / 6) ** alpha
    return 1.0


def exhaustive(table, length, length_penalty, alpha):
    """Every complete hypothesis (ends in EOS, or reaches `length`) with its score, best first."""
    hypotheses = []
    for n in range(1, length + 1):
        for tokens in itertools.product(range(VOCABULARY), repeat=n):
            if EOS in tokens[:-1] or (n < length and tokens[-1] != EOS):
                continue
            log_prob = sum(table[tokens[:t]][tokens[t]] for t in range(n))
            hypotheses.append((log_prob / penalty(n, length_penalty, alpha), tokens))
    return sorted(hypotheses, key=lambda item: -item[0])


def padded(tokens, length):
    return list(tokens) + [PAD] * (length - len(tokens))


@pytest.mark.parametrize("length_penalty", ["average", "gnmt", None])
@pytest.mark.parametrize("family", ["transformer", "rnn"])
def test_beam_as_wide_as_all_sequences_finds_the_exhaustive_best(
    family, length_penalty, tiny_transformer, tiny_rnn
):
    model = tiny_transformer if family == "transformer" else tiny_rnn
    length, alpha = 3, 0.6
    ids, scores = beam_search(
        model,
        SOURCE,
        SOURCE_MASK,
        bos_id=BOS,
        eos_id=EOS,
        max_length=length,
        beam_width=VOCABULARY**length,
        length_penalty=length_penalty,
        alpha=alpha,
        return_all=True,
    )
    ids, scores = np.asarray(ids), np.asarray(scores)
    for row in range(len(SOURCE)):
        table = step_log_probs(model, SOURCE[row], SOURCE_MASK[row], length)
        ranked = exhaustive(table, length, length_penalty, alpha)
        # The test is only meaningful if the best is not a near tie.
        assert ranked[0][0] - ranked[1][0] > 1e-3
        assert list(ids[row, 0]) == padded(ranked[0][1], length)
        found = scores[row][np.isfinite(scores[row])]
        assert len(found) == len(ranked)  # every complete hypothesis, each once
        np.testing.assert_allclose(found, [score for score, _ in ranked], atol=1e-4)


@pytest.mark.parametrize("family", ["transformer", "rnn"])
def test_beam_of_one_without_length_penalty_is_greedy_search(family, tiny_transformer, tiny_rnn):
    model = tiny_transformer if family == "transformer" else tiny_rnn
    settings = dict(bos_id=BOS, eos_id=EOS, max_length=6)
    greedy_ids, greedy_scores = greedy_search(model, SOURCE, SOURCE_MASK, **settings)
    beam_ids, beam_scores = beam_search(
        model, SOURCE, SOURCE_MASK, beam_width=1, length_penalty=None, **settings
    )
    np.testing.assert_array_equal(beam_ids, greedy_ids)
    np.testing.assert_allclose(beam_scores, greedy_scores, atol=1e-5)


@pytest.mark.parametrize("family", ["transformer", "rnn"])
def test_greedy_search_matches_recomputing_the_full_prefix(family, tiny_transformer, tiny_rnn):
    model = tiny_transformer if family == "transformer" else tiny_rnn
    length = 6
    ids, scores = greedy_search(
        model, SOURCE, SOURCE_MASK, bos_id=BOS, eos_id=EOS, max_length=length
    )
    ids = np.asarray(ids)
    decoder_ids = np.concatenate([np.full((2, 1), BOS, "int32"), ids[:, :-1]], axis=1)
    logits = model(
        {
            "encoder_ids": SOURCE,
            "encoder_mask": SOURCE_MASK,
            "decoder_ids": decoder_ids,
            "decoder_mask": np.ones_like(decoder_ids),
        }
    )
    log_probs = np.asarray(tf.nn.log_softmax(logits))
    for row in range(2):
        ended = np.flatnonzero(ids[row] == EOS)
        n = ended[0] + 1 if len(ended) else length
        assert list(ids[row, :n]) == list(log_probs[row, :n].argmax(-1))
        assert np.all(ids[row, n:] == PAD)
        expected = log_probs[row, np.arange(n), ids[row, :n]].sum()
        np.testing.assert_allclose(scores[row], expected, atol=1e-4)


def test_searches_decode_each_sequence_as_if_it_were_alone(tiny_transformer):
    settings = dict(bos_id=BOS, eos_id=EOS, max_length=5)
    batch_ids, batch_scores = beam_search(tiny_transformer, SOURCE, SOURCE_MASK, **settings)
    for row in range(2):
        length = SOURCE_MASK[row].sum()
        ids, scores = beam_search(
            tiny_transformer,
            SOURCE[row : row + 1, :length],
            SOURCE_MASK[row : row + 1, :length],
            **settings,
        )
        np.testing.assert_array_equal(ids[0], batch_ids[row])
        np.testing.assert_allclose(scores[0], batch_scores[row], atol=1e-5)


def test_outputs_include_eos_and_are_padded_after_it(tiny_rnn):
    ids, scores = beam_search(
        tiny_rnn,
        SOURCE,
        SOURCE_MASK,
        bos_id=BOS,
        eos_id=EOS,
        max_length=6,
        beam_width=3,
        pad_id=4,
        return_all=True,
    )
    ids, scores = np.asarray(ids), np.asarray(scores)
    assert ids.shape == (2, 3, 6) and scores.shape == (2, 3)
    assert np.all(np.diff(scores, axis=1) <= 0)  # best first
    for hypothesis in ids.reshape(-1, 6):
        ended = np.flatnonzero(hypothesis == EOS)
        if len(ended):
            assert np.all(hypothesis[ended[0] + 1 :] == 4)


@pytest.mark.slow
def test_search_runs_inside_a_tf_function_with_unknown_batch_and_length(tiny_transformer):
    @tf.function(
        input_signature=[
            tf.TensorSpec([None, None], tf.int32),
            tf.TensorSpec([None, None], tf.int32),
        ]
    )
    def translate(ids, mask):
        beam_ids, beam_scores = beam_search(
            tiny_transformer, ids, mask, bos_id=BOS, eos_id=EOS, max_length=5, beam_width=2
        )
        greedy_ids, _ = greedy_search(
            tiny_transformer, ids, mask, bos_id=BOS, eos_id=EOS, max_length=5
        )
        return beam_ids, beam_scores, greedy_ids

    beam_ids, beam_scores, greedy_ids = translate(SOURCE, SOURCE_MASK)
    eager_ids, eager_scores = beam_search(
        tiny_transformer,
        SOURCE,
        SOURCE_MASK,
        bos_id=BOS,
        eos_id=EOS,
        max_length=5,
        beam_width=2,
    )
    np.testing.assert_array_equal(beam_ids, eager_ids)
    np.testing.assert_allclose(beam_scores, eager_scores, atol=1e-5)
    assert greedy_ids.shape == (2, 5)


def test_bad_search_arguments_raise_naming_the_parameter(tiny_rnn):
    settings = dict(bos_id=BOS, eos_id=EOS, max_length=4)
    with pytest.raises(ValueError, match="beam_width"):
        beam_search(tiny_rnn, SOURCE, SOURCE_MASK, beam_width=0, **settings)
    with pytest.raises(ValueError, match="eos_id"):
        greedy_search(tiny_rnn, SOURCE, SOURCE_MASK, bos_id=BOS, eos_id=VOCABULARY, max_length=4)
    with pytest.raises(ValueError, match="bos_id"):
        beam_search(tiny_rnn, SOURCE, SOURCE_MASK, bos_id=-1, eos_id=EOS, max_length=4)
    with pytest.raises(ValueError, match="max_length"):
        greedy_search(tiny_rnn, SOURCE, SOURCE_MASK, bos_id=BOS, eos_id=EOS, max_length=0)
    with pytest.raises(ValueError, match="length_penalty"):
        beam_search(tiny_rnn, SOURCE, SOURCE_MASK, length_penalty="wu", **settings)
    with pytest.raises(ValueError, match="alpha"):
        beam_search(tiny_rnn, SOURCE, SOURCE_MASK, length_penalty="gnmt", alpha=-1, **settings)
    with pytest.raises(ValueError, match="Seq2SeqModel"):
        greedy_search(keras.Sequential(), SOURCE, SOURCE_MASK, **settings)
