"""Tests of MaskedLMMasker: BERT's selection and 80/10/10 corruption, whole words, n-grams.

Statistical checks compare a share `f` measured on `n` independent draws with its expected
probability `p` and allow 5 binomial standard deviations, `|f - p| <= 5 sqrt(p (1 - p) / n)`:
a correct implementation fails one such check with probability below 1e-6.
"""

import contextlib

import numpy as np
import pytest
import tensorflow as tf

from lmpipe import kernels
from lmpipe.datasets.examples.masking import MaskedLMMasker

VOCAB = 1000
PAD, CLS, SEP, MASK, RESERVED = 0, 1, 2, 3, 4
SPECIALS = [PAD, CLS, SEP, MASK, RESERVED]
NON_SPECIAL = VOCAB - len(SPECIALS)
CONTINUATION_FROM = 500  # ids 500..999 are "##" continuation pieces in the word tests
CONTINUATION = np.arange(VOCAB) >= CONTINUATION_FROM
BATCH, SEQ_LEN, NUM_BATCHES = 32, 128, 200


def sigma5(p, n):
    return 5.0 * np.sqrt(p * (1.0 - p) / n)


def make_rows(rng, num_rows, seq_len=SEQ_LEN, words=False):
    """Packed rows `[CLS] A [SEP] B [SEP] [PAD]...` with padding tails of varying length.

    With `words`, a piece is a continuation piece with probability 0.4, so words have 1, 2,
    3, ... pieces and a segment may start with a continuation piece.
    """
    rows = np.full((num_rows, seq_len), PAD, np.int32)
    for r in range(num_rows):
        length = rng.integers(3, seq_len + 1)
        body = length - 3
        if words:
            is_cont = rng.random(body) < 0.4
            pieces = np.where(
                is_cont,
                rng.integers(CONTINUATION_FROM, VOCAB, body),
                rng.integers(len(SPECIALS), CONTINUATION_FROM, body),
            )
        else:
            pieces = rng.integers(len(SPECIALS), VOCAB, body)
        a = rng.integers(0, body + 1)
        rows[r, :length] = np.concatenate([[CLS], pieces[:a], [SEP], pieces[a:], [SEP]])
    rows[0, :3] = [CLS, SEP, SEP]  # nothing to predict
    rows[0, 3:] = PAD
    return rows


def run_batches(masker, rows, base_seed=0, batch_size=BATCH):
    """Mask `rows` in a tf.data pipeline, one seed per batch; numpy outputs concatenated."""
    dataset = tf.data.Dataset.from_tensor_slices(rows).batch(batch_size).enumerate()
    dataset = dataset.map(lambda i, x: masker(x, tf.stack([tf.constant(base_seed, tf.int64), i])))
    outputs = list(dataset.as_numpy_iterator())
    return {key: np.concatenate([o[key] for o in outputs]) for key in outputs[0]}


def selected_mask(out, seq_len):
    """[R, S] bool, True at the selected positions."""
    selected = np.zeros((len(out["mask_positions"]), seq_len), bool)
    rows, slots = np.nonzero(out["mask_weights"])
    selected[rows, out["mask_positions"][rows, slots]] = True
    return selected


def expected_budget(rows, rate=0.15, max_predictions=20, pad=PAD, specials=SPECIALS):
    """BERT's num_to_predict: a share of all the tokens of the example, [CLS] and [SEP]
    included, padding not; BERT's loop then stops when the candidates run out."""
    num_tokens = (rows != pad).sum(axis=1)
    num_maskable = (~np.isin(rows, specials)).sum(axis=1)
    return np.array(
        [
            min(max_predictions, max(1, round(n * rate)), m)
            for n, m in zip(num_tokens, num_maskable, strict=True)
        ]
    )


def word_starts(rows):
    """BERT's words: a non-continuation piece, or any piece right after a special token."""
    maskable = ~np.isin(rows, SPECIALS)
    after_special = np.pad(~maskable[:, :-1], ((0, 0), (1, 0)), constant_values=True)
    return maskable & (~CONTINUATION[rows] | after_special)


@pytest.fixture(scope="module")
def token_run():
    rows = make_rows(np.random.default_rng(0), BATCH * NUM_BATCHES)
    masker = MaskedLMMasker(VOCAB, MASK, SPECIALS)
    out = run_batches(masker, rows)
    return rows, out, selected_mask(out, SEQ_LEN)


@pytest.fixture(scope="module")
def word_run():
    rows = make_rows(np.random.default_rng(1), BATCH * 50, words=True)
    masker = MaskedLMMasker(VOCAB, MASK, SPECIALS, whole_word=True, continuation_mask=CONTINUATION)
    out = run_batches(masker, rows)
    return rows, out, selected_mask(out, SEQ_LEN)


