"""Masked-LM masking for BERT and ALBERT pretraining, vectorized over a batch in graph code.

The selection is BERT's `create_masked_lm_predictions` (google-research/bert,
`create_pretraining_data.py`), with ALBERT's n-gram spans as an option, computed for a whole
`[B, S]` batch at once from random keys, sorts and cumulative sums:

1. Candidate units: tokens; or whole words (a piece plus the "##" pieces after it); or, with
   `max_ngram > 1`, spans of 1..max_ngram words (or tokens). Units never cross special tokens.
2. The units are put in a random order and walked as BERT's loop does: a unit is taken when it
   fits the remaining budget of `num_to_predict` pieces, else skipped (n-gram spans are first
   shortened word by word until they fit, as in ALBERT). One round of the walk is a cumulative
   sum over the order; a new round is needed only after a skipped unit, and only with whole
   words (two or three rounds per batch in practice). Tokens need no walk at all: the
   `num_to_predict` largest random keys are the sample.
3. Each selected piece becomes `[MASK]`, a random non-special id, or stays, independently.

The masking runs as one compiled op where lmpipe's kernels build (`lmpipe/kernels/masked_lm.cc`):
steps 1-3 from the same random draws, so the outputs are the same bytes as the TensorFlow ops'
(which remain for XLA, `lmpipe.kernels.ops_only()` and machines without a C++ compiler), in a
fraction of the time.
"""

import numpy as np
import tensorflow as tf

from lmpipe.arguments import check_bool, check_number, check_positive_int
from lmpipe.backend import compiling_with_xla
from lmpipe.contract import MASK_IDS, MASK_POSITIONS, MASK_WEIGHTS, TOKEN_IDS
from lmpipe.kernels import note_path, optional_kernel

_PHILOX = 1  # RNG_ALG_PHILOX, tensorflow/core/framework/rng_alg.h
_SCRAMBLE_KEY = 0x02461E293EC8F720  # the key TensorFlow scrambles seeds with for Philox
_SELECT, _SPANS, _CORRUPT = 0, 1, 2  # the random streams


class _RandomStreams:
    """Independent streams of stateless random int32 in [0, 2**31 - 1), from one [2] seed.

    `tf.random.stateless_uniform` scrambles its seed into a Philox key and counter in every
    call, about 17 small ops each time; here the seed is scrambled once, the same way, and each
    stream starts 2**32 counter blocks after the previous one, so streams never overlap. Philox,
    named explicitly, and integers (XLA turns random bits into floats its own way) give the
    same numbers on every device and under XLA.
    """

    def __init__(self, seed):
        mix = tf.raw_ops.StatelessRandomUniformFullIntV2(
            shape=[2],
            key=tf.constant([_SCRAMBLE_KEY], tf.uint64),
            counter=tf.cast(seed, tf.uint64),
            alg=tf.constant(_PHILOX),
            dtype=tf.uint64,
        )
        self.key, self.counter_high = mix[:1], mix[1]

    def ints(self, shape, stream):
        counter = tf.stack([tf.constant(stream << 32, tf.uint64), self.counter_high])
        return tf.raw_ops.StatelessRandomUniformIntV2(
            shape=shape,
            key=self.key,
            counter=counter,
            alg=tf.constant(_PHILOX),
            minval=tf.constant(0),
            maxval=tf.constant(tf.int32.max),
        )


def _check_token_ids(name, values, vocabulary_size):
    """The distinct ids of `values` in ascending order; raise unless they are ids < V."""
    try:
        ids = np.asarray(values)
    except ValueError:  # ragged nesting
        ids = np.asarray(None)
    if ids.ndim != 1 or not (ids.size == 0 or np.issubdtype(ids.dtype, np.integer)):
        raise ValueError(f"`{name}` must be a list of integer token ids, got {name}={values!r}.")
    bad = [int(i) for i in ids if not 0 <= i < vocabulary_size]
    if bad:
        raise ValueError(
            f"`{name}` must be ids in [0, vocabulary_size={vocabulary_size}), got {bad}."
        )
    return sorted({int(i) for i in ids})


