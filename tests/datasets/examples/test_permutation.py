"""Tests of PermutationLM: XLNet's targets, factorization order and query-stream mask.

The rows are real text (Shakespeare's comedies, bert-base-uncased WordPiece) packed as
`A [SEP] B [SEP] [CLS]` with padding tails of varying length. Masks use polarity 1 = may
attend; the content mask `c` is `perm_mask` with the diagonal set to 1 at real tokens.

Statistical checks allow 5 standard deviations of the estimate: a correct implementation
fails one with probability below 1e-6.
"""

import numpy as np
import pytest
import tensorflow as tf
from scipy import stats

from lmpipe.datasets.examples.permutation import PermutationLM

SEQ_LEN, ROWS, BATCH = 128, 384, 64


@pytest.fixture(scope="module")
def packed(bert_tokenizer, comedies):
    """Real text packed as `A [SEP] B [SEP] [CLS] [PAD]...`: token_ids, padding_mask [R, S]."""
    sentences = [s for document in list(comedies.iter_documents())[:12] for s in document]
    stream = bert_tokenizer.tokenize(tf.constant(sentences)).flat_values.numpy()
    rng = np.random.default_rng(0)
    tok = bert_tokenizer
    token_ids = np.full((ROWS, SEQ_LEN), tok.pad_id, np.int32)
    for row in range(ROWS):
        # Mostly full rows, some short ones, as a pipeline produces.
        length = SEQ_LEN if rng.random() < 0.6 else int(rng.integers(5, SEQ_LEN))
        text = length - 3
        start = int(rng.integers(0, len(stream) - text))
        a = int(rng.integers(1, text))
        body = stream[start : start + text]
        token_ids[row, :length] = np.concatenate(
            [body[:a], [tok.sep_id], body[a:], [tok.sep_id], [tok.cls_id]]
        )
    padding_mask = (np.arange(SEQ_LEN)[None, :] < (token_ids != tok.pad_id).sum(1)[:, None]).astype(
        np.int32
    )
    return token_ids, padding_mask


def make_plm(tokenizer, **kwargs):
    options = dict(
        seq_len=SEQ_LEN,
        max_predictions=60,
        special_ids=tokenizer.special_token_ids,
        continuation_mask=tokenizer.continuation_mask,
    )
    options.update(kwargs)
    return PermutationLM(**options)


def run(plm, token_ids, padding_mask, base_seed=0, backward=None):
    """The transform over all rows in a tf.data pipeline, one seed per batch, concatenated."""
    data = tf.data.Dataset.from_tensor_slices((token_ids, padding_mask)).batch(BATCH).enumerate()

    def transform(index, batch):
        seed = tf.stack([tf.constant(base_seed, tf.int64), index])
        rows = None if backward is None else tf.fill([tf.shape(batch[0])[0]], backward)
        return plm(batch[0], batch[1], seed, backward=rows)

    outputs = list(data.map(transform).as_numpy_iterator())
    return {key: np.concatenate([o[key] for o in outputs]) for key in outputs[0]}


def content_mask(out, padding_mask):
    c = out["perm_mask"].copy()
    rows, positions = np.nonzero(padding_mask)
    c[rows, positions, positions] = 1.0
    return c


@pytest.fixture(scope="module")
def blocks_out(bert_tokenizer, packed):
    plm = make_plm(bert_tokenizer, perm_size=16)
    return run(plm, *packed)


def test_query_stream_never_sees_own_target_and_content_stream_does(packed, blocks_out):
    token_ids, padding_mask = packed
    q = blocks_out["perm_mask"]
    c = content_mask(blocks_out, padding_mask)
    target = blocks_out["masked_tokens"].astype(bool)
    rows, positions = np.nonzero(target)
    assert len(rows) > 1000
    assert np.all(q[rows, positions, positions] == 0)
    assert np.all(c[rows, positions, positions] == 1)
    rows, positions = np.nonzero(~target)
    np.testing.assert_array_equal(q[rows, positions], c[rows, positions])


