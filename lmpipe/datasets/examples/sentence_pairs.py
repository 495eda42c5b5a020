"""Sentence pairs for NSP (BERT) and SOP (ALBERT), and single segments, built in the graph.

The algorithm is BERT's `create_instances_from_document`, run for a whole group of documents
(a window of the seekable stream) at once: every iteration of one `tf.while_loop` cuts the
next chunk of *every* document of the group, so the loop runs as many times as the longest
document has chunks, and all the work inside is vectorized over the group.

A target length is drawn once per document, as BERT does: `max_num_tokens`, or with
probability `short_seq_prob` a uniform length in [2, max_num_tokens]; every chunk of the
document aims at it. For each chunk:
- sentences are taken from the current position until the chunk reaches the target length
  (or the document ends);
- segment A is the first k sentences of the chunk, k uniform in [1, n - 1] (n >= 2);
- NSP: with probability 0.5 (always, for a one-sentence chunk) B is a span of another
  document starting at a random sentence, grown to the remaining target length, with label 0;
  the chunk's sentences after A are "put back" and start the next chunk, so no sentence is
  lost. Otherwise B is the rest of the chunk, label 1.
- SOP: B is always the rest of the chunk (a one-sentence chunk is cut at a random token);
  with probability 0.5 A and B are swapped, label 0; label 1 keeps the original order. A
  chunk of one sentence of one token (only possible at the end of a document) cannot be
  cut into two segments and gives no example.
- single: the chunk is one segment.
The pair is then truncated to `max_num_tokens` by removing tokens from the longer side
(ties: from B), each removal from the front or the back with probability 1/2, as BERT's
`truncate_seq_pair` does. The number of removals and their sides follow in closed form.

Other documents for NSP come from the documents given with the group (the "pool"; BERT's
pipeline gives the window itself): a document with another text (another id) where the pool
has one. When every document of the
pool has the same text, B comes from another document of the pool all the same (the same
text, still label 0). A pool of one document (an epoch's last window may hold one) has no
other: its chunks are all real next pairs (label 1), and a one-sentence chunk, which has no
next part, makes no example. (BERT takes B from the document itself then, labelled 0, when its
ten draws of another document all fail: a wrong label, which its corpus-wide pool makes rare.)
"""

import tensorflow as tf

OBJECTIVES = ("nsp", "sop", "single")


def _uniform_int(seed, shape, low, high):
    """Stateless integers uniform in [low, high] (inclusive), elementwise; needs high >= low."""
    unit = tf.random.stateless_uniform(shape, seed, dtype=tf.float32)
    span = tf.cast(high - low + 1, tf.float32)
    offset = tf.minimum(tf.cast(tf.floor(unit * span), tf.int32), high - low)
    return low + offset


def _fold(seed, value):
    return tf.random.experimental.stateless_fold_in(seed, value)


def _chunk_end(cumulative, start, target, document_end):
    """First sentence index `k` with cumulative[k] - cumulative[start] >= target, in
    [start + 1, document_end]: the end (exclusive) of a chunk starting at `start`."""
    wanted = tf.gather(cumulative, start) + target
    k = tf.searchsorted(cumulative, wanted, side="left")
    return tf.clip_by_value(tf.cast(k, tf.int32), start + 1, document_end)