class MaskedLMMasker:
    """Choose masked-LM predictions and corrupt the input, as BERT and ALBERT pretraining do.

    A plain Python object, configured once and called on dense batches inside `tf.data.map`
    or a `tf.function` (also with `jit_compile=True`). All randomness comes from stateless
    Philox ops keyed by the `seed` argument, so the same `token_ids` and `seed` give identical
    outputs in any process, eagerly, in graphs and under XLA.

    Selection, per sequence:
    - `num_to_predict = min(max_predictions, max(1, round(num_tokens * selection_rate)))`,
      where `num_tokens` counts the sequence's tokens, special tokens such as `[CLS]` and
      `[SEP]` included and padding excluded, as BERT's `len(tokens)`; `round` halves to even,
      as Python's `round` in BERT's script, computed in float64. It is capped at the number
      of maskable (non-special) tokens, and is 0 when there is none.
    - Token level (default): exactly `num_to_predict` maskable tokens, uniformly at random
      without replacement.
    - `whole_word=True`: a word is a non-continuation piece plus the continuation pieces
      that follow it (a continuation piece right after a special token starts a word, so words
      never cross special tokens). Words are visited in random order; a word is taken whole if
      its pieces fit in what is left of `num_to_predict`, else skipped, and the walk goes on, as
      in BERT's whole-word masking. The count can then end below `num_to_predict` when no
      remaining word fits.
    - `max_ngram=n > 1` (ALBERT): the words (or tokens, without `whole_word`) of the sequence
      are cut into consecutive spans whose lengths are drawn with `p(k) ~ 1/k`, k in 1..n;
      spans are also cut at every special token, so they never cross one and never overlap.
      Spans are visited in random order; a span that does not fit is shortened to its longest
      prefix of whole words that fits (skipped if even its first word does not), as ALBERT's
      `create_masked_lm_predictions` does. ALBERT instead draws a span at every word and rejects
      spans that overlap earlier ones; cutting the sequence into spans gives non-overlapping
      spans with the same length law without the sequential rejection.

    Corruption: each selected piece independently becomes `mask_token_id` with probability
    `mask_token_rate`, a random id (uniform over the non-special ids, possibly the original
    token) with probability `random_token_rate`, and stays unchanged otherwise. The decision is
    made per piece, also inside whole words and spans, as in BERT's script (its loop decides
    for each index of the word).

    Args:
        vocabulary_size: number of token ids; ids are in `[0, vocabulary_size)`.
        mask_token_id: the `[MASK]` id; normally one of `special_token_ids`.
        special_token_ids: ids never selected and never drawn as a random replacement:
            `[PAD]`, `[CLS]`, `[SEP]`, `[MASK]` and any other reserved token. Taken exactly as
            given (e.g. `[UNK]` may be predicted, as in BERT, unless listed here).
        pad_token_id: the `[PAD]` id, one of `special_token_ids` (0 in BERT's and lmpipe's
            vocabularies): the positions holding it are padding and do not count in
            `num_tokens`.
        selection_rate: share of the tokens to predict (`num_tokens` above), in (0, 1].
        mask_token_rate: probability that a selected piece becomes `[MASK]`.
        random_token_rate: probability that a selected piece becomes a random id;
            `mask_token_rate + random_token_rate <= 1`, the rest stays unchanged.
        max_predictions: `P`, the length of the prediction lists.
        whole_word: select whole words; needs `continuation_mask`.
        continuation_mask: bool `[vocabulary_size]`, True for continuation pieces ("##ing").
            Only with `whole_word=True`.
        max_ngram: longest span in words (or tokens), 1 for BERT's single words or tokens.

    Call arguments:
        token_ids: int `[B, S]` packed and padded token ids, each in `[0, vocabulary_size)`:
            one that is not is an `InvalidArgumentError` naming its row and position, from
            the compiled op and TensorFlow's ops alike (except under XLA, which has no
            run-time errors: check the ids before). `S` may be 0: nothing is selected.
        seed: int `[2]` seed of the stateless random ops; fold in the batch index (and epoch
            and worker) so that every batch gets its own masks.

    Returns:
        A dict: `token_ids` int32 `[B, S]`, the corrupted input; `mask_positions` int32
        `[B, P]`, the selected positions in ascending order; `mask_ids` int32 `[B, P]`, the
        original ids there; `mask_weights` float32 `[B, P]`, 1 for a prediction and 0 for the
        padding of the lists (whose position and id are 0).

    `candidate_units(token_ids, seed)` shows the words or spans a call with that seed
    selects from.

    Example:

    >>> masker = MaskedLMMasker(vocabulary_size=100, mask_token_id=3,
    ...                         special_token_ids=[0, 1, 2, 3], max_predictions=4)
    >>> batch = tf.constant([[1, 10, 11, 12, 13, 14, 15, 2, 0, 0]])
    >>> out = masker(batch, seed=tf.constant([7, 0]))
    >>> out["mask_positions"].shape, float(tf.reduce_sum(out["mask_weights"]))
    (TensorShape([1, 4]), 1.0)

    In a pipeline, one seed per batch: `ds.enumerate().map(lambda i, x: masker(x, seed=
    tf.stack([base_seed, i])))`.

    Reference: Devlin et al., "BERT", 2019, section 3.1 and `create_pretraining_data.py`;
    Lan et al., "ALBERT", 2020, section 4.1 and appendix (n-gram masking).
    """

    def __init__(
        self,
        vocabulary_size,
        mask_token_id,
        special_token_ids,
        selection_rate=0.15,
        mask_token_rate=0.8,
        random_token_rate=0.1,
        max_predictions=20,
        whole_word=False,
        continuation_mask=None,
        max_ngram=1,
        pad_token_id=0,
    ):
        check_positive_int("vocabulary_size", vocabulary_size)
        check_number("mask_token_id", mask_token_id, minimum=0, integer=True)
        if mask_token_id >= vocabulary_size:
            raise ValueError(
                f"`mask_token_id` must be a token id in [0, vocabulary_size={vocabulary_size}), "
                f"got mask_token_id={mask_token_id!r}."
            )
        specials = _check_token_ids("special_token_ids", special_token_ids, vocabulary_size)
        if isinstance(pad_token_id, bool) or pad_token_id not in specials:
            raise ValueError(
                "`pad_token_id` must be one of `special_token_ids` (padding is never "
                f"predicted), got pad_token_id={pad_token_id!r}."
            )
        if len(specials) >= vocabulary_size:
            raise ValueError(
                f"`vocabulary_size` ({vocabulary_size}) must exceed the number of special "
                f"token ids ({len(specials)}), so that there is something to predict."
            )
        check_number("selection_rate", selection_rate, above=0, maximum=1)
        check_number("mask_token_rate", mask_token_rate, minimum=0, maximum=1)
        check_number("random_token_rate", random_token_rate, minimum=0, maximum=1)
        if mask_token_rate + random_token_rate > 1.0 + 1e-9:
            raise ValueError(
                "`mask_token_rate + random_token_rate` must be at most 1, got "
                f"mask_token_rate={mask_token_rate!r}, random_token_rate={random_token_rate!r}."
            )
        check_positive_int("max_predictions", max_predictions)
        check_positive_int("max_ngram", max_ngram)
        check_bool("whole_word", whole_word)
        if whole_word and continuation_mask is None:
            raise ValueError(
                "`continuation_mask` is required with whole_word=True: a bool vector over the "
                "vocabulary, True for continuation pieces such as '##ing'."
            )
        if not whole_word and continuation_mask is not None:
            raise ValueError(
                "`continuation_mask` is only used with whole_word=True; pass whole_word=True "
                "to mask whole words, or leave continuation_mask=None to mask tokens."
            )
        if continuation_mask is not None:
            continuation_mask = np.asarray(continuation_mask)
            if continuation_mask.shape != (vocabulary_size,) or continuation_mask.dtype != bool:
                raise ValueError(
                    "`continuation_mask` must be a bool vector of length vocabulary_size="
                    f"{vocabulary_size}, got dtype {continuation_mask.dtype} and shape "
                    f"{continuation_mask.shape}."
                )

        self.vocabulary_size = vocabulary_size
        self.mask_token_id = mask_token_id
        self.special_token_ids = specials
        self.pad_token_id = int(pad_token_id)
        self.selection_rate = float(selection_rate)
        self.mask_token_rate = float(mask_token_rate)
        self.random_token_rate = float(random_token_rate)
        self.max_predictions = max_predictions
        self.whole_word = whole_word
        self.continuation_mask = continuation_mask
        self.max_ngram = max_ngram

        is_special = np.zeros(vocabulary_size, dtype=bool)
        is_special[specials] = True
        self._is_special = is_special
        self._replacement_ids = np.flatnonzero(~is_special).astype(np.int32)
        # Maximal runs [first, last] of consecutive special ids.
        self._special_runs = []
        for i in specials:
            if self._special_runs and self._special_runs[-1][1] == i - 1:
                self._special_runs[-1][1] = i
            else:
                self._special_runs.append([i, i])
        # The corruption's thresholds on the random 31-bit integers.
        self._mask_below = int(round(self.mask_token_rate * tf.int32.max))
        self._random_below = int(
            round((self.mask_token_rate + self.random_token_rate) * tf.int32.max)
        )
        # Span length k in 1..max_ngram with p(k) ~ 1/k: the length is 1 + the number of these
        # thresholds (P(length <= k) scaled to the random ints) that a draw reaches.
        weights = 1.0 / np.arange(1, max_ngram + 1)
        cdf = np.cumsum(weights)[:-1] / weights.sum()
        self._ngram_thresholds = [int(round(c * np.iinfo(np.int32).max)) for c in cdf]

    def __call__(self, token_ids, seed):
        token_ids, seed = self._check_call(token_ids, seed)
        if compiling_with_xla():
            note_path("masked_lm", "TensorFlow's ops", "an XLA-compiled function")
        else:
            kernel = optional_kernel("masked_lm")
            if kernel is not None:
                return self._compiled(kernel, token_ids, seed)
        if token_ids.shape[1] == 0:
            return self._nothing_to_mask(token_ids)
        if token_ids.shape[1] is None:
            # The ops below gather and scatter at position 0 of each row, which needs one.
            return tf.cond(
                tf.shape(token_ids)[1] > 0,
                lambda: self._mask(self._checked_ids(token_ids), seed),
                lambda: self._nothing_to_mask(token_ids),
            )
        return self._mask(self._checked_ids(token_ids), seed)

    def _nothing_to_mask(self, token_ids):
        """The outputs for rows of length 0, as the compiled op gives them."""
        lists = tf.zeros(tf.stack([tf.shape(token_ids)[0], self.max_predictions]), tf.int32)
        return {
            TOKEN_IDS: token_ids,
            MASK_POSITIONS: lists,
            MASK_IDS: lists,
            MASK_WEIGHTS: tf.cast(lists, tf.float32),
        }

    def _checked_ids(self, token_ids):
        """`token_ids`, once each is known to be an id in [0, vocabulary_size): else an
        `InvalidArgumentError` names the first that is not, as the compiled op does. XLA
        compiles assertions to nothing: there the ids are not checked."""
        if compiling_with_xla():
            return token_ids
        flat = tf.reshape(token_ids, [-1])
        outside = (flat < 0) | (flat >= self.vocabulary_size)

        def fail():
            # The message is made only when an id is outside.
            first = tf.argmax(tf.cast(outside, tf.int32), output_type=tf.int32)
            length = tf.shape(token_ids, out_type=tf.int32)[1]
            message = tf.strings.format(
                "token_ids[{}, {}] = {} is not a token id in [0, vocabulary_size="
                f"{self.vocabulary_size})",
                (first // length, first % length, flat[first]),
            )
            if tf.executing_eagerly():
                raise tf.errors.InvalidArgumentError(None, None, message.numpy().decode())
            with tf.control_dependencies([tf.debugging.Assert(False, [message])]):
                return tf.identity(token_ids)

        return tf.cond(tf.reduce_any(outside), fail, lambda: token_ids)

    def _mask(self, token_ids, seed):
        """`__call__` with TensorFlow's ops, for rows of at least one position."""
        random = _RandomStreams(seed)
        maskable = self._maskable(token_ids)  # [B, S]
        budget = self._num_to_predict(token_ids, maskable)  # [B]
        if self.whole_word or self.max_ngram > 1:
            selected = self._select_units(token_ids, maskable, budget, random)
            positions, weights = self._positions(selected)
        else:
            positions, weights = self._select_tokens(maskable, budget, random)

        mask_ids = tf.gather(token_ids, positions, batch_dims=1) * tf.cast(weights, tf.int32)
        return {
            TOKEN_IDS: self._corrupt(token_ids, positions, weights, mask_ids, random),
            MASK_POSITIONS: positions,
            MASK_IDS: mask_ids,
            MASK_WEIGHTS: tf.cast(weights, tf.float32),
        }

    def _compiled(self, kernel, token_ids, seed):
        """`__call__` as one op, from the draws of `_RandomStreams(seed)` that the TensorFlow
        ops make (the same streams and shapes)."""
        continuation = self.continuation_mask if self.whole_word else np.zeros(0, bool)
        masked, positions, mask_ids, weights = kernel.lmpipe_masked_lm(
            token_ids=token_ids,
            seed=tf.cast(seed, tf.int64),
            is_special=tf.constant(self._is_special),
            replacement_ids=tf.constant(self._replacement_ids),
            selection_rate=tf.constant(self.selection_rate, tf.float64),
            continuation=tf.constant(continuation),
            max_predictions=self.max_predictions,
            pad_token_id=self.pad_token_id,
            mask_token_id=self.mask_token_id,
            mask_below=self._mask_below,
            random_below=self._random_below,
            whole_word=self.whole_word,
            ngram_thresholds=self._ngram_thresholds,
            scramble_key=_SCRAMBLE_KEY,
            select_stream=_SELECT,
            span_stream=_SPANS,
            corrupt_stream=_CORRUPT,
        )
        return {
            TOKEN_IDS: masked,
            MASK_POSITIONS: positions,
            MASK_IDS: mask_ids,
            MASK_WEIGHTS: weights,
        }

    def candidate_units(self, token_ids, seed):
        """The units that `__call__(token_ids, seed)` selects from, for inspection and tests.

        Returns an int32 `[B, S]` tensor: for each position the index of its unit in the row
        (units are numbered 0, 1, ... in order of position), -1 at special tokens. A unit is a
        token, a whole word (`whole_word=True`), or a span of up to `max_ngram` words or tokens.
        A selected unit has all its pieces selected, except n-gram spans shortened to a prefix
        of whole words to fit the budget (at most one per row for token spans).
        """
        token_ids, seed = self._check_call(token_ids, seed)
        maskable = self._maskable(token_ids)
        _, unit_start = self._unit_starts(token_ids, maskable, _RandomStreams(seed))
        unit_id = tf.cumsum(tf.cast(unit_start, tf.int32), axis=1) - 1
        return tf.where(maskable, unit_id, -1)

    def _check_call(self, token_ids, seed):
        token_ids = tf.convert_to_tensor(token_ids)
        if token_ids.shape.rank != 2 or not token_ids.dtype.is_integer:
            raise ValueError(
                "`token_ids` must be a dense integer tensor [batch, sequence], got "
                f"dtype {token_ids.dtype.name} and shape {token_ids.shape}."
            )
        seed = tf.convert_to_tensor(seed)
        if not seed.dtype.is_integer or not seed.shape.is_compatible_with([2]):
            raise ValueError(
                f"`seed` must be an integer tensor of shape [2], got dtype {seed.dtype.name} "
                f"and shape {seed.shape}."
            )
        if token_ids.dtype.size > 4 or token_ids.dtype == tf.uint32:
            # Before the cast to int32, which would wrap an id past 2**31 into the range.
            token_ids = self._checked_ids(token_ids)
        return tf.cast(token_ids, tf.int32), seed

    def _maskable(self, token_ids):
        """True where the token is not special: [B, S] bool."""
        if len(self._special_runs) > 3:
            return tf.logical_not(tf.gather(tf.constant(self._is_special), token_ids))
        # A few comparisons are cheaper than a gather from a vocabulary-sized table.
        maskable = None
        for first, last in self._special_runs:
            if first == last:
                outside = tf.not_equal(token_ids, first)
            else:
                outside = (token_ids < first) | (token_ids > last)
            maskable = outside if maskable is None else maskable & outside
        return tf.ones_like(token_ids, tf.bool) if maskable is None else maskable

    def _num_to_predict(self, token_ids, maskable):
        """BERT's `min(max_predictions, max(1, round(num_tokens * rate)))`, at most the
        number of maskable tokens: [B] int32."""
        num_tokens = tf.reduce_sum(tf.cast(token_ids != self.pad_token_id, tf.int32), axis=1)
        num_maskable = tf.reduce_sum(tf.cast(maskable, tf.int32), axis=1)  # [B]
        # float64 and round-half-to-even reproduce Python's round(n * rate) exactly.
        wanted = tf.round(tf.cast(num_tokens, tf.float64) * self.selection_rate)
        wanted = tf.clip_by_value(tf.cast(wanted, tf.int32), 1, self.max_predictions)
        # BERT's loop stops when its candidates run out; the selection needs the cap too.
        return tf.minimum(wanted, num_maskable)

    def _select_tokens(self, maskable, budget, random):
        """`budget` maskable positions per row, uniformly without replacement, ascending."""
        seq_len = tf.shape(maskable)[1]
        keys = tf.where(maskable, random.ints(tf.shape(maskable), _SELECT), -1)  # [B, S]
        if maskable.shape[1] is None or maskable.shape[1] < self.max_predictions:
            # top_k needs at least P columns; the extra ones are never chosen.
            padding = [[0, 0], [0, tf.maximum(self.max_predictions - seq_len, 0)]]
            keys = tf.pad(keys, padding, constant_values=-1)
        # The `budget` largest keys are a uniform sample without replacement of the maskable
        # positions (budget <= num_maskable); top_k returns distinct positions even on ties.
        chosen = tf.math.top_k(keys, k=self.max_predictions, sorted=True).indices  # [B, P]
        weights = tf.range(self.max_predictions)[None, :] < budget[:, None]
        positions = tf.sort(tf.where(weights, chosen, tf.int32.max), axis=1)
        return tf.where(weights, positions, 0), weights

    def _select_units(self, token_ids, maskable, budget, random):
        """BERT's whole-word / ALBERT's n-gram greedy walk over units in random order."""
        batch_size, seq_len = tf.unstack(tf.shape(maskable))
        size = batch_size * seq_len
        row_offset = tf.range(batch_size)[:, None] * seq_len  # [B, 1]
        position = tf.range(seq_len)[None, :]  # [1, S]

        def take(values, index):
            """values[b, index[b, k]] for [B, S] values (a flat gather, cheaper than batch_dims)."""
            return tf.gather(tf.reshape(values, [-1]), index + row_offset)

        word_start, unit_start = self._unit_starts(token_ids, maskable, random)
        # Units are numbered in order of position in each row (at most S of them); the
        # non-maskable positions go to a dump segment.
        unit_id = tf.maximum(tf.cumsum(tf.cast(unit_start, tf.int32), axis=1) - 1, 0)  # [B, S]
        segment = tf.reshape(tf.where(maskable, unit_id + row_offset, size), [-1])

        def per_unit(values, reduce=tf.math.unsorted_segment_sum):
            reduced = reduce(tf.reshape(values, [-1]), segment, size + 1)
            return tf.reshape(reduced[:-1], [batch_size, seq_len])  # [B, U], U = S

        unit_len = per_unit(tf.cast(maskable, tf.int32))  # pieces; 0 past the last unit
        # n-gram spans that do not fit are shortened to their longest prefix of whole words
        # that fits; whole words alone are skipped.
        shrinkable = self.max_ngram > 1
        if shrinkable:
            unit_first = per_unit(tf.where(unit_start, position, 0))
            offset = position - take(unit_first, unit_id)  # index of each piece in its unit
        if shrinkable and self.whole_word:
            # The first word of a span is the shortest prefix that may be taken.
            word_end = tf.where(word_start & (offset > 0), offset, seq_len)
            min_len = tf.minimum(per_unit(word_end, tf.math.unsorted_segment_min), unit_len)
        elif shrinkable:
            min_len = tf.minimum(unit_len, 1)
        else:
            min_len = unit_len

        # A random order of the units; the empty slots sort last and never fit.
        keys = tf.where(unit_len > 0, random.ints(tf.shape(maskable), _SELECT), tf.int32.max)
        order = tf.argsort(keys, axis=1)  # [B, U]
        len_sorted = take(unit_len, order)
        min_sorted = tf.where(len_sorted > 0, take(min_len, order), seq_len + 1)

        def walk(remaining, used, taken):
            # Every unit that can still fit is taken while the running total fits; the first
            # one that does not is shortened (n-grams) or skipped, and the next round goes
            # on with what is left.
            candidate = tf.logical_not(used) & (min_sorted <= remaining[:, None])
            total = tf.cumsum(tf.where(candidate, len_sorted, 0), axis=1)
            full = candidate & (total <= remaining[:, None])
            first_over = candidate & (total > remaining[:, None])
            first_over &= total - len_sorted <= remaining[:, None]
            full_len = tf.where(full, len_sorted, 0)
            left = remaining - tf.reduce_sum(full_len, axis=1)
            taken += full_len
            if shrinkable and self.whole_word:
                over = tf.argmax(tf.cast(first_over, tf.int32), axis=1, output_type=tf.int32)
                over_unit = take(order, over[:, None])  # [B, 1]
                cut = (unit_id == over_unit) & word_start & maskable
                cut &= (offset > 0) & (offset <= left[:, None])
                prefix = tf.reduce_max(tf.where(cut, offset, 0), axis=1)  # 0: does not fit
                prefix = tf.where(tf.reduce_any(first_over, axis=1), prefix, 0)
            elif shrinkable:
                prefix = left  # tokens: any prefix is whole
            if shrinkable:
                taken += tf.where(first_over, prefix[:, None], 0)
                left -= prefix
            return left, used | full | first_over, taken

        def more(remaining, used, taken):
            return tf.reduce_any(tf.logical_not(used) & (min_sorted <= remaining[:, None]))

        state = (budget, tf.zeros_like(maskable), tf.zeros_like(len_sorted))
        if shrinkable and not self.whole_word:
            # Token spans: the first round fills the budget exactly.
            _, _, taken = walk(*state)
        else:
            _, _, taken = tf.while_loop(more, walk, state, maximum_iterations=self.max_predictions)
        # Pieces taken per unit, back from the random order to the units, then to positions.
        taken = tf.math.unsorted_segment_sum(
            tf.reshape(taken, [-1]), tf.reshape(order + row_offset, [-1]), size
        )
        taken = take(tf.reshape(taken, [batch_size, seq_len]), unit_id)  # [B, S]
        if shrinkable:
            return maskable & (offset < taken)
        return maskable & (taken > 0)

    def _unit_starts(self, token_ids, maskable, random):
        """[B, S] bool masks of the first piece of each word and of each unit."""
        after_special = tf.pad(
            tf.logical_not(maskable[:, :-1]), [[0, 0], [1, 0]], constant_values=True
        )
        word_start = maskable
        if self.whole_word:
            # A continuation piece right after a special token starts a word of its own.
            continuation = tf.gather(tf.constant(self.continuation_mask), token_ids)
            word_start = maskable & (tf.logical_not(continuation) | after_special)
        if self.max_ngram == 1:
            return word_start, word_start
        span_start = self._span_starts(word_start, random)
        return word_start, word_start & (span_start | after_special)

    def _span_starts(self, word_start, random):
        """Cut each row's words into consecutive spans of k words, p(k) ~ 1/k: [B, S] bool,
        True at the first piece of a span. Cutting at special tokens is left to the caller."""
        batch_size, seq_len = tf.unstack(tf.shape(word_start))
        size = batch_size * seq_len
        row_offset = tf.range(batch_size)[:, None] * seq_len  # [B, 1]
        word_index = tf.maximum(tf.cumsum(tf.cast(word_start, tf.int32), axis=1) - 1, 0)
        # S span lengths (each >= 1) always cover the at most S words of a row.
        draw = random.ints(tf.shape(word_start), _SPANS)
        lengths = tf.ones_like(draw)
        for threshold in self._ngram_thresholds:
            lengths += tf.cast(draw >= threshold, tf.int32)
        starts = tf.cumsum(lengths, axis=1, exclusive=True)  # [B, S] first word of each span
        # Mark the span starts on the word axis, [B, W] with W = S, and read them per piece.
        target = tf.reshape(tf.where(starts < seq_len, starts + row_offset, size), [-1])
        marks = tf.math.unsorted_segment_sum(tf.ones_like(target), target, size + 1)[:-1]
        return tf.gather(marks, word_index + row_offset) > 0

    def _corrupt(self, token_ids, positions, weights, mask_ids, random):
        """[MASK] / random non-special id / unchanged, decided per prediction."""
        num_replacements = len(self._replacement_ids)
        # One draw of 31-bit integers: column 0 decides, column 1 picks the replacement.
        draw = random.ints(tf.concat([tf.shape(positions), [2]], 0), _CORRUPT)
        decide, pick = draw[..., 0], draw[..., 1]
        # `pick % n` is uniform up to n / 2**31 (1.4e-5 for a 30k vocabulary).
        replacement = tf.gather(tf.constant(self._replacement_ids), pick % num_replacements)
        new_ids = tf.where(decide < self._random_below, replacement, mask_ids)
        new_ids = tf.where(decide < self._mask_below, self.mask_token_id, new_ids)
        # Padding slots add 0 (at position 0), so duplicate indices are harmless.
        delta = tf.where(weights, new_ids - mask_ids, 0)  # [B, P]
        rows = tf.broadcast_to(tf.range(tf.shape(positions)[0])[:, None], tf.shape(positions))
        indices = tf.stack([rows, positions], axis=-1)  # [B, P, 2]
        return tf.tensor_scatter_nd_add(token_ids, indices, delta)

    def _positions(self, selected):
        """The selected positions of each row in ascending order, padded to `P` with 0."""
        batch_size = tf.shape(selected)[0]
        where = tf.where(selected)  # [N, 2], row-major, so ascending positions per row
        row, position = tf.cast(where[:, 0], tf.int32), tf.cast(where[:, 1], tf.int32)
        counts = tf.reduce_sum(tf.cast(selected, tf.int32), axis=1)  # [B]
        slot = tf.range(tf.shape(row)[0]) - tf.gather(tf.cumsum(counts, exclusive=True), row)
        shape = tf.stack([batch_size, self.max_predictions])
        indices = tf.stack([row, slot], axis=-1)
        positions = tf.scatter_nd(indices, position, shape)
        weights = tf.range(self.max_predictions)[None, :] < counts[:, None]
        return positions, weights