def test_targets_see_each_other_in_a_strict_total_order_inside_blocks(packed, blocks_out):
    q = blocks_out["perm_mask"].astype(bool)
    target = blocks_out["masked_tokens"].astype(bool)
    same_block_pairs, inverted = 0, 0
    for row in range(ROWS):
        positions = np.flatnonzero(target[row])
        among = q[row][np.ix_(positions, positions)]  # i sees j
        n = len(positions)
        assert not among.diagonal().any()  # irreflexive
        # Exactly one of "i sees j", "j sees i" for i != j: antisymmetric and total.
        np.testing.assert_array_equal(among | among.T, ~np.eye(n, dtype=bool))
        # Transitive: i sees j and j sees k imply i sees k.
        two_steps = (among.astype(np.int32) @ among.astype(np.int32)) > 0
        assert not (two_steps & ~among).any()
        # The place of each target in the order: the number of targets it sees.
        place = among.sum(axis=1)
        np.testing.assert_array_equal(np.sort(place), np.arange(n))
        in_order = positions[np.argsort(place)]
        blocks = in_order // 16
        assert np.all(np.diff(blocks) >= 0), "the blocks keep their natural order"
        same_block = positions[1:] // 16 == positions[:-1] // 16  # neighbouring targets
        same_block_pairs += same_block.sum()
        inverted += (same_block & (place[1:] < place[:-1])).sum()
    # Inside a block the order is a uniform permutation: a later position comes first half
    # of the time (adjacent comparisons of one permutation are negatively correlated, so the
    # binomial deviation is an upper bound).
    share = inverted / same_block_pairs
    assert abs(share - 0.5) < 5 * np.sqrt(0.25 / same_block_pairs), share


def test_every_position_sees_every_non_target_and_no_non_target_sees_a_target(packed, blocks_out):
    token_ids, padding_mask = packed
    q = blocks_out["perm_mask"].astype(bool)
    target = blocks_out["masked_tokens"].astype(bool)
    context = ~target & padding_mask.astype(bool)  # [R, S] real non-targets
    # Every row (targets, non-targets, special tokens, padding rows) sees every context column.
    assert np.all(q | ~context[:, None, :])
    non_target_rows = ~target[:, :, None] & target[:, None, :]
    assert not (q & non_target_rows).any()


def test_padding_columns_are_never_seen(packed, blocks_out):
    _, padding_mask = packed
    assert (padding_mask == 0).any()
    padding_columns = np.broadcast_to(
        (padding_mask == 0)[:, None, :], blocks_out["perm_mask"].shape
    )
    assert np.all(blocks_out["perm_mask"][padding_columns] == 0)


def test_whole_sequence_order_mixes_positions_across_the_sequence(bert_tokenizer, packed):
    out = run(make_plm(bert_tokenizer), *packed)
    q = out["perm_mask"].astype(bool)
    target = out["masked_tokens"].astype(bool)
    pairs, inverted = 0, 0
    for row in range(ROWS):
        positions = np.flatnonzero(target[row])
        place = q[row][np.ix_(positions, positions)].sum(axis=1)
        np.testing.assert_array_equal(np.sort(place), np.arange(len(positions)))
        if len(positions) >= 2:  # the first and last target of the row
            pairs += 1
            inverted += place[-1] < place[0]
    assert abs(inverted / pairs - 0.5) < 5 * np.sqrt(0.25 / pairs)


def test_memory_part_is_ordered_before_the_rest(bert_tokenizer, packed):
    reuse = 32
    token_ids, padding_mask = packed
    out = run(make_plm(bert_tokenizer, reuse_len=reuse, perm_size=16), token_ids, padding_mask)
    q = out["perm_mask"].astype(bool)
    target = out["masked_tokens"].astype(bool)
    real = padding_mask.astype(bool)
    assert target[:, :reuse].any() and target[:, reuse:].any()  # targets in both parts
    assert not q[:, :reuse, reuse:].any(), "the memory part never sees the rest"
    later_rows = np.broadcast_to(real[:, None, :reuse], q[:, reuse:, :reuse].shape)
    np.testing.assert_array_equal(q[:, reuse:, :reuse], later_rows)
    # Inside each part: targets see exactly the targets before them (a strict total order)
    # and every non-target of the part; non-targets see no target of their part.
    for part in (slice(0, reuse), slice(reuse, SEQ_LEN)):
        tq, tt = q[:, part, part], target[:, part]
        context = ~tt & real[:, part]
        assert np.all(tq | ~context[:, None, :])
        assert not (tq & (~tt[:, :, None] & tt[:, None, :])).any()
        for row in range(0, ROWS, 7):
            positions = np.flatnonzero(tt[row])
            place = tq[row][np.ix_(positions, positions)].sum(axis=1)
            np.testing.assert_array_equal(np.sort(place), np.arange(len(positions)))