# Selection.


def test_selected_count_follows_bert_formula(token_run):
    rows, out, selected = token_run
    budget = expected_budget(rows)
    np.testing.assert_array_equal(out["mask_weights"].sum(axis=1), budget)
    np.testing.assert_array_equal(selected.sum(axis=1), budget)
    assert budget[0] == 0 and budget.max() == 19  # the empty row, and a full row


def test_count_rounds_half_to_even_like_python():
    # 30 * 0.15 = 4.5 -> 4 and 10 * 0.25 = 2.5 -> 2 with Python's round; 11 * 0.5 = 5.5 -> 6.
    # n counts [CLS] and [SEP], as BERT's len(tokens) does.
    for n, rate in [(30, 0.15), (10, 0.25), (11, 0.5)]:
        row = np.array([[CLS, *range(10, 10 + n - 2), SEP]], np.int32)
        masker = MaskedLMMasker(VOCAB, MASK, SPECIALS, selection_rate=rate, max_predictions=40)
        out = masker(row, seed=[1, 2])
        assert out["mask_weights"].numpy().sum() == round(n * rate)


def test_count_includes_cls_and_sep_but_not_padding():
    # 10 tokens, 3 of them special, then padding: BERT's round(10 * 0.15) = round(1.5) = 2;
    # counting the 7 maskable tokens would give 1, counting the padding too 3 (or more).
    # 17 tokens: round(2.55) = 3 (2 from the 14 maskable ones).
    rows = np.full((2, 20), PAD, np.int32)
    rows[0, :10] = [CLS, 10, 11, 12, 13, SEP, 14, 15, 16, SEP]
    rows[1, :17] = [CLS, *range(20, 27), SEP, *range(30, 37), SEP]
    masker = MaskedLMMasker(VOCAB, MASK, SPECIALS)
    for seed in range(20):
        out = masker(rows, [seed, 3])
        np.testing.assert_array_equal(out["mask_weights"].numpy().sum(axis=1), [2, 3])
    # Padding is whatever `pad_token_id` names.
    rows[rows == PAD] = RESERVED
    masker = MaskedLMMasker(VOCAB, MASK, SPECIALS, pad_token_id=RESERVED)
    np.testing.assert_array_equal(masker(rows, [0, 0])["mask_weights"].numpy().sum(axis=1), [2, 3])


@pytest.mark.parametrize("whole_word", [False, True], ids=["tokens", "words"])
def test_count_is_capped_by_the_maskable_tokens(whole_word):
    # round(7 * 1.0) = 7 wanted, 5 candidates: BERT's loop takes all 5 and stops.
    rows = np.array([[CLS, 10, 11, SEP, 12, 13, 14, SEP, PAD]], np.int32)
    masker = MaskedLMMasker(
        VOCAB,
        MASK,
        SPECIALS,
        selection_rate=1.0,
        whole_word=whole_word,
        continuation_mask=CONTINUATION if whole_word else None,
    )
    out = masker(rows, [1, 1])
    weights = out["mask_weights"].numpy()[0]
    assert weights.sum() == 5
    assert out["mask_positions"].numpy()[0][weights > 0].tolist() == [1, 2, 4, 5, 6]


def test_selected_share_of_tokens_is_selection_rate(token_run):
    rows, _, selected = token_run
    share = selected.sum() / (rows != PAD).sum()
    # Deterministic up to rounding per row (at most 0.5 token of ~9 on average).
    assert abs(share - 0.15) < 0.01


def test_every_maskable_position_is_equally_likely(token_run):
    rows, _, selected = token_run
    maskable = ~np.isin(rows, SPECIALS)
    # Within full-length rows (19 of their maskable tokens selected), every maskable position
    # has the same probability; compare early, middle and late thirds of the sequence.
    full = maskable.sum(axis=1) >= 124
    budget = expected_budget(rows)[full]
    p = (budget / maskable[full].sum(axis=1)).mean()
    for part in np.array_split(np.arange(1, SEQ_LEN - 1), 3):
        cells = maskable[full][:, part]
        share = selected[full][:, part][cells].mean()
        assert abs(share - p) <= sigma5(p, cells.sum())


def test_special_tokens_and_padding_are_never_selected(token_run):
    rows, out, selected = token_run
    assert not np.isin(rows[selected], SPECIALS).any()
    assert (rows[selected] != PAD).all()


