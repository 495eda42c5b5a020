"""Sentence pairs cut in the graph, checked against the documents they come from."""

import numpy as np
import pytest
import tensorflow as tf

from lmpipe.datasets.examples.sentence_pairs import pair_spans

MAX_TOKENS = 61


@pytest.fixture(scope="module")
def pool(comedies, bert_tokenizer):
    documents = [document for document in comedies.iter_documents()][:40]
    tokens = bert_tokenizer.tokenize(tf.ragged.constant(documents))
    tokens = tf.ragged.boolean_mask(tokens, tokens.row_lengths(axis=2) > 0)
    ids = tf.range(tokens.nrows(), dtype=tf.int64)
    return tokens, ids


def sentence_index(tokens):
    """Token offset -> (document, sentence) lookups for a pool."""
    sentence_starts = tokens.values.row_splits.numpy()
    document_of_sentence = tokens.value_rowids().numpy()
    return sentence_starts, document_of_sentence


def cut(pool, objective, seed, truncate=False, num_current=32):
    tokens, ids = pool
    spans = pair_spans(
        tokens, ids, num_current, tf.constant(seed), objective, MAX_TOKENS, truncate=truncate
    )
    return {name: value.numpy() for name, value in spans.items()}


def test_nsp_label_one_pairs_are_consecutive_sentences_of_one_document(pool):
    starts, document_of = sentence_index(pool[0])
    spans = cut(pool, "nsp", [1, 2])
    true_next = spans["label"] == 1
    assert true_next.sum() > 50
    for a_start, a_end, b_start, b_end in zip(
        *(spans[key][true_next] for key in ("a_start", "a_end", "b_start", "b_end")),
        strict=True,
    ):
        # Spans begin and end on sentence boundaries, B starts where A ends, one document.
        for offset in (a_start, a_end, b_start, b_end):
            assert offset in starts
        assert a_end == b_start and a_start < a_end < b_end
        first, last = np.searchsorted(starts, [a_start, b_end - 1], side="right") - 1
        assert document_of[first] == document_of[last]


def test_nsp_label_zero_takes_b_from_another_document(pool):
    starts, document_of = sentence_index(pool[0])
    spans = cut(pool, "nsp", [3, 4])
    random_next = spans["label"] == 0
    assert random_next.sum() > 50
    a_documents = document_of[np.searchsorted(starts, spans["a_start"], side="right") - 1]
    b_documents = document_of[np.searchsorted(starts, spans["b_start"], side="right") - 1]
    b_last = document_of[np.searchsorted(starts, spans["b_end"] - 1, side="right") - 1]
    assert np.all(a_documents[random_next] != b_documents[random_next])
    assert np.all(b_documents == b_last)  # B never runs over into the next document
    np.testing.assert_array_equal(a_documents, spans["document"])


def test_nsp_loses_no_sentence(pool):
    """Every sentence of every document is used in some A or in some true B: the sentences
    left over when B comes from another document start the next chunk."""
    tokens, _ = pool
    starts, document_of = sentence_index(tokens)
    spans = cut(pool, "nsp", [5, 6])
    used = np.zeros(len(starts) - 1, bool)
    for start, end in zip(spans["a_start"], spans["a_end"], strict=True):
        used[np.searchsorted(starts, start) : np.searchsorted(starts, end)] = True
    true_next = spans["label"] == 1
    for start, end in zip(spans["b_start"][true_next], spans["b_end"][true_next], strict=True):
        used[np.searchsorted(starts, start) : np.searchsorted(starts, end)] = True
    current = document_of >= tokens.nrows().numpy() - 32
    assert used[current].all()


def test_nsp_labels_are_balanced_on_real_text(pool):
    labels = np.concatenate([cut(pool, "nsp", [seed, 0])["label"] for seed in range(10)])
    # One-sentence chunks always take a random B, so label 1 is a little under one half.
    assert 0.40 < labels.mean() < 0.55


def test_sop_label_zero_is_exactly_the_swapped_true_pair(pool):
    spans = cut(pool, "sop", [7, 8])
    swapped = spans["label"] == 0
    kept = spans["label"] == 1
    assert 0.4 < swapped.mean() < 0.6
    np.testing.assert_array_equal(spans["a_end"][kept], spans["b_start"][kept])
    np.testing.assert_array_equal(spans["b_end"][swapped], spans["a_start"][swapped])
    assert np.all(spans["a_start"] < spans["a_end"]) and np.all(spans["b_start"] < spans["b_end"])


