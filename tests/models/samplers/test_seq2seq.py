import itertools

import keras
import numpy as np
import pytest
import tensorflow as tf

from lmpipe.models.rnn_seq2seq import RnnSeq2SeqConfig, rnn_seq2seq
from lmpipe.models.samplers import Seq2SeqModel, beam_search, greedy_search
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
    decoded = beam_search(
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
    ids, scores = decoded.token_ids, decoded.scores
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
    decoded = greedy_search(model, SOURCE, SOURCE_MASK, **settings)
    greedy_ids, greedy_scores = decoded.token_ids, decoded.scores
    decoded = beam_search(model, SOURCE, SOURCE_MASK, beam_width=1, length_penalty=None, **settings)
    beam_ids, beam_scores = decoded.token_ids, decoded.scores
    np.testing.assert_array_equal(beam_ids, greedy_ids)
    np.testing.assert_allclose(beam_scores, greedy_scores, atol=1e-5)


@pytest.mark.parametrize("family", ["transformer", "rnn"])
def test_greedy_search_matches_recomputing_the_full_prefix(family, tiny_transformer, tiny_rnn):
    model = tiny_transformer if family == "transformer" else tiny_rnn
    length = 6
    decoded = greedy_search(model, SOURCE, SOURCE_MASK, bos_id=BOS, eos_id=EOS, max_length=length)
    ids, scores = decoded.token_ids, decoded.scores
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
    decoded = beam_search(tiny_transformer, SOURCE, SOURCE_MASK, **settings)
    batch_ids, batch_scores = decoded.token_ids, decoded.scores
    for row in range(2):
        length = SOURCE_MASK[row].sum()
        decoded = beam_search(
            tiny_transformer,
            SOURCE[row : row + 1, :length],
            SOURCE_MASK[row : row + 1, :length],
            **settings,
        )
        ids, scores = decoded.token_ids, decoded.scores
        np.testing.assert_array_equal(ids[0], batch_ids[row])
        np.testing.assert_allclose(scores[0], batch_scores[row], atol=1e-5)


def test_outputs_include_eos_and_are_padded_after_it(tiny_rnn):
    decoded = beam_search(
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
    ids, scores = decoded.token_ids, decoded.scores
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
        decoded = beam_search(
            tiny_transformer, ids, mask, bos_id=BOS, eos_id=EOS, max_length=5, beam_width=2
        )
        beam_ids, beam_scores = decoded.token_ids, decoded.scores
        decoded = greedy_search(tiny_transformer, ids, mask, bos_id=BOS, eos_id=EOS, max_length=5)
        greedy_ids, _ = decoded.token_ids, decoded.scores
        return beam_ids, beam_scores, greedy_ids

    beam_ids, beam_scores, greedy_ids = translate(SOURCE, SOURCE_MASK)
    decoded = beam_search(
        tiny_transformer,
        SOURCE,
        SOURCE_MASK,
        bos_id=BOS,
        eos_id=EOS,
        max_length=5,
        beam_width=2,
    )
    eager_ids, eager_scores = decoded.token_ids, decoded.scores
    np.testing.assert_array_equal(beam_ids, eager_ids)
    np.testing.assert_allclose(beam_scores, eager_scores, atol=1e-5)
    assert greedy_ids.shape == (2, 5)


# A hand-built decoder: the next-token log-probabilities come from a fixed table, so every
# score is known exactly. Tokens: PAD 0 and BOS 1 (never generated), EOS 2, then A, B, C.
A, B, C = 3, 4, 5
TABLE_VOCABULARY = 6
LENGTH_PENALTIES = ["average", "gnmt", None]


class TableDecoder(Seq2SeqModel):
    """A finite automaton per source: the first source token picks automaton `a`; after BOS
    it is in node 0; `log_probs[a, n]` ([V]) scores the token after node `n`, and
    `transitions[a, n, token]` is the node that token leads to."""

    def __init__(self, log_probs, transitions):
        super().__init__()
        self.table = tf.constant(log_probs, tf.float32)  # [automata, nodes, V]
        self.transitions = tf.constant(transitions, tf.int32)  # [automata, nodes, V]
        self.target_vocabulary_size = log_probs.shape[-1]

    def encode(self, encoder_ids, encoder_mask, max_length=None):
        automaton = tf.cast(encoder_ids[:, 0], tf.int32)
        return {"automaton": automaton, "node": tf.zeros_like(automaton)}

    def decode_step(self, token_ids, state, step):
        automaton, node = state["automaton"], state["node"]
        moved = tf.gather_nd(self.transitions, tf.stack([automaton, node, token_ids], axis=1))
        node = tf.where(step > 0, moved, node)  # step 0 feeds BOS, in the start node
        logits = tf.gather_nd(self.table, tf.stack([automaton, node], axis=1))
        return logits, {"automaton": automaton, "node": node}


def table_search(decoder, search, rows, **settings):
    """Run `search` on `decoder` for the automata `rows`, as NumPy arrays."""
    source = np.array([[row, 0] for row in rows], "int32")
    decoded = search(decoder, source, np.ones_like(source), bos_id=BOS, eos_id=EOS, **settings)
    ids, scores = decoded.token_ids, decoded.scores
    return np.asarray(ids), np.asarray(scores)


def complete_hypotheses(log_probs, transitions, length):
    """Every hypothesis of one automaton that ends at its first EOS or at `length` tokens,
    as `(tokens, log-probability)`; tokens of probability 0 are never generated."""
    found = []

    def extend(node, tokens, log_prob):
        for token in np.flatnonzero(np.isfinite(log_probs[node])):
            extended = (*tokens, int(token))
            total = log_prob + float(log_probs[node, token])
            if token == EOS or len(extended) == length:
                found.append((extended, total))
            else:
                extend(transitions[node, token], extended, total)

    extend(0, (), 0.0)
    return found


def ranked(hypotheses, length_penalty, alpha=0.6):
    scored = [(lp / penalty(len(t), length_penalty, alpha), t) for t, lp in hypotheses]
    return sorted(scored, key=lambda item: -item[0])


def reference_beam_search(log_probs, transitions, length, k, length_penalty, alpha=0.6):
    """Beam search as Hugging Face's `BeamSearchScorer` runs it, on Python lists: of the 2k
    best extensions, one ending in EOS finishes if it ranks among the k best and is dropped
    otherwise, and the k best others continue. Returns the k best finished hypotheses
    (`(score, tokens)`, best first) and how many EOS extensions ranked in [k, 2k)."""
    alive, finished, dropped = [((), 0.0, 0)], [], 0
    for _ in range(length):
        candidates = sorted(
            (
                (-(lp + float(log_probs[node, token])), (*tokens, token), transitions[node, token])
                for tokens, lp, node in alive
                for token in range(log_probs.shape[-1])
                if np.isfinite(log_probs[node, token])
            ),
            key=lambda candidate: candidate[0],
        )
        alive = []
        for rank, (negative, tokens, node) in enumerate(candidates[: 2 * k]):
            if tokens[-1] == EOS and rank < k:
                finished.append((tokens, -negative))
            elif tokens[-1] == EOS:
                dropped += 1
            elif len(alive) < k:
                alive.append((tokens, -negative, node))
    finished += [(tokens, lp) for tokens, lp, _ in alive]
    return ranked(finished, length_penalty, alpha)[:k], dropped


def random_automata(count, nodes, seed):
    """`count` automata of `nodes` nodes over EOS, A, B, C with random probabilities."""
    rng = np.random.default_rng(seed)
    probabilities = np.zeros((count, nodes, TABLE_VOCABULARY))
    probabilities[..., EOS:] = rng.dirichlet(np.full(4, 0.8), size=(count, nodes))
    with np.errstate(divide="ignore"):
        log_probs = np.log(probabilities).astype("float32")
    transitions = rng.integers(0, nodes, size=(count, nodes, TABLE_VOCABULARY))
    return log_probs, transitions


def hard_case_automaton():
    """An automaton where, with 2 beams, `[B, EOS]` ranks third of the four best extensions
    at step 2 (just outside the beam) and, if it went on, would grow `C`s almost for free
    (node 3), scoring above the right answer `[A, EOS]` under the "average" penalty."""
    probabilities = np.zeros((5, TABLE_VOCABULARY))
    #                    PAD  BOS  EOS    A      B      C
    probabilities[0] = [0.0, 0.0, 0.01, 0.58, 0.40, 0.01]  # start
    probabilities[1] = [0.0, 0.0, 0.50, 0.03, 0.03, 0.44]  # after A
    probabilities[2] = [0.0, 0.0, 0.60, 0.02, 0.02, 0.36]  # after B
    probabilities[3] = [0.0, 0.0, 0.001, 0.001, 0.001, 0.997]  # after B, EOS
    probabilities[4] = [0.0, 0.0, 0.25, 0.25, 0.25, 0.25]  # everything else
    transitions = np.full((5, TABLE_VOCABULARY), 4)
    transitions[0, A], transitions[0, B], transitions[2, EOS], transitions[3] = 1, 2, 3, 3
    with np.errstate(divide="ignore"):
        log_probs = np.log(probabilities).astype("float32")
    return log_probs[None], transitions[None]


def assert_padded_after_first_eos(hypotheses, pad_id=PAD):
    for tokens in hypotheses.reshape(-1, hypotheses.shape[-1]):
        ended = np.flatnonzero(tokens == EOS)
        if len(ended):
            assert np.all(tokens[ended[0] + 1 :] == pad_id), tokens


def exact_scores(log_probs, transitions, hypotheses, length_penalty, alpha=0.6):
    """The score of each hypothesis (`[N, L]`, padded after EOS) read off the table."""
    scores = []
    for tokens in hypotheses:
        node, log_prob, n = 0, 0.0, 0
        for token in tokens:
            log_prob, n = log_prob + float(log_probs[node, token]), n + 1
            if token == EOS:
                break
            node = transitions[node, token]
        scores.append(log_prob / penalty(n, length_penalty, alpha))
    return np.array(scores)


@pytest.mark.parametrize("length_penalty", LENGTH_PENALTIES)
def test_an_eos_ranked_just_outside_the_beam_finishes_nothing_and_never_continues(
    length_penalty,
):
    log_probs, transitions = hard_case_automaton()
    length, k = 6, 2
    # The case: at step 2 the four best extensions are [A EOS], [A C], [B EOS], [B C].
    step_two = sorted(
        (
            (float(log_probs[0, 0, a] + log_probs[0, transitions[0, 0, a], b]), (a, b))
            for a in (A, B)
            for b in range(TABLE_VOCABULARY)
        ),
        reverse=True,
    )
    assert [tokens for _, tokens in step_two[: 2 * k]] == [(A, EOS), (A, C), (B, EOS), (B, C)]
    decoder = TableDecoder(log_probs, transitions)
    settings = dict(max_length=length, beam_width=k, length_penalty=length_penalty)
    ids, scores = table_search(decoder, beam_search, [0], return_all=True, **settings)
    assert_padded_after_first_eos(ids)
    finite = np.isfinite(scores[0])
    np.testing.assert_allclose(
        scores[0][finite],
        exact_scores(log_probs[0], transitions[0], ids[0][finite], length_penalty),
        rtol=1e-5,
    )
    # Two beams suffice here to find the best of all hypotheses: [A, EOS].
    best_score, best_tokens = ranked(
        complete_hypotheses(log_probs[0], transitions[0], length), length_penalty
    )[0]
    assert best_tokens == (A, EOS)
    ids, scores = table_search(decoder, beam_search, [0], **settings)
    assert list(ids[0]) == padded(best_tokens, length)
    np.testing.assert_allclose(scores[0], best_score, rtol=1e-5)


@pytest.mark.parametrize("length_penalty", LENGTH_PENALTIES)
def test_beam_as_wide_as_all_hypotheses_equals_exhaustive_search_on_a_table(length_penalty):
    log_probs, transitions = random_automata(count=3, nodes=4, seed=5)
    length = 4
    decoder = TableDecoder(log_probs, transitions)
    ids, scores = table_search(
        decoder,
        beam_search,
        range(3),
        max_length=length,
        beam_width=4**length,
        length_penalty=length_penalty,
        return_all=True,
    )
    assert_padded_after_first_eos(ids)
    for row in range(3):
        expected = ranked(
            complete_hypotheses(log_probs[row], transitions[row], length), length_penalty
        )
        assert expected[0][0] - expected[1][0] > 1e-4  # no near tie for the best
        assert list(ids[row, 0]) == padded(expected[0][1], length)
        found = scores[row][np.isfinite(scores[row])]
        np.testing.assert_allclose(found, [score for score, _ in expected], rtol=1e-5)


@pytest.mark.parametrize("length_penalty", LENGTH_PENALTIES)
def test_small_beams_keep_the_hypotheses_of_a_reference_beam_search(length_penalty):
    count, length = 12, 5
    log_probs, transitions = random_automata(count=count, nodes=5, seed=11)
    decoder = TableDecoder(log_probs, transitions)
    dropped = 0
    for k in (1, 2, 3):
        ids, scores = table_search(
            decoder,
            beam_search,
            range(count),
            max_length=length,
            beam_width=k,
            length_penalty=length_penalty,
            return_all=True,
        )
        assert_padded_after_first_eos(ids)
        for row in range(count):
            expected, row_dropped = reference_beam_search(
                log_probs[row], transitions[row], length, k, length_penalty
            )
            dropped += row_dropped
            n = len(expected)
            np.testing.assert_allclose(scores[row, :n], [score for score, _ in expected], rtol=1e-5)
            # Different paths through an automaton can score the same (a tie either search
            # may break either way): check that each hypothesis has the score it claims.
            assert len({tuple(tokens) for tokens in ids[row, :n]}) == n
            np.testing.assert_allclose(
                scores[row, :n],
                exact_scores(log_probs[row], transitions[row], ids[row, :n], length_penalty),
                rtol=1e-5,
            )
    # The tables do produce EOS extensions ranked just outside the beam.
    assert dropped > 0


def test_greedy_search_stops_at_an_early_eos_and_pads_after_it():
    log_probs, transitions = hard_case_automaton()
    decoder = TableDecoder(log_probs, transitions)
    ids, scores = table_search(decoder, greedy_search, [0], max_length=6, pad_id=PAD)
    assert list(ids[0]) == [A, EOS, PAD, PAD, PAD, PAD]
    np.testing.assert_allclose(scores[0], log_probs[0, 0, A] + log_probs[0, 1, EOS], rtol=1e-6)


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