def test_mask_ids_are_original_tokens_at_sorted_unique_positions(token_run):
    rows, out, _ = token_run
    positions, ids, weights = out["mask_positions"], out["mask_ids"], out["mask_weights"]
    real = weights == 1.0
    np.testing.assert_array_equal(np.take_along_axis(rows, positions, axis=1)[real], ids[real])
    # Padding of the prediction lists: position 0, id 0, weight 0, after the real ones.
    assert (positions[~real] == 0).all() and (ids[~real] == 0).all()
    assert set(np.unique(weights)) <= {0.0, 1.0}
    assert (np.diff(weights, axis=1) <= 0).all()
    gaps = np.diff(positions, axis=1)[real[:, 1:]]
    assert (gaps > 0).all()  # strictly ascending, so unique
    for key, dtype in [("mask_positions", np.int32), ("mask_ids", np.int32)]:
        assert out[key].dtype == dtype and out[key].shape == (len(rows), 20)
    assert weights.dtype == np.float32


def test_unselected_positions_are_unchanged(token_run):
    rows, out, selected = token_run
    np.testing.assert_array_equal(out["token_ids"][~selected], rows[~selected])
    assert out["token_ids"].dtype == np.int32


# Corruption.


def test_selected_tokens_are_masked_replaced_or_kept_80_10_10(token_run):
    rows, out, selected = token_run
    original, corrupted = rows[selected], out["token_ids"][selected]
    n = len(original)
    masked = corrupted == MASK
    replaced = ~masked & (corrupted != original)
    kept = corrupted == original
    # A random replacement draws the original id with probability 1 / NON_SPECIAL.
    for share, p in [
        (masked.mean(), 0.8),
        (replaced.mean(), 0.1 * (1 - 1 / NON_SPECIAL)),
        (kept.mean(), 0.1 + 0.1 / NON_SPECIAL),
    ]:
        assert abs(share - p) <= sigma5(p, n), (share, p, n)


def test_random_replacements_are_uniform_over_non_special_ids():
    rows = make_rows(np.random.default_rng(2), BATCH * NUM_BATCHES)
    masker = MaskedLMMasker(VOCAB, MASK, SPECIALS, mask_token_rate=0.0, random_token_rate=1.0)
    out = run_batches(masker, rows)
    replacements = out["token_ids"][selected_mask(out, SEQ_LEN)]
    assert not np.isin(replacements, SPECIALS).any()
    counts = np.bincount(replacements, minlength=VOCAB)[len(SPECIALS) :]
    expected = len(replacements) / NON_SPECIAL
    chi2 = ((counts - expected) ** 2 / expected).sum()
    # Chi-square with NON_SPECIAL - 1 degrees of freedom: mean df, sd sqrt(2 df); 5 sd.
    df = NON_SPECIAL - 1
    assert chi2 < df + 5 * np.sqrt(2 * df), chi2
    assert expected > 50


def test_rates_are_configurable():
    rows = make_rows(np.random.default_rng(3), BATCH * 20)
    masker = MaskedLMMasker(VOCAB, MASK, SPECIALS, mask_token_rate=0.5, random_token_rate=0.0)
    out = run_batches(masker, rows)
    selected = selected_mask(out, SEQ_LEN)
    corrupted = out["token_ids"][selected]
    assert abs((corrupted == MASK).mean() - 0.5) <= sigma5(0.5, selected.sum())
    assert ((corrupted == MASK) | (corrupted == rows[selected])).all()


# Seeds, graph modes and shapes.


def test_same_seed_gives_identical_outputs_eager_graph_and_tf_data():
    rows = make_rows(np.random.default_rng(4), BATCH)
    masker = MaskedLMMasker(VOCAB, MASK, SPECIALS)
    seed = tf.constant([5, 0], tf.int64)
    eager = masker(rows, seed)
    graph = tf.function(masker)(tf.constant(rows), seed)
    in_data = run_batches(masker, rows, base_seed=5)
    for key in eager:
        np.testing.assert_array_equal(eager[key].numpy(), graph[key].numpy())
        np.testing.assert_array_equal(eager[key].numpy(), in_data[key])


def test_different_seeds_give_different_masks():
    rows = make_rows(np.random.default_rng(5), BATCH)
    masker = MaskedLMMasker(VOCAB, MASK, SPECIALS)
    first = masker(rows, [0, 1])
    for seed in ([0, 2], [1, 1]):
        other = masker(rows, seed)
        assert (first["mask_positions"].numpy() != other["mask_positions"].numpy()).any()
        assert (first["token_ids"].numpy() != other["token_ids"].numpy()).any()