def pair_spans(
    pool,
    pool_ids,
    num_current,
    seed,
    objective,
    max_num_tokens,
    short_seq_prob=0.1,
    truncate=True,
):
    """Cut the last `num_current` documents of `pool` into examples, as token spans.

    Args:
        pool: int32 RaggedTensor `[D, (sentences), (tokens)]` of tokenized documents; the last
            `num_current` are the documents to cut, all of them are candidates for NSP's random
            second segment. Every sentence must have at least one token.
        pool_ids: int64 `[D]` identifiers of the documents (NSP pairs a document with a
            document of another id, unless the pool has none: see the module docstring).
        num_current: number of documents to cut (the last ones of the pool).
        seed: shape-[2] int seed of the stateless random ops.
        objective: "nsp", "sop" or "single".
        max_num_tokens: the budget of A + B (sequence length minus the special tokens).
        short_seq_prob: probability that a document gets a shorter target length.
        truncate: truncate the pairs to `max_num_tokens` (turned off only to inspect the
            untruncated sentence spans).

    Returns:
        A dict of `[N]` tensors: `a_start`, `a_end`, `b_start`, `b_end` (token offsets into
        `pool.flat_values`; B is empty for "single"), `label` (int32), and `document`
        (index into the pool of the document the chunk came from).
    """
    if objective not in OBJECTIVES:
        raise ValueError(f"`objective` must be one of {OBJECTIVES}, got {objective!r}.")
    seed = tf.convert_to_tensor(seed)
    sentence_splits = tf.cast(pool.row_splits, tf.int32)  # [D + 1], document -> sentences
    cumulative = tf.cast(pool.values.row_splits, tf.int32)  # [num_sentences + 1], tokens
    num_pool = tf.shape(sentence_splits)[0] - 1
    first = num_pool - num_current
    current = tf.range(first, num_pool)  # pool indices of the documents to cut, [G]
    document_end = tf.gather(sentence_splits, current + 1)
    position = tf.gather(sentence_splits, current)
    shape = tf.shape(current)
    # Every step consumes at least one sentence of every unfinished document.
    max_steps = tf.maximum(tf.reduce_max(document_end - position), 1)
    # One target length per document, for all its chunks (BERT's create_instances_from_document).
    short = tf.random.stateless_uniform(shape, _fold(seed, -3)) < short_seq_prob
    short_target = _uniform_int(_fold(seed, -4), shape, 2, max(max_num_tokens, 2))
    target = tf.where(short, short_target, max_num_tokens)  # [G]
    if objective == "nsp":
        # Another document for every chunk: uniform over the pool's documents whose id differs
        # from the current one; failing that, over the pool's other documents (with none, the
        # draw is not used: see `has_other`). Drawn up front, one column per loop step (a
        # document has at most one chunk per sentence).
        other_text = tf.not_equal(tf.gather(pool_ids, current)[:, None], pool_ids[None, :])
        other_index = tf.not_equal(current[:, None], tf.range(num_pool)[None, :])  # [G, D]

        def where_any(preferred, fallback):
            return tf.where(tf.reduce_any(preferred, axis=1, keepdims=True), preferred, fallback)

        has_other = tf.reduce_any(other_index, axis=1)  # [G]
        allowed = where_any(other_text, where_any(other_index, tf.ones_like(other_index)))
        logits = tf.where(allowed, 0.0, float("-inf"))  # [G, D]
        other_document = tf.cast(
            tf.random.stateless_categorical(logits, max_steps, _fold(seed, -2)), tf.int32
        )  # [G, max_steps]

    def body(step, position, outputs):
        step_seed = _fold(seed, step)
        draw = [_fold(step_seed, i) for i in range(8)]
        unfinished = position < document_end
        active = unfinished
        start = tf.minimum(position, document_end - 1)  # keep finished documents in range

        end = _chunk_end(cumulative, start, target, document_end)
        num_sentences = end - start
        a_sentences = tf.where(
            num_sentences >= 2,
            _uniform_int(draw[2], shape, 1, tf.maximum(num_sentences - 1, 1)),
            1,
        )
        a_end_sentence = start + a_sentences
        a_start = tf.gather(cumulative, start)
        a_end = tf.gather(cumulative, a_end_sentence)
        b_start = a_end
        b_end = tf.gather(cumulative, end)
        label = tf.ones(shape, tf.int32)
        next_position = end

        if objective == "nsp":
            random_next = tf.logical_or(
                num_sentences == 1, tf.random.stateless_uniform(shape, draw[3]) < 0.5
            )
            # Without another document, no random next: a one-sentence chunk makes nothing.
            random_next = tf.logical_and(random_next, has_other)
            active = tf.logical_and(active, tf.logical_or(random_next, num_sentences >= 2))
            other = tf.gather(other_document, tf.minimum(step, max_steps - 1), axis=1)
            other_first = tf.gather(sentence_splits, other)
            other_end = tf.gather(sentence_splits, other + 1)
            other_start = _uniform_int(draw[5], shape, other_first, other_end - 1)
            b_target = target - (a_end - a_start)
            other_stop = _chunk_end(cumulative, other_start, b_target, other_end)
            b_start = tf.where(random_next, tf.gather(cumulative, other_start), b_start)
            b_end = tf.where(random_next, tf.gather(cumulative, other_stop), b_end)
            label = tf.where(random_next, 0, label)
            # The chunk's sentences after A were not used: they start the next chunk.
            next_position = tf.where(random_next, a_end_sentence, end)
        elif objective == "sop":
            # A one-sentence chunk is split at a random token so that B still continues A.
            length = b_end - a_start
            cut = _uniform_int(draw[6], shape, 1, tf.maximum(length - 1, 1))
            single = num_sentences == 1
            a_end = tf.where(single, a_start + cut, a_end)
            b_start = tf.where(single, a_end, b_start)
            # A lone one-token sentence at the end of a document cannot form a pair.
            active = tf.logical_and(active, length >= 2)
            swap = tf.random.stateless_uniform(shape, draw[7]) < 0.5
            a_start, a_end, b_start, b_end = (
                tf.where(swap, b_start, a_start),
                tf.where(swap, b_end, a_end),
                tf.where(swap, a_start, b_start),
                tf.where(swap, a_end, b_end),
            )
            label = tf.where(swap, 0, label)
        else:
            a_end = b_end
            b_start = b_end

        values = (a_start, a_end, b_start, b_end, label, active)
        outputs = tuple(
            array.write(step, value) for array, value in zip(outputs, values, strict=True)
        )
        position = tf.where(unfinished, next_position, position)
        return step + 1, position, outputs

    outputs = tuple(
        tf.TensorArray(dtype, size=0, dynamic_size=True) for dtype in (tf.int32,) * 5 + (tf.bool,)
    )
    _, _, outputs = tf.while_loop(
        lambda step, position, outputs: tf.reduce_any(position < document_end),
        body,
        (tf.constant(0), position, outputs),
        maximum_iterations=max_steps,  # never reached; a bound, so that it can never hang
    )
    # [steps, G] -> [G, steps], so that the chunks of a document stay in order.
    stacked = [tf.reshape(tf.transpose(array.stack()), [-1]) for array in outputs]
    *values, active = stacked
    names = ("a_start", "a_end", "b_start", "b_end", "label")
    # One gather per output: a boolean_mask each would add 20 ops to the graph.
    kept = tf.reshape(tf.where(active), [-1])
    spans = {name: tf.gather(value, kept) for name, value in zip(names, values, strict=True)}
    documents = tf.repeat(current, tf.shape(outputs[0].stack())[0])
    spans["document"] = tf.gather(tf.reshape(documents, [-1]), kept)
    if not truncate:
        return spans
    return _truncate(spans, max_num_tokens, _fold(seed, -1))


