"""XLNet's permutation language-model targets, vectorized over a batch in graph code.

For a `[B, S]` batch of packed examples, `PermutationLM` chooses the tokens to predict and a
factorization order per example, and returns what an XLNet model needs: the query-stream
attention mask `perm_mask [B, S, S]` and the prediction lists `target_mapping [B, P, S]`,
`target_ids [B, P]`, `target_mask [B, P]`, plus `masked_tokens [B, S]`. The call is two
halves: `draw`, every random choice, compact (the targets and one random number per
position), and `expand`, a deterministic function of those that builds the `[B, S, S]` mask
and the prediction lists; so a caller can draw for many examples at once (the seekable
stream's window) and expand per batch, after laying rows out (XLNet's backward rows).

Targets (partial prediction, XLNet section 2.3): spans of 1..`max_span` words, the length `n`
drawn with `p(n) ~ 1/n`, laid out along the example's words as a renewal process: each span
is followed by a gap of at least one word, uniform with mean `(mask_alpha - 1) n` words, so
on average one word in `mask_alpha` (K in the paper) is a target. The layout starts well
before the first word (a burn-in of several mean cycles) so that every word is a target with
the same probability 1/K, and it counts only the words that may be predicted: special tokens
and padding are skipped, never predicted, and a span may continue on the other side of a
`[SEP]`. When a row has more than `max_predictions` target pieces, they are counted from a
random position, wrapping around at the end, and the first `max_predictions` are kept, so
no part of the row loses targets more often than another (XLNet's `_sample_mask` instead
stops laying out spans at the budget, which favours the start of the sequence).

Order: a random permutation inside each block of `perm_size` consecutive positions, blocks in
their natural order (XLNet's `_local_perm`; XLNet applies one permutation to all blocks,
here each block gets its own). Non-targets come first and form the context that every
position sees; the targets follow in the permuted order. With `reuse_len = R` the first `R`
positions (the part the next segment keeps as memory) come before all the others, and the
order is sampled inside each part, as XLNet's `_convert_example` does.
"""

import numpy as np
import tensorflow as tf

from lmpipe.arguments import check_number, check_positive_int
from lmpipe.contract import MASKED_TOKENS, PERM_MASK, TARGET_IDS, TARGET_MAPPING, TARGET_MASK

_SPAN_LENGTHS, _GAPS, _BUDGET, _ORDER = 0, 1, 2, 3  # the random streams
ORDER_DRAWS = "order_draws"  # `PermutationLM.draw`'s random numbers of the order
# Mean cycles (span plus gap) laid out before the first word, so that the first words are
# targets as often as the others.
_BURN_IN_CYCLES = 8
MAX_SEQ_LEN = 2**14


def _uniform(shape, seed, stream):
    """Stateless float32 numbers in [0, 1) of one of the random streams; Philox named
    explicitly so that every device draws the same numbers."""
    stream_seed = tf.random.experimental.stateless_fold_in(seed, stream)
    return tf.random.stateless_uniform(shape, stream_seed, alg="philox")


def _uniform_ints(shape, seed, stream, maxval, dtype=tf.int32):
    """Stateless integers in [0, maxval) of one of the random streams."""
    stream_seed = tf.random.experimental.stateless_fold_in(seed, stream)
    draw = tf.random.stateless_uniform(
        shape, stream_seed, minval=0, maxval=maxval, dtype=tf.int32, alg="philox"
    )
    return tf.cast(draw, dtype)


@tf.function(jit_compile=True)
def _query_stream_mask(draw, is_target, real, bits, block_size, reuse_len):
    """`perm_mask` float32 `[B, S, S]` from the order's random numbers `draw` (int64 `[B, S]`,
    31 bits), as `PermutationLM._order` describes. An XLA function: the keys, the
    comparison and the cast over `[B, S, S]` are one loop there, where TensorFlow makes a tensor
    per op (on 64 x 128 batches, about half the time). Integer work only: the same bytes."""
    position = tf.range(tf.shape(draw)[1], dtype=tf.int64)[None, :]  # [1, S]
    block = position // block_size
    target = tf.cast(is_target, tf.int64)
    order = block * 2 ** (31 + bits) + draw * 2**bits + position
    key = target * (2 ** (31 + 2 * bits) + order)  # [B, S]
    if reuse_len:
        key += tf.cast(position >= reuse_len, tf.int64) * 2 ** (32 + 2 * bits)
    # i sees j when j comes strictly before i (targets) or not after i (non-targets);
    # padding columns get a key nothing reaches. One comparison per entry.
    column_key = tf.where(real, key, tf.int64.max)
    return tf.cast(column_key[:, None, :] <= (key - target)[:, :, None], tf.float32)