def test_works_with_unknown_shapes_short_rows_and_int64_ids():
    masker = MaskedLMMasker(VOCAB, MASK, SPECIALS, selection_rate=0.5, max_predictions=8)
    fn = tf.function(
        masker,
        input_signature=[tf.TensorSpec([None, None], tf.int64), tf.TensorSpec([2], tf.int32)],
    )
    rows = np.array([[CLS, 10, 11, 12, SEP], [CLS, SEP, PAD, PAD, PAD]], np.int64)
    out = fn(rows, tf.constant([3, 4]))
    np.testing.assert_array_equal(out["mask_weights"].numpy().sum(axis=1), [2, 0])
    assert out["mask_positions"].shape == (2, 8) and out["token_ids"].dtype == tf.int32


def test_many_scattered_special_ids_are_never_selected():
    specials = [0, 3, 17, 100, 250, 251, 640, 999]  # more runs than the comparison path takes
    masker = MaskedLMMasker(VOCAB, 3, specials, mask_token_rate=0.0, random_token_rate=1.0)
    rng = np.random.default_rng(6)
    rows = rng.choice(specials, size=(64, 64)).astype(np.int32)
    rows[:, ::2] = rng.integers(0, VOCAB, size=(64, 32))
    out = masker(rows, [1, 1])
    selected = selected_mask({k: v.numpy() for k, v in out.items()}, 64)
    assert selected.any() and not np.isin(rows[selected], specials).any()
    assert not np.isin(out["token_ids"].numpy()[selected], specials).any()


# Whole words.


def test_whole_word_selection_never_splits_a_word(word_run):
    rows, _, selected = word_run
    word = np.cumsum(word_starts(rows), axis=1)  # word number of each piece in its row
    maskable = ~np.isin(rows, SPECIALS)
    assert not selected[~maskable].any()
    for r in range(len(rows)):
        taken = np.bincount(word[r][maskable[r]], weights=selected[r][maskable[r]])
        pieces = np.bincount(word[r][maskable[r]])
        whole = (taken == 0) | (taken == pieces)
        assert whole.all(), (rows[r], selected[r])
    # Words of several pieces were selected, and a continuation piece after [CLS] or [SEP]
    # counts as a word of its own.
    assert (selected & CONTINUATION[rows]).any()


def test_whole_word_walk_skips_words_that_do_not_fit_and_goes_on(word_run):
    rows, out, selected = word_run
    budget = expected_budget(rows)
    count = selected.sum(axis=1)
    assert (count <= budget).all()
    assert (count == budget).mean() > 0.9
    word = np.cumsum(word_starts(rows), axis=1)
    maskable = ~np.isin(rows, SPECIALS)
    for r in range(len(rows)):
        pieces = np.bincount(word[r][maskable[r]])
        taken = np.bincount(word[r][maskable[r]], weights=selected[r][maskable[r]]) > 0
        left_over = budget[r] - count[r]
        # BERT's loop: a word is skipped only when it does not fit what is left.
        assert (pieces[(pieces > 0) & ~taken] > left_over).all()


def test_whole_word_corruption_is_decided_per_piece(word_run):
    rows, out, selected = word_run
    corrupted = out["token_ids"]
    masked = corrupted == MASK
    assert abs(masked[selected].mean() - 0.8) <= sigma5(0.8, selected.sum())
    # Two-piece words: with independent decisions, P(exactly one piece is [MASK]) = 0.32.
    starts = word_starts(rows)
    two_piece = (
        starts[:, :-2]
        & selected[:, :-2]
        & ~starts[:, 1:-1]
        & ~np.isin(rows[:, 1:-1], SPECIALS)
        & (starts[:, 2:] | np.isin(rows[:, 2:], SPECIALS))
    )
    mixed = masked[:, :-2][two_piece] != masked[:, 1:-1][two_piece]
    assert abs(mixed.mean() - 0.32) <= sigma5(0.32, len(mixed)), (mixed.mean(), len(mixed))


# n-gram spans.


def spans_in_words(rows, units, max_ngram, words):
    """Lengths in words of the spans whose length is the drawn one: spans that do not start
    right after a special token (their start may cut a longer span) and start at least
    `max_ngram` words before the end of their segment (so they cannot be cut there)."""
    maskable = units >= 0
    starts = word_starts(rows) if words else maskable
    r, s = np.nonzero(maskable)
    length = np.zeros(units.shape, int)
    np.add.at(length, (r, units[r, s]), starts[r, s])
    # Word starts from each position to the end of its segment.
    seq_len = rows.shape[1]
    next_special = np.where(~maskable, np.arange(seq_len), seq_len)
    next_special = np.minimum.accumulate(next_special[:, ::-1], axis=1)[:, ::-1]
    from_here = np.cumsum(starts[:, ::-1], axis=1)[:, ::-1]
    from_here = np.pad(from_here, ((0, 0), (0, 1)))
    to_segment_end = from_here[:, :-1] - np.take_along_axis(from_here, next_special, axis=1)
    previous = np.pad(units[:, :-1], ((0, 0), (1, 0)), constant_values=-1)
    first = maskable & (units != previous)
    genuine = first & (previous >= 0) & (to_segment_end >= max_ngram)
    r, s = np.nonzero(genuine)
    return length[r, units[r, s]]