def test_truncation_removes_from_the_longer_side_to_fit(pool):
    full = cut(pool, "nsp", [9, 9])
    truncated = cut(pool, "nsp", [9, 9], truncate=True)
    a_full, b_full = full["a_end"] - full["a_start"], full["b_end"] - full["b_start"]
    a, b = truncated["a_end"] - truncated["a_start"], truncated["b_end"] - truncated["b_start"]
    assert np.all(a + b == np.minimum(a_full + b_full, MAX_TOKENS))
    # Truncated spans lie inside the original ones.
    assert np.all(truncated["a_start"] >= full["a_start"])
    assert np.all(truncated["a_end"] <= full["a_end"])
    assert np.all(truncated["b_start"] >= full["b_start"])
    assert np.all(truncated["b_end"] <= full["b_end"])
    # The longer side shrinks first, down to the length of the shorter one.
    cut_a, cut_b = a < a_full, b < b_full
    assert np.all(a[cut_a] >= np.minimum(b_full[cut_a], MAX_TOKENS // 2))
    assert np.all(b[cut_b] >= np.minimum(a_full[cut_b], (MAX_TOKENS - 1) // 2))
    # Tokens come off the front about as often as off the back.
    front = (truncated["a_start"] - full["a_start"]).sum() + (
        truncated["b_start"] - full["b_start"]
    ).sum()
    removed = (a_full + b_full - a - b).sum()
    assert removed > 200
    assert abs(front / removed - 0.5) < 5 * 0.5 / np.sqrt(removed)


def test_single_segments_cover_each_document_in_order(pool):
    tokens, _ = pool
    spans = cut(pool, "single", [1, 1])
    assert np.all(spans["b_start"] == spans["b_end"])
    for document in np.unique(spans["document"]):
        mine = spans["document"] == document
        np.testing.assert_array_equal(spans["a_start"][mine][1:], spans["a_end"][mine][:-1])
        row = tokens.row_splits.numpy()
        sentence_starts = tokens.values.row_splits.numpy()
        assert spans["a_start"][mine][0] == sentence_starts[row[document]]
        assert spans["a_end"][mine][-1] == sentence_starts[row[document + 1]]


def test_short_target_lengths_are_drawn_with_short_seq_prob(pool):
    tokens, ids = pool

    def mean_chunk_length(short_seq_prob):
        lengths = []
        for seed in range(5):
            spans = pair_spans(
                tokens,
                ids,
                32,
                tf.constant([seed, 1]),
                "single",
                500,
                short_seq_prob=short_seq_prob,
                truncate=False,
            )
            lengths.append((spans["a_end"] - spans["a_start"]).numpy())
        return np.concatenate(lengths).mean()

    # Targets uniform in [2, 500] average about half of the full target of 500.
    assert mean_chunk_length(1.0) < 0.7 * mean_chunk_length(0.0)


def test_same_seed_same_pairs_and_another_seed_other_pairs(pool):
    first, again, other = (
        cut(pool, "nsp", [4, 2]),
        cut(pool, "nsp", [4, 2]),
        cut(pool, "nsp", [2, 4]),
    )
    for key in first:
        np.testing.assert_array_equal(first[key], again[key])
    assert not all(
        len(first[key]) == len(other[key]) and np.array_equal(first[key], other[key])
        for key in first
    )


def bert_example_lengths(documents, max_num_tokens, short_seq_prob, rng):
    """Lengths (special tokens included) of the NSP examples of BERT's
    `create_instances_from_document`, run once on every document: its length logic, written
    here from the algorithm's description.

    Args:
        documents: per document, the number of tokens of each of its sentences.
    """
    lengths = []
    for index, document in enumerate(documents):
        # One target length for the whole document.
        target = max_num_tokens
        if rng.random() < short_seq_prob:
            target = rng.integers(2, max_num_tokens + 1)
        chunk, chunk_tokens, i = [], 0, 0
        while i < len(document):
            chunk.append(document[i])
            chunk_tokens += document[i]
            if i == len(document) - 1 or chunk_tokens >= target:
                a_sentences = rng.integers(1, len(chunk)) if len(chunk) >= 2 else 1
                a = sum(chunk[:a_sentences])
                if len(chunk) == 1 or rng.random() < 0.5:
                    # B from a random other document, from a random sentence on, until it
                    # reaches what is left of the target; the chunk's unused sentences go back.
                    other = rng.integers(len(documents) - 1)
                    other += other >= index
                    start = rng.integers(len(documents[other]))
                    b = 0
                    for sentence in documents[other][start:]:
                        b += sentence
                        if b >= target - a:
                            break
                    i -= len(chunk) - a_sentences
                else:
                    b = sum(chunk[a_sentences:])
                lengths.append(min(a + b, max_num_tokens) + 3)
                chunk, chunk_tokens = [], 0
            i += 1
    return np.array(lengths)


def test_example_lengths_follow_berts_per_document_target_length(comedies, bert_tokenizer):
    """BERT draws the shorter target length once per document, so a document drawn short
    gives only short examples. Both algorithms cut every comedy scene, many times over; a
    document's draw moves the lengths of all its examples, so the sampling error is measured
    over whole repetitions (the spread of their shares), not over examples."""
    seq_len = 128
    tokens = bert_tokenizer.tokenize(tf.ragged.constant(list(comedies.iter_documents())))
    tokens = tf.ragged.boolean_mask(tokens, tokens.row_lengths(axis=2) > 0)
    num_documents = int(tokens.nrows())
    ids = tf.range(num_documents, dtype=tf.int64)

    @tf.function
    def lmpipe_lengths(seed):
        spans = pair_spans(tokens, ids, num_documents, seed, "nsp", seq_len - 3, 0.1)
        return spans["a_end"] - spans["a_start"] + spans["b_end"] - spans["b_start"] + 3

    documents = tokens.row_lengths(axis=2).to_list()
    rng = np.random.default_rng(0)
    edges = [0, 16, 32, 48, 64, 80, 96, 112, seq_len, seq_len + 1]

    def shares(lengths):
        """Share of examples under half of seq_len, then the histogram's shares."""
        histogram = np.histogram(lengths, edges)[0] / len(lengths)
        return np.r_[(lengths < seq_len // 2).mean(), histogram]

    ours = np.array([shares(lmpipe_lengths(tf.constant([k, 1])).numpy()) for k in range(100)])
    bert = np.array(
        [shares(bert_example_lengths(documents, seq_len - 3, 0.1, rng)) for _ in range(300)]
    )
    difference = ours.mean(axis=0) - bert.mean(axis=0)
    standard_error = np.sqrt(ours.var(axis=0) / len(ours) + bert.var(axis=0) / len(bert))
    assert np.all(np.abs(difference) <= 5 * standard_error), (difference, standard_error)
    assert bert[:, 0].mean() > 0.09  # BERT: about a tenth of the examples are short


def test_sop_skips_a_lone_one_token_sentence_and_ends():
    # The second document is one sentence of one token, the first ends with one: neither can
    # be cut into two segments (the loop used to wait for them forever).
    pool = tf.RaggedTensor.from_nested_row_lengths(
        tf.range(10, 17), [[3, 1], [3, 2, 1, 1]]
    )  # [[[10, 11, 12], [13, 14], [15]], [[16]]]
    ids = tf.constant([1, 2], tf.int64)
    spans = pair_spans(pool, ids, 2, tf.constant([1, 2]), "sop", 5, short_seq_prob=0.0)
    spans = {name: value.numpy() for name, value in spans.items()}
    assert spans["document"].tolist() == [0]
    pair = sorted(
        [(spans["a_start"][0], spans["a_end"][0]), (spans["b_start"][0], spans["b_end"][0])]
    )
    assert pair == [(0, 3), (3, 5)]  # [10, 11, 12] and [13, 14]; [15] and [16] are left out


def test_nsp_takes_b_from_another_text_else_another_copy_else_makes_true_pairs(pool):
    tokens, _ = pool
    starts, document_of = sentence_index(tokens)
    count = int(tokens.nrows())

    def b_documents(ids, seed):
        spans = cut((tokens, tf.constant(ids, tf.int64)), "nsp", seed, num_current=count)
        random_next = spans["label"] == 0
        b = document_of[np.searchsorted(starts, spans["b_start"], side="right") - 1]
        return spans["document"][random_next], b[random_next]

    # Documents 0 and 1 have the same text: each takes B from the others only.
    ids = [0, 0] + list(range(2, count))
    own, other = b_documents(ids, [1, 5])
    assert len(own) > 50 and not np.isin(other[own < 2], [0, 1]).any()
    # Every document the same text (the pool that used to stop training): B from another copy.
    own, other = b_documents([7] * count, [2, 5])
    assert len(own) > 50 and np.all(own != other)
    # A pool of one document (an epoch's last window may be one): no other document to take
    # a random B from, so only true pairs, B right after A (BERT would label B from the
    # document itself 0).
    single = tokens[:1]
    spans = pair_spans(
        single,
        tf.constant([3], tf.int64),
        1,
        tf.constant([3, 5]),
        "nsp",
        MAX_TOKENS,
        truncate=False,
    )
    labels = spans["label"].numpy()
    assert len(labels) > 5 and (labels == 1).all()
    np.testing.assert_array_equal(spans["b_start"].numpy(), spans["a_end"].numpy())
    assert (spans["b_end"].numpy() > spans["b_start"].numpy()).all()