def test_prediction_lists_name_the_targets_in_ascending_order(bert_tokenizer, packed):
    token_ids, padding_mask = packed
    max_predictions = 20
    out = run(make_plm(bert_tokenizer, max_predictions=max_predictions), token_ids, padding_mask)
    mapping = out["target_mapping"]
    assert mapping.shape == (ROWS, max_predictions, SEQ_LEN)
    assert set(np.unique(mapping)) <= {0.0, 1.0}
    row_sums = mapping.sum(axis=2)
    np.testing.assert_array_equal(row_sums, out["target_mask"])  # one-hot or zero
    counts = out["target_mask"].sum(axis=1)
    assert counts.max() <= max_predictions
    # The real slots come first; together they are exactly the masked tokens.
    np.testing.assert_array_equal(
        out["target_mask"], (np.arange(max_predictions)[None, :] < counts[:, None]).astype(float)
    )
    np.testing.assert_array_equal(mapping.sum(axis=1), out["masked_tokens"])
    positions = mapping.argmax(axis=2)
    for row in range(ROWS):
        mapped = positions[row, : int(counts[row])]
        assert np.all(np.diff(mapped) > 0)
        np.testing.assert_array_equal(out["target_ids"][row, : len(mapped)], token_ids[row, mapped])
        assert np.all(out["target_ids"][row, len(mapped) :] == 0)
    # Never special tokens or padding; the content input is left as it is.
    targeted = token_ids[out["masked_tokens"].astype(bool)]
    assert not np.isin(targeted, bert_tokenizer.special_token_ids).any()
    assert np.all(padding_mask[out["masked_tokens"].astype(bool)] == 1)


def test_max_predictions_cuts_the_same_spans_to_the_budget(bert_tokenizer, packed):
    free = run(make_plm(bert_tokenizer, max_predictions=SEQ_LEN), *packed)["masked_tokens"]
    capped = run(make_plm(bert_tokenizer, max_predictions=8), *packed)["masked_tokens"]
    assert np.all(capped <= free), "the budget only removes targets"
    np.testing.assert_array_equal(capped.sum(axis=1), np.minimum(free.sum(axis=1), 8))
    assert (free.sum(axis=1) > 8).mean() > 0.5


@pytest.mark.parametrize("mask_alpha", [6, 3])
def test_one_token_in_mask_alpha_is_a_target(bert_tokenizer, packed, mask_alpha):
    token_ids, padding_mask = packed
    out = run(make_plm(bert_tokenizer, mask_alpha=mask_alpha, max_predictions=SEQ_LEN), *packed)
    maskable = (padding_mask == 1) & ~np.isin(token_ids, bert_tokenizer.special_token_ids)
    targets = out["masked_tokens"].sum(axis=1).astype(float)
    candidates = maskable.sum(axis=1).astype(float)
    rate = targets.sum() / candidates.sum()
    # Standard error of a ratio of sums over independent rows (delta method).
    stderr = np.sqrt(np.sum((targets - rate * candidates) ** 2)) / candidates.sum()
    assert abs(rate - 1 / mask_alpha) < 5 * stderr, (rate, stderr)
    assert stderr < 0.01


def word_runs(token_ids, masked, maskable, continuation, max_span):
    """Lengths in words of maximal runs of target words, on the row's sequence of words
    (special tokens skipped), keeping runs that start after a non-target word and at least
    `max_span` words before the end, whose length therefore was not cut."""
    lengths = []
    for row in range(len(token_ids)):
        positions = np.flatnonzero(maskable[row])
        ids = token_ids[row, positions]
        starts = ~continuation[ids]
        starts[0] = True
        after_special = np.diff(positions, prepend=-2) > 1  # the piece before was not a word
        starts |= after_special
        word_target = masked[row, positions][starts].astype(bool)
        num_words = len(word_target)
        w = 1
        while w < num_words:
            if word_target[w] and not word_target[w - 1]:
                end = w
                while end < num_words and word_target[end]:
                    end += 1
                if w + max_span <= num_words:
                    lengths.append(end - w)
                w = end
            w += 1
    return np.array(lengths)