@pytest.mark.parametrize("whole_word", [False, True], ids=["tokens", "words"])
def test_ngram_span_lengths_follow_inverse_length_law(whole_word):
    rows = make_rows(np.random.default_rng(7), 2000, words=whole_word)
    masker = MaskedLMMasker(
        VOCAB,
        MASK,
        SPECIALS,
        max_ngram=3,
        whole_word=whole_word,
        continuation_mask=CONTINUATION if whole_word else None,
    )
    units = masker.candidate_units(rows, [8, 0]).numpy()
    lengths = spans_in_words(rows, units, 3, whole_word)
    p = np.array([1, 1 / 2, 1 / 3]) / (1 + 1 / 2 + 1 / 3)  # 6/11, 3/11, 2/11
    shares = np.bincount(lengths, minlength=4)[1:] / len(lengths)
    assert len(lengths) > 20000 and lengths.min() >= 1
    for share, p_n in zip(shares, p, strict=True):
        assert abs(share - p_n) <= sigma5(p_n, len(lengths)), (shares, p)


@pytest.mark.parametrize("whole_word", [False, True], ids=["tokens", "words"])
def test_ngram_spans_never_cross_special_tokens(whole_word):
    rows = make_rows(np.random.default_rng(9), 500, words=whole_word)
    masker = MaskedLMMasker(
        VOCAB,
        MASK,
        SPECIALS,
        max_ngram=4,
        whole_word=whole_word,
        continuation_mask=CONTINUATION if whole_word else None,
    )
    units = masker.candidate_units(rows, [1, 2]).numpy()
    special = np.isin(rows, SPECIALS)
    assert ((units == -1) == special).all()
    segment = np.cumsum(special, axis=1)
    starts = word_starts(rows) if whole_word else ~special
    for r in np.flatnonzero((~special).any(axis=1)):
        ids = units[r][~special[r]]
        # Numbered 0, 1, ... in order: each span is one run of consecutive positions...
        assert (np.diff(ids) >= 0).all() and (np.diff(ids) <= 1).all()
        # ...inside one segment, made of at most 4 whole words.
        seg = segment[r][~special[r]]
        assert (np.diff(ids)[np.diff(seg) > 0] == 1).all()
        words_per_span = np.bincount(ids, weights=starts[r][~special[r]])
        assert words_per_span.max() <= 4 and words_per_span.min() >= 1


@pytest.mark.parametrize("whole_word", [False, True], ids=["tokens", "words"])
def test_ngram_selection_takes_spans_or_one_shortened_span(whole_word):
    rows = make_rows(np.random.default_rng(10), BATCH * 30, words=whole_word)
    masker = MaskedLMMasker(
        VOCAB,
        MASK,
        SPECIALS,
        max_ngram=3,
        whole_word=whole_word,
        continuation_mask=CONTINUATION if whole_word else None,
    )
    out = masker(rows, [4, 4])
    selected = selected_mask({k: v.numpy() for k, v in out.items()}, SEQ_LEN)
    units = masker.candidate_units(rows, [4, 4]).numpy()
    budget = expected_budget(rows)
    count = selected.sum(axis=1)
    if whole_word:
        assert (count <= budget).all() and (count == budget).mean() > 0.9
    else:
        np.testing.assert_array_equal(count, budget)  # token spans fill the budget exactly
    starts = word_starts(rows) if whole_word else ~np.isin(rows, SPECIALS)
    for r in range(len(rows)):
        partial = 0
        for unit in np.unique(units[r][units[r] >= 0]):
            where = np.flatnonzero(units[r] == unit)
            taken = selected[r, where]
            k = taken.sum()
            assert taken[:k].all()  # a prefix of the span...
            if 0 < k < len(where):
                assert starts[r, where[k]]  # ...ending at a word boundary
                partial += 1
        if not whole_word:
            assert partial <= 1  # whole-word spans may be shortened once per round


# The walk against BERT's and ALBERT's loops.