def _truncate(spans, max_num_tokens, seed):
    """Shrink A and B to `max_num_tokens` in total, as BERT's truncate_seq_pair does."""
    a_length = spans["a_end"] - spans["a_start"]
    b_length = spans["b_end"] - spans["b_start"]
    excess = tf.maximum(a_length + b_length - max_num_tokens, 0)
    # Removals go to the longer side until both are equal; from there they alternate,
    # starting with B (BERT truncates B on ties).
    gap = tf.abs(a_length - b_length)
    beyond = tf.maximum(excess - gap, 0)
    a_longer = a_length > b_length
    a_removed = tf.where(a_longer, tf.minimum(excess, gap), 0) + beyond // 2
    b_removed = excess - a_removed
    a_front = _front_removals(a_removed, _fold(seed, 0))
    b_front = _front_removals(b_removed, _fold(seed, 1))
    truncated = dict(spans)
    truncated["a_start"] = spans["a_start"] + a_front
    truncated["a_end"] = spans["a_end"] - (a_removed - a_front)
    truncated["b_start"] = spans["b_start"] + b_front
    truncated["b_end"] = spans["b_end"] - (b_removed - b_front)
    return truncated


def _front_removals(removed, seed):
    """How many of `removed` tokens come off the front, each with probability 1/2."""
    counts = tf.cast(removed, tf.float32)
    front = tf.random.stateless_binomial(
        tf.shape(removed), seed, counts, 0.5, output_dtype=tf.int32
    )
    return front


def gather_spans(flat_tokens, starts, ends):
    """The tokens `flat_tokens[start:end]` of every span, as a RaggedTensor `[N, (tokens)]`."""
    indices = tf.ragged.range(starts, ends)
    return tf.gather(flat_tokens, indices)