def test_span_lengths_follow_the_inverse_law(bert_tokenizer, packed):
    token_ids, padding_mask = packed
    max_span = 5
    continuation = bert_tokenizer.continuation_mask
    maskable = (padding_mask == 1) & ~np.isin(token_ids, bert_tokenizer.special_token_ids)
    lengths = []
    for seed in range(3):
        plm = make_plm(bert_tokenizer, max_predictions=SEQ_LEN, max_span=max_span)
        out = run(plm, token_ids, padding_mask, base_seed=seed)
        masked = out["masked_tokens"]
        # Spans are whole words: every continuation piece shares its word's status.
        inside = maskable[:, 1:] & maskable[:, :-1] & continuation[token_ids[:, 1:]]
        assert inside.sum() > 500
        np.testing.assert_array_equal(masked[:, 1:][inside], masked[:, :-1][inside])
        lengths.append(word_runs(token_ids, masked, maskable, continuation, max_span))
    lengths = np.concatenate(lengths)
    assert lengths.min() >= 1 and lengths.max() <= max_span
    observed = np.bincount(lengths, minlength=max_span + 1)[1:]
    expected = (1 / np.arange(1, max_span + 1)) / np.sum(1 / np.arange(1, max_span + 1))
    statistic, p_value = stats.chisquare(observed, expected * observed.sum())
    assert observed.sum() > 2000
    assert p_value > 1e-6, (observed, expected * observed.sum())


def test_backward_rows_keep_words_whole_read_from_their_end(bert_tokenizer, packed):
    token_ids, padding_mask = packed
    reversed_ids = token_ids.copy()
    for row in range(ROWS):
        n = padding_mask[row].sum() - 3
        reversed_ids[row, :n] = token_ids[row, :n][::-1]  # the text backward, specials kept
        # (the [SEP] inside moves too, as in a backward stream)
    continuation = bert_tokenizer.continuation_mask
    out = run(
        make_plm(bert_tokenizer, max_predictions=SEQ_LEN), reversed_ids, padding_mask, backward=True
    )
    masked = out["masked_tokens"]
    maskable = (padding_mask == 1) & ~np.isin(reversed_ids, bert_tokenizer.special_token_ids)
    # Backward, a continuation piece belongs to the word of the piece after it.
    inside = maskable[:, :-1] & maskable[:, 1:] & continuation[reversed_ids[:, :-1]]
    assert inside.sum() > 500
    np.testing.assert_array_equal(masked[:, :-1][inside], masked[:, 1:][inside])