def sequential_walk(units, starts, order, budget, max_ngram):
    """BERT's / ALBERT's `create_masked_lm_predictions` loop over one row's units in `order`:
    a unit that does not fit is skipped (words) or first shortened word by word (n-grams)."""
    spans = {}  # unit -> list of words, a word a list of positions
    for position in np.flatnonzero(units >= 0):
        words = spans.setdefault(units[position], [])
        if starts[position] or not words:
            words.append([position])
        else:
            words[-1].append(position)
    taken, left = [], budget
    for unit in order:
        if left <= 0:
            break
        words = spans.get(unit, [])
        n = len(words) if max_ngram > 1 else (1 if words else 0)
        pieces = sum(words[:n], []) if max_ngram > 1 else sum(words, [])
        while max_ngram > 1 and n > 0 and len(pieces) > left:
            n -= 1
            pieces = sum(words[:n], [])
        if 0 < len(pieces) <= left:
            taken += pieces
            left -= len(pieces)
    return sorted(taken)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"whole_word": True, "continuation_mask": CONTINUATION},
        {"max_ngram": 3},
        {"whole_word": True, "continuation_mask": CONTINUATION, "max_ngram": 3},
        {
            "whole_word": True,
            "continuation_mask": CONTINUATION,
            "max_ngram": 4,
            "max_predictions": 7,
        },
    ],
    ids=["words", "token-ngrams", "word-ngrams", "word-ngrams-small-budget"],
)
def test_vectorized_walk_equals_the_sequential_loop(monkeypatch, kwargs):
    # White box: the random order of the units is the argsort of their keys; record it and
    # replay BERT's / ALBERT's loop over the same order.
    recorded = []
    argsort = tf.argsort

    def recording_argsort(values, *args, **kw):
        recorded.append(argsort(values, *args, **kw))
        return recorded[-1]

    monkeypatch.setattr(tf, "argsort", recording_argsort)
    masker = MaskedLMMasker(VOCAB, MASK, SPECIALS, **kwargs)
    rows = make_rows(np.random.default_rng(11), 300, words=True)
    with kernels.ops_only():  # TensorFlow's ops (the compiled op gives their bytes, below)
        out = masker(rows, [3, 9])
    assert len(recorded) == 1, "the unit order is no longer a single tf.argsort"
    order = recorded[0].numpy()
    units = masker.candidate_units(rows, [3, 9]).numpy()
    starts = word_starts(rows) if masker.whole_word else units >= 0
    budget = expected_budget(rows, max_predictions=masker.max_predictions)
    positions, weights = out["mask_positions"].numpy(), out["mask_weights"].numpy()
    for r in range(len(rows)):
        expected = sequential_walk(units[r], starts[r], order[r], budget[r], masker.max_ngram)
        assert positions[r][weights[r] > 0].tolist() == expected, r
    compiled = masker(rows, [3, 9])
    np.testing.assert_array_equal(compiled["mask_positions"].numpy(), positions)


def test_xla_compiled_masks_equal_graph_masks():
    # Random integers from a named Philox stream are the same under XLA. (The whole-word and
    # n-gram paths compile too, but take seconds to.)
    masker = MaskedLMMasker(VOCAB, MASK, SPECIALS)
    rows = tf.constant(make_rows(np.random.default_rng(12), BATCH))
    seed = tf.constant([2, 5], tf.int64)
    graph = tf.function(masker)(rows, seed)
    xla = tf.function(masker, jit_compile=True)(rows, seed)
    for key in graph:
        np.testing.assert_array_equal(graph[key].numpy(), xla[key].numpy())


# The compiled op and TensorFlow's ops: the same bytes.

needs_compiler = pytest.mark.skipif(
    kernels.compiler() is None, reason="no C++ compiler to build lmpipe's kernels"
)
KERNEL_OP = "LmpipeMaskedLm"


def traced_op_types(masker, rows, seed):
    graph = tf.function(masker).get_concrete_function(tf.constant(rows), tf.constant(seed)).graph
    return {operation.type for operation in graph.get_operations()}


def random_case(case):
    """A masker and a batch drawn at random: tokens, whole words or n-grams; vocabulary, special
    ids (few runs, compared, or many, gathered; padding not always 0), rates (0 and 1
    included), lists longer or shorter than the rows, rows of padding only or of special tokens
    only."""
    rng = np.random.default_rng(100 + case)
    vocab = int(rng.integers(8, 3000))
    specials = sorted(set(rng.choice(vocab - 1, int(rng.integers(1, 9)), replace=False).tolist()))
    mask_rate, random_rate = rng.choice([0.0, 0.3, 0.8, 1.0]), rng.choice([0.0, 0.1, 0.2])
    # Tokens, whole words, token n-grams or word n-grams, in turns.
    units = {}
    if case % 4 in (1, 3):
        units.update(whole_word=True, continuation_mask=rng.random(vocab) < 0.4)
    if case % 4 >= 2:
        units.update(max_ngram=int(rng.integers(2, 5)))
    masker = MaskedLMMasker(
        vocab,
        int(rng.integers(vocab)),
        specials,
        pad_token_id=specials[-1],
        selection_rate=float(rng.choice([0.15, 0.5, 1.0, rng.uniform(0.01, 1.0)])),
        mask_token_rate=float(mask_rate),
        random_token_rate=float(min(random_rate, 1.0 - mask_rate)),
        max_predictions=int(rng.integers(1, 40)),
        **units,
    )
    rows = rng.integers(0, vocab, (int(rng.integers(1, 40)), int(rng.integers(1, 200))))
    rows[rng.random(rows.shape) < 0.2] = specials[-1]
    rows[0] = specials[-1]  # padding only
    if len(rows) > 1:
        rows[1] = rng.choice(specials, rows.shape[1])  # special tokens only
    return masker, rows.astype(np.int32)