class PermutationLM:
    """Choose XLNet's prediction targets and factorization order for a batch of examples.

    A plain Python object, configured once and called on dense batches inside `tf.data.map`
    or a `tf.function`. All randomness comes from stateless Philox ops keyed by the `seed`
    argument: the same inputs and seed give the same outputs in any process.

    The token ids are not changed. XLNet keeps the content stream's input intact (every
    position reads its own token there) and feeds the query stream a learned mask embedding
    at the target positions (`masked_tokens`), so no `[MASK]` id is written into the input.

    Masks use lmpipe's polarity, 1 = may attend. `perm_mask[b, i, j] = 1` when position `i`
    may attend to position `j` in the query stream:
    - a target `i` sees the non-targets and the targets before it in the order, never itself;
    - a non-target (special tokens and padding rows included) sees all non-targets, itself
      included, and no target;
    - with `reuse_len = R`: rows `< R` never see columns `>= R`, rows `>= R` see every real
      column `< R` (targets there included);
    - padding columns are 0.
    The content stream's mask is `perm_mask` with the diagonal set to 1 at real tokens; the
    model derives it.

    Args:
        seq_len: `S`, the length of the examples (at most 16384).
        max_predictions: `P`, the length of the prediction lists; at most `P` targets per row.
        special_ids: ids that are never targets (`[SEP]`, `[CLS]`, `[PAD]`, ...).
        continuation_mask: optional bool `[vocabulary_size]`, True for pieces that continue a
            word ("##ing"), so that spans count whole words; None counts tokens.
        mask_alpha: `K`, one word in `K` is a target on average (a number >= 2; XLNet: 6).
        max_span: longest span in words (XLNet: 5).
        perm_size: length of the blocks permuted independently; must divide `seq_len` (and
            `reuse_len`). None permutes the whole sequence (each part, with `reuse_len`).
        reuse_len: `R`, the number of leading positions ordered before the rest (the memory
            of the next segment), or None.

    Call arguments:
        token_ids: int `[B, S]` packed token ids.
        padding_mask: int or bool `[B, S]`, 1 on real tokens.
        seed: int `[2]` seed; fold in the batch index (and epoch and worker).
        backward: optional bool `[B]`, True for rows whose text reads backward (XLNet's
            bi-directional data); there a word's continuation pieces come before its first
            piece. Only used with a `continuation_mask`.

    Returns:
        A dict: `perm_mask` float32 `[B, S, S]`; `target_mapping` float32 `[B, P, S]`, row
        `m` one-hot at the `m`-th target position (ascending), zero rows after the last
        target; `target_ids` int32 `[B, P]`, the token at each mapped position (0 on
        padding slots); `target_mask` float32 `[B, P]`, 1 for real targets; `masked_tokens`
        int32 `[B, S]`, 1 at target positions (where the query stream predicts).

    Example:

    >>> plm = PermutationLM(seq_len=8, max_predictions=3, special_ids=[0, 1, 2],
    ...                     mask_alpha=2, max_span=1)
    >>> token_ids = tf.constant([[10, 11, 12, 13, 2, 1, 0, 0]])
    >>> padding_mask = tf.constant([[1, 1, 1, 1, 1, 1, 0, 0]])
    >>> out = plm(token_ids, padding_mask, seed=tf.constant([3, 0]))
    >>> out["perm_mask"].shape, out["target_mapping"].shape
    (TensorShape([1, 8, 8]), TensorShape([1, 3, 8]))
    >>> int(tf.reduce_sum(out["masked_tokens"]))  # K = 2, spans of one word: 2 of 4 words
    2

    Reference: Yang et al., "XLNet: Generalized Autoregressive Pretraining for Language
    Understanding", 2019, sections 2.2-2.3 and `data_utils.py` (`_sample_mask`,
    `_local_perm`).
    """

    def __init__(
        self,
        seq_len,
        max_predictions,
        special_ids,
        *,
        continuation_mask=None,
        mask_alpha=6,
        max_span=5,
        perm_size=None,
        reuse_len=None,
    ):
        check_positive_int("seq_len", seq_len)
        if seq_len > MAX_SEQ_LEN:
            raise ValueError(
                f"`seq_len` must be at most {MAX_SEQ_LEN} (the order keys are 64-bit), got "
                f"seq_len={seq_len!r}."
            )
        check_positive_int("max_predictions", max_predictions)
        if max_predictions > seq_len:
            raise ValueError(
                f"`max_predictions` must be at most seq_len={seq_len} (one target per "
                f"position), got max_predictions={max_predictions!r}."
            )
        check_number("mask_alpha", mask_alpha, minimum=2)  # one word in mask_alpha predicted
        # Inline to keep the wording "an integer >= 1", which the tests match
        # (check_positive_int says "a positive integer").
        if (
            isinstance(max_span, bool)
            or not isinstance(max_span, (int, np.integer))
            or max_span < 1
        ):
            raise ValueError(f"`max_span` must be an integer >= 1, got max_span={max_span!r}.")
        if reuse_len is not None:
            check_number("reuse_len", reuse_len, minimum=0, integer=True)
            if reuse_len >= seq_len:
                raise ValueError(
                    f"`reuse_len` must be smaller than seq_len={seq_len}, got "
                    f"reuse_len={reuse_len!r}."
                )
        if perm_size is not None:
            check_positive_int("perm_size", perm_size)
            if seq_len % perm_size:
                raise ValueError(
                    f"`perm_size` must divide seq_len={seq_len} (the order is permuted in "
                    f"blocks of perm_size), got perm_size={perm_size!r}."
                )
            if reuse_len and reuse_len % perm_size:
                raise ValueError(
                    f"`perm_size` must divide reuse_len={reuse_len} (blocks never straddle "
                    f"the memory boundary), got perm_size={perm_size!r}."
                )
        try:
            specials = np.asarray(special_ids)
        except ValueError:  # ragged nesting
            specials = np.asarray(None)
        if specials.ndim != 1 or not np.issubdtype(specials.dtype, np.integer):
            raise ValueError(
                f"`special_ids` must be a list of integer token ids, got {special_ids!r}."
            )
        if continuation_mask is not None:
            continuation_mask = np.asarray(continuation_mask)
            if continuation_mask.ndim != 1 or continuation_mask.dtype != bool:
                raise ValueError(
                    "`continuation_mask` must be a bool vector over the vocabulary, got dtype "
                    f"{continuation_mask.dtype} and shape {continuation_mask.shape}."
                )

        self.seq_len = seq_len
        self.max_predictions = max_predictions
        self.special_ids = sorted({int(i) for i in specials})
        # triangle[i, j] = 1 for i <= j: a row times it is the row's running sum.
        if seq_len <= 1024:
            self._triangle = np.triu(np.ones((seq_len, seq_len), np.float32))
        self._special_runs = []  # maximal runs [first, last] of consecutive special ids
        for i in self.special_ids:
            if self._special_runs and self._special_runs[-1][1] == i - 1:
                self._special_runs[-1][1] = i
            else:
                self._special_runs.append([i, i])
        self.continuation_mask = continuation_mask
        self.mask_alpha = float(mask_alpha)
        self.max_span = max_span
        self.perm_size = perm_size
        self.reuse_len = reuse_len

        # Span length n in 1..max_span with p(n) ~ 1/n: 1 + the number of these thresholds
        # (P(length <= n)) that a uniform draw reaches.
        weights = 1.0 / np.arange(1, max_span + 1)
        self._length_thresholds = (np.cumsum(weights)[:-1] / weights.sum()).tolist()
        mean_cycle = self.mask_alpha * max_span / weights.sum()  # E[n + gap] = K E[n]
        self._burn_in = int(np.ceil(_BURN_IN_CYCLES * mean_cycle))
        # Every cycle covers at least 2 words (n >= 1, gap >= 1): enough slots for all words.
        self._num_slots = (seq_len + self._burn_in) // 2 + 2
        self._position_bits = max(int(seq_len - 1).bit_length(), 1)

    def __call__(self, token_ids, padding_mask, seed, backward=None):
        drawn = self.draw(token_ids, padding_mask, seed, backward)
        return self.expand(token_ids, padding_mask, drawn)

    def draw(self, token_ids, padding_mask, seed, backward=None):
        """Only the random part of a call: `{"masked_tokens": int32 [B, S], "order_draws":
        int32 [B, S]}`, the targets and the order's random numbers (31 bits, one per position).

        `expand` turns them into the call's outputs, also after the rows have been rearranged
        (a row's positions permuted: `tf.gather` both with the same indices, as reading an
        example backward does). `expand(token_ids, padding_mask, draw(...))` is the call.
        Arguments as the call's.
        """
        token_ids, real, seed, backward = self._check_call(token_ids, padding_mask, seed, backward)
        maskable = real & tf.logical_not(self._is_special(token_ids))  # [B, S]
        is_target = self._select_targets(token_ids, maskable, seed, backward)  # [B, S] bool
        return {
            MASKED_TOKENS: tf.cast(is_target, tf.int32),
            ORDER_DRAWS: self._order(is_target, seed),
        }

    def expand(self, token_ids, padding_mask, drawn):
        """The call's outputs from `draw`'s (a dense, deterministic function of them)."""
        token_ids = tf.ensure_shape(tf.cast(token_ids, tf.int32), [None, self.seq_len])
        real = tf.cast(padding_mask, tf.bool)
        is_target = tf.cast(drawn[MASKED_TOKENS], tf.bool)
        perm_mask = _query_stream_mask(
            tf.cast(drawn[ORDER_DRAWS], tf.int64),
            is_target,
            real,
            self._position_bits,
            self.perm_size or self.seq_len,
            self.reuse_len,
        )
        return {PERM_MASK: perm_mask, **self._prediction_lists(token_ids, is_target)}

    # Targets ----------------------------------------------------------------------------------

    def _select_targets(self, token_ids, maskable, seed, backward):
        """Spans of words laid out along each row, cut to the budget: [B, S] bool."""
        batch_size = tf.shape(token_ids)[0]
        word_start = self._word_starts(token_ids, maskable, backward)
        word = self._running_count(word_start) - 1  # [B, S] word of each piece

        # The renewal process: slot k is a span of n_k words starting at word start_k, then a
        # gap of g_k >= 1 words, uniform in [1, 2 (K - 1) n_k - 1] (mean (K - 1) n_k).
        slots = tf.stack([batch_size, self._num_slots])
        draw = _uniform(slots, seed, _SPAN_LENGTHS)
        length = tf.ones_like(draw)
        for threshold in self._length_thresholds:
            length += tf.cast(draw >= threshold, tf.float32)  # [B, L]
        gap = 1.0 + _uniform(slots, seed, _GAPS) * (2.0 * (self.mask_alpha - 1.0) * length - 2.0)
        cycle_start = tf.cumsum(length + gap, axis=1, exclusive=True) - self._burn_in
        # Rounding the start up keeps the gaps at least one word: spans never touch.
        span_start = tf.cast(tf.math.ceil(cycle_start), tf.int32)  # [B, L], ascending
        span_end = span_start + tf.cast(length, tf.int32)
        slot = tf.searchsorted(span_start, word, side="right") - 1  # [B, S] last start <= word
        in_span = maskable & (word < tf.gather(span_end, slot, batch_dims=1))
        return in_span & self._within_budget(in_span, seed)

    def _within_budget(self, in_span, seed):
        """[B, S] bool: the pieces kept when at most `max_predictions` may be targets.

        The target pieces are counted from a random position of the row, wrapping around at
        the end, and the first `max_predictions` of them are kept; so no part of the row
        loses its targets more often than another, and only the span where the count ends
        (and one that wraps around) is shortened.
        """
        batch_size = tf.shape(in_span)[0]
        counts = self._running_count(in_span)  # [B, S] pieces up to here
        total = counts[:, -1:]  # [B, 1]
        start = _uniform_ints([batch_size, 1], seed, _BUDGET, self.seq_len)
        before = tf.gather(tf.pad(counts, [[0, 0], [1, 0]]), start, batch_dims=1)  # [B, 1]
        # 1-based place of each piece when counting from `start`.
        place = tf.where(tf.range(self.seq_len)[None, :] >= start, counts, counts + total)
        return place - before <= self.max_predictions

    def _word_starts(self, token_ids, maskable, backward):
        """[B, S] bool, True at the first piece (in the row's reading order) of each word."""
        after_special = tf.pad(
            tf.logical_not(maskable[:, :-1]), [[0, 0], [1, 0]], constant_values=True
        )
        if self.continuation_mask is None:
            return maskable
        continuation = tf.gather(tf.constant(self.continuation_mask), token_ids)
        starts = tf.logical_not(continuation)
        if backward is not None:
            # Read backward, a word ends at its first piece: a piece starts a word when the
            # piece before it (in the row) is not a continuation piece.
            after_word = tf.pad(
                tf.logical_not(continuation[:, :-1]), [[0, 0], [1, 0]], constant_values=True
            )
            starts = tf.where(backward[:, None], after_word, starts)
        return maskable & (starts | after_special)

    def _is_special(self, token_ids):
        if not self.special_ids:
            return tf.zeros_like(token_ids, tf.bool)
        if len(self._special_runs) <= 3:
            # A few comparisons cost less than a search per token (BERT's specials, 0 and
            # 100-103, are two runs).
            special = None
            for first, last in self._special_runs:
                if first == last:
                    inside = tf.equal(token_ids, first)
                else:
                    inside = (token_ids >= first) & (token_ids <= last)
                special = inside if special is None else special | inside
            return special
        specials = tf.constant(self.special_ids, tf.int32)
        flat = tf.reshape(token_ids, [-1])
        index = tf.minimum(tf.searchsorted(specials, flat), len(self.special_ids) - 1)
        return tf.reshape(tf.equal(tf.gather(specials, index), flat), tf.shape(token_ids))

    def _running_count(self, mask):
        """`tf.cumsum` of a bool `[B, S]` mask along the row, as int32.

        For rows up to 1024 a matmul with a triangle of ones, about half the time of
        TensorFlow's cumsum: exact, as the sums are integers below 2**24 and 0 and 1 are exact
        in every float32 math mode (bfloat16, TF32)."""
        if self.seq_len > 1024:
            return tf.cumsum(tf.cast(mask, tf.int32), axis=1)
        return tf.cast(tf.matmul(tf.cast(mask, tf.float32), self._triangle), tf.int32)

    # Order ------------------------------------------------------------------------------------

    def _order(self, is_target, seed):
        """The factorization order's random numbers, int32 `[B, S]` (31 bits).

        `_query_stream_mask` makes one int64 key per position of them, smaller = earlier in
        the order. From the high bits: the part (memory first), target or not (all
        non-targets of a part are equal: they form the context), then for targets the block,
        the random number and the position, which makes the keys distinct and orders each
        block at random (ties of the random numbers, probability ~S^2 / 2^32 per block, fall
        back to position)."""
        return _uniform_ints(tf.shape(is_target), seed, _ORDER, tf.int32.max)

    # Outputs ----------------------------------------------------------------------------------

    def _prediction_lists(self, token_ids, is_target):
        num_slots = self.max_predictions
        target = tf.cast(is_target, tf.int32)
        place = self._running_count(is_target)  # [B, S] targets up to and including here
        # The position of a row's k-th target is the first where `place` reaches k.
        shape = tf.stack([tf.shape(place)[0], num_slots])
        wanted = tf.broadcast_to(tf.range(1, num_slots + 1), shape)
        real = tf.range(num_slots)[None, :] < place[:, -1:]  # [B, P]
        positions = tf.where(real, tf.searchsorted(place, wanted, side="left"), 0)  # [B, P]
        return {
            # one_hot of -1 is a row of zeros.
            TARGET_MAPPING: tf.one_hot(tf.where(real, positions, -1), self.seq_len),
            TARGET_IDS: tf.gather(token_ids, positions, batch_dims=1) * tf.cast(real, tf.int32),
            TARGET_MASK: tf.cast(real, tf.float32),
            MASKED_TOKENS: target,
        }

    def _check_call(self, token_ids, padding_mask, seed, backward):
        token_ids = tf.convert_to_tensor(token_ids)
        if token_ids.shape.rank != 2 or not token_ids.dtype.is_integer:
            raise ValueError(
                "`token_ids` must be a dense integer tensor [batch, seq_len], got dtype "
                f"{token_ids.dtype.name} and shape {token_ids.shape}."
            )
        if token_ids.shape[1] is not None and token_ids.shape[1] != self.seq_len:
            raise ValueError(
                f"`token_ids` must have seq_len={self.seq_len} columns, got shape "
                f"{token_ids.shape}."
            )
        padding_mask = tf.convert_to_tensor(padding_mask)
        if not padding_mask.shape.is_compatible_with(token_ids.shape):
            raise ValueError(
                f"`padding_mask` must have the shape of `token_ids` {token_ids.shape}, got "
                f"{padding_mask.shape}."
            )
        seed = tf.convert_to_tensor(seed)
        if not seed.dtype.is_integer or not seed.shape.is_compatible_with([2]):
            raise ValueError(
                f"`seed` must be an integer tensor of shape [2], got dtype {seed.dtype.name} "
                f"and shape {seed.shape}."
            )
        if backward is not None:
            backward = tf.cast(backward, tf.bool)
        token_ids = tf.ensure_shape(tf.cast(token_ids, tf.int32), [None, self.seq_len])
        return token_ids, tf.cast(padding_mask, tf.bool), tf.cast(seed, tf.int64), backward