def test_same_seed_gives_the_same_draw_and_other_seeds_differ(bert_tokenizer, packed):
    token_ids, padding_mask = packed
    plm = make_plm(bert_tokenizer, perm_size=32)
    batch = token_ids[:BATCH], padding_mask[:BATCH]
    eager = plm(*batch, tf.constant([5, 9]))
    graph = tf.function(lambda ids, mask, seed: plm(ids, mask, seed))(*batch, tf.constant([5, 9]))
    for key in eager:
        np.testing.assert_array_equal(eager[key].numpy(), graph[key].numpy())
    other = plm(*batch, tf.constant([5, 10]))
    assert not np.array_equal(eager["masked_tokens"].numpy(), other["masked_tokens"].numpy())
    assert not np.array_equal(eager["perm_mask"].numpy(), other["perm_mask"].numpy())


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(perm_size=48), "`perm_size` must divide seq_len=128"),
        (dict(reuse_len=128), "`reuse_len` must be smaller than seq_len=128"),
        (dict(reuse_len=-1), "`reuse_len` must be an integer >= 0"),
        (dict(reuse_len=40, perm_size=32), "`perm_size` must divide reuse_len=40"),
        (dict(max_predictions=129), "`max_predictions` must be at most seq_len=128"),
        (dict(mask_alpha=1), "`mask_alpha` must be a finite number >= 2"),
        (dict(max_span=0), "`max_span` must be an integer >= 1"),
        (dict(special_ids=[[1, 2], [3]]), "`special_ids` must be a list of integer token ids"),
        (dict(continuation_mask=[0, 1]), "`continuation_mask` must be a bool vector"),
    ],
)
def test_bad_arguments_are_named(bert_tokenizer, kwargs, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[")):
        make_plm(bert_tokenizer, **kwargs)


def test_bad_call_arguments_are_named(bert_tokenizer):
    plm = make_plm(bert_tokenizer)
    ids = tf.zeros([2, SEQ_LEN], tf.int32)
    with pytest.raises(ValueError, match="`token_ids` must have seq_len=128 columns"):
        plm(tf.zeros([2, 64], tf.int32), tf.ones([2, 64]), tf.constant([0, 0]))
    with pytest.raises(ValueError, match="`seed` must be an integer tensor of shape"):
        plm(ids, tf.ones_like(ids), tf.constant([0.5, 1.0]))
    with pytest.raises(ValueError, match="`padding_mask` must have the shape"):
        plm(ids, tf.ones([2, 3]), tf.constant([0, 0]))


@pytest.mark.parametrize("special_ids", [[0, 1, 2, 3], [0, 5, 6, 7, 20], [0, 3, 9, 11, 30, 31]])
def test_special_ids_in_runs_or_scattered_are_never_targets(special_ids):
    # A few runs of consecutive ids are compared directly, more are searched: the same rule.
    rng = np.random.default_rng(0)
    token_ids = rng.integers(0, 40, size=(16, 32)).astype(np.int32)
    plm = PermutationLM(32, 16, special_ids, mask_alpha=2, max_span=1)
    out = plm(token_ids, np.ones_like(token_ids), tf.constant([1, 2], tf.int64))
    targets = out["masked_tokens"].numpy() > 0
    special = np.isin(token_ids, special_ids)
    assert not (targets & special).any()
    assert targets[~special].mean() > 0.2  # about 1 in 2 of the others (mask_alpha=2)


def test_draw_then_expand_is_the_call_and_rows_can_be_laid_out_between(bert_tokenizer, packed):
    plm = make_plm(bert_tokenizer, perm_size=16)
    token_ids, padding_mask = (tf.constant(x[:BATCH]) for x in packed)
    seed = tf.constant([4, 2], tf.int64)
    called = plm(token_ids, padding_mask, seed)
    drawn = plm.draw(token_ids, padding_mask, seed)
    assert {k: (v.dtype, v.shape) for k, v in drawn.items()} == {
        "masked_tokens": (tf.int32, (BATCH, SEQ_LEN)),
        "order_draws": (tf.int32, (BATCH, SEQ_LEN)),
    }
    expanded = plm.expand(token_ids, padding_mask, drawn)
    assert called.keys() == expanded.keys()
    for name in called:  # byte for byte
        assert called[name].numpy().tobytes() == expanded[name].numpy().tobytes(), name
    # Rows rearranged between the halves (each row reversed): the targets follow their tokens
    # and the order stays a permutation of them.
    reverse = tf.reverse(tf.range(SEQ_LEN), [0])
    moved = {name: tf.gather(value, reverse, axis=1) for name, value in drawn.items()}
    out = plm.expand(tf.gather(token_ids, reverse, axis=1), padding_mask[:, ::-1], moved)
    np.testing.assert_array_equal(out["masked_tokens"], called["masked_tokens"].numpy()[:, ::-1])
    np.testing.assert_array_equal(
        np.sort(out["target_ids"], axis=1), np.sort(called["target_ids"], axis=1)
    )
    q, target = out["perm_mask"].numpy().astype(bool), out["masked_tokens"].numpy().astype(bool)
    rows, positions = np.nonzero(target)
    assert not q[rows, positions, positions].any()
    # Targets see each other in a strict order: of two targets, exactly one sees the other.
    both = target[:, :, None] & target[:, None, :] & ~np.eye(SEQ_LEN, dtype=bool)
    np.testing.assert_array_equal((q | q.transpose(0, 2, 1))[both], True)
    assert not (q & q.transpose(0, 2, 1))[both].any()


def test_a_window_without_examples_draws_nothing(bert_tokenizer):
    plm = make_plm(bert_tokenizer)
    empty = tf.zeros([0, SEQ_LEN], tf.int32)
    drawn = plm.draw(empty, empty, tf.constant([1, 2], tf.int64))
    assert drawn["masked_tokens"].shape == (0, SEQ_LEN)
    assert plm.expand(empty, empty, drawn)["perm_mask"].shape == (0, SEQ_LEN, SEQ_LEN)