@needs_compiler
@pytest.mark.parametrize("case", range(48))
def test_compiled_op_gives_the_bytes_of_tensorflow_ops(case):
    masker, rows = random_case(case)
    rng = np.random.default_rng(case)
    # Seeds of either dtype, negative and beyond 2**32 too.
    seed_dtype = np.int32 if case % 8 < 4 else np.int64
    seed = rng.integers(np.iinfo(seed_dtype).min, np.iinfo(seed_dtype).max, 2, seed_dtype)
    assert KERNEL_OP in traced_op_types(masker, rows, seed)
    compiled = masker(rows, seed)
    with kernels.ops_only():
        assert KERNEL_OP not in traced_op_types(masker, rows, seed)
        reference = masker(rows, seed)
    for key in reference:
        assert compiled[key].dtype == reference[key].dtype
        np.testing.assert_array_equal(compiled[key].numpy(), reference[key].numpy(), err_msg=key)


@needs_compiler
@pytest.mark.parametrize(
    "kwargs", [{}, {"whole_word": True, "continuation_mask": CONTINUATION, "max_ngram": 3}]
)
def test_compiled_op_is_the_tf_data_path_with_the_same_batches(kwargs):
    rows = make_rows(np.random.default_rng(13), BATCH * 8, words=True)
    masker = MaskedLMMasker(VOCAB, MASK, SPECIALS, **kwargs)
    compiled = run_batches(masker, rows, base_seed=7)
    with kernels.ops_only():
        reference = run_batches(masker, rows, base_seed=7)
    for key in reference:
        np.testing.assert_array_equal(compiled[key], reference[key], err_msg=key)


@needs_compiler
def test_under_xla_the_masker_uses_tensorflow_ops():
    rows = make_rows(np.random.default_rng(14), 4)
    seed = np.array([1, 2], np.int64)
    masker = MaskedLMMasker(VOCAB, MASK, SPECIALS, whole_word=True, continuation_mask=CONTINUATION)
    assert KERNEL_OP in traced_op_types(masker, rows, seed)
    xla = tf.function(MaskedLMMasker(VOCAB, MASK, SPECIALS), jit_compile=True)
    graph = xla.get_concrete_function(tf.constant(rows), tf.constant(seed)).graph
    assert KERNEL_OP not in {operation.type for operation in graph.get_operations()}


def masking_path(path):
    """The context in which the masker takes `path`: the compiled op or TensorFlow's ops."""
    if path == "compiled":
        if kernels.compiler() is None:
            pytest.skip("no C++ compiler to build lmpipe's kernels")
        return contextlib.nullcontext()
    return kernels.ops_only()


@pytest.mark.parametrize("path", ["compiled", "tensorflow-ops"])
@pytest.mark.parametrize("run", ["eager", "graph", "tf.data"])
@pytest.mark.parametrize(
    ("bad_id", "dtype"), [(VOCAB + 5, np.int32), (-3, np.int32), (2**32 + 7, np.int64)]
)
def test_ids_outside_the_vocabulary_raise_naming_row_and_position(path, run, bad_id, dtype):
    """Both paths refuse the same ids with the same message (an int64 id past 2**32 is not
    wrapped into the vocabulary by the cast to int32)."""
    masker = MaskedLMMasker(VOCAB, MASK, SPECIALS)
    rows = np.array([[CLS, 10, 11, SEP], [CLS, 12, bad_id, SEP], [CLS, bad_id, 9, SEP]], dtype)
    seed = tf.constant([0, 0], tf.int64)
    calls = {
        "eager": lambda: masker(rows, seed),
        "graph": lambda: tf.function(masker)(tf.constant(rows), seed),
        "tf.data": lambda: list(
            tf.data.Dataset.from_tensors(rows).map(lambda x: masker(x, seed)).as_numpy_iterator()
        ),
    }
    message = rf"token_ids\[1, 2\] = {bad_id} is not a token id in \[0, vocabulary_size=1000\)"
    with masking_path(path), pytest.raises(tf.errors.InvalidArgumentError, match=message):
        calls[run]()


@pytest.mark.parametrize("path", ["compiled", "tensorflow-ops", "xla"])
@pytest.mark.parametrize("shape", [(3, 0), (0, 5)], ids=["rows-of-length-0", "no-rows"])
@pytest.mark.parametrize("static", [True, False], ids=["static", "unknown-shape"])
def test_empty_batches_give_empty_outputs_of_their_shapes(path, shape, static):
    masker = MaskedLMMasker(VOCAB, MASK, SPECIALS, max_predictions=4)
    spec = tf.TensorSpec(shape if static else [None, None], tf.int32)
    call = tf.function(masker, input_signature=[spec, tf.TensorSpec([2], tf.int32)])
    if path == "xla":
        call = tf.function(masker, jit_compile=True)
    with masking_path("tensorflow-ops" if path == "xla" else path):
        out = call(tf.zeros(shape, tf.int32), tf.constant([4, 2]))
    assert out["token_ids"].shape == shape and out["token_ids"].dtype == tf.int32
    for key, dtype in (("mask_positions", tf.int32), ("mask_ids", tf.int32)):
        assert out[key].dtype == dtype
    assert out["mask_weights"].dtype == tf.float32
    for key in ("mask_positions", "mask_ids", "mask_weights"):
        np.testing.assert_array_equal(out[key].numpy(), np.zeros((shape[0], 4)), err_msg=key)


# Arguments.


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"vocabulary_size": 0}, "vocabulary_size"),
        ({"vocabulary_size": True}, "vocabulary_size"),
        ({"vocabulary_size": 5}, "vocabulary_size"),  # no non-special id left
        ({"mask_token_id": VOCAB}, "mask_token_id"),
        ({"mask_token_id": -1}, "mask_token_id"),
        ({"special_token_ids": [0, VOCAB]}, "special_token_ids"),
        ({"special_token_ids": None}, "special_token_ids"),
        ({"special_token_ids": ["[PAD]"]}, "special_token_ids"),
        ({"special_token_ids": [0.0, 1.5]}, "special_token_ids"),
        ({"special_token_ids": [[0, 1]]}, "special_token_ids"),
        ({"special_token_ids": [[0], [1, 2]]}, "special_token_ids"),
        ({"selection_rate": 0.0}, "selection_rate"),
        ({"selection_rate": 1.5}, "selection_rate"),
        ({"selection_rate": "0.15"}, "selection_rate"),
        ({"selection_rate": float("nan")}, "selection_rate"),
        ({"mask_token_rate": float("nan")}, "mask_token_rate"),
        ({"random_token_rate": float("inf")}, "random_token_rate"),
        ({"random_token_rate": float("-inf")}, "random_token_rate"),
        ({"pad_token_id": 7}, "pad_token_id"),
        ({"pad_token_id": None}, "pad_token_id"),
        ({"mask_token_rate": -0.1}, "mask_token_rate"),
        ({"random_token_rate": 1.2}, "random_token_rate"),
        ({"mask_token_rate": 0.8, "random_token_rate": 0.3}, "mask_token_rate + random_token_rate"),
        ({"max_predictions": 0}, "max_predictions"),
        ({"max_predictions": 2.5}, "max_predictions"),
        ({"max_ngram": 0}, "max_ngram"),
        ({"whole_word": "yes"}, "whole_word"),
        ({"whole_word": True}, "continuation_mask"),
        ({"continuation_mask": CONTINUATION}, "continuation_mask"),
        ({"whole_word": True, "continuation_mask": CONTINUATION[:10]}, "continuation_mask"),
        ({"whole_word": True, "continuation_mask": CONTINUATION.astype(int)}, "continuation_mask"),
    ],
)
def test_bad_arguments_raise_naming_the_argument(kwargs, message):
    arguments = {"vocabulary_size": VOCAB, "mask_token_id": MASK, "special_token_ids": SPECIALS}
    arguments.update(kwargs)
    with pytest.raises(ValueError, match=message.replace("+", r"\+")):
        MaskedLMMasker(**arguments)


def test_bad_call_inputs_raise_naming_the_input():
    masker = MaskedLMMasker(VOCAB, MASK, SPECIALS)
    with pytest.raises(ValueError, match="token_ids"):
        masker(np.array([CLS, 10, SEP]), [0, 0])
    with pytest.raises(ValueError, match="token_ids"):
        masker(np.array([[1.0, 2.0]]), [0, 0])
    with pytest.raises(ValueError, match="seed"):
        masker(np.array([[CLS, 10, SEP]]), [0, 0, 0])
