"""Sequence-to-sequence models' decoding contract, and greedy and beam search over it.

Every lmpipe seq2seq model (`transformer(config)`, `rnn_seq2seq(config)`) is a
`Seq2SeqModel`: called on `{encoder_ids, encoder_mask, decoder_ids, decoder_mask}` it returns
teacher-forced logits `[B, T, V]`; for generation it offers

- `model.encode(encoder_ids, encoder_mask, max_length=None) -> state`, a nest (dict/list) of
  tensors that are all batch-major: axis 0 of every tensor is the batch, so `tf.gather(t,
  indices, axis=0)` on every leaf reorders, repeats or selects sequences (what beam search
  does with `repeat_state` / `gather_state`). `max_length` is the longest output the state
  must hold (the Transformer allocates its key/value caches with it);
- `model.decode_step(token_ids, state, step) -> (logits [B, V], new_state)`: the logits of
  the token after `token_ids` (`[B]`, the token at position `step`, a scalar int32 tensor),
  given everything decoded before. The first step feeds BOS at `step` 0.

`greedy_search` and `beam_search` are graph code (`tf.while_loop`): they run as they are
inside a `tf.function` (e.g. an exported serving function, without XLA); called eagerly they
trace one `tf.function` per model and settings and reuse it.
"""

import functools
import numbers
import weakref

import keras
import tensorflow as tf

LENGTH_PENALTIES = ("average", "gnmt", None)


@keras.saving.register_keras_serializable(package="lmpipe")
class Seq2SeqModel(keras.Model):
    """Base class of lmpipe's encoder-decoder models: teacher forcing plus incremental decoding.

    Subclasses set `target_vocabulary_size` and implement `call`, `encode` and `decode_step`
    (see the module docstring for the contract). The state returned by `encode` is batch-major
    in every leaf, so `repeat_state` and `gather_state` work for every model.
    """

    target_vocabulary_size = None

    def encode(self, encoder_ids, encoder_mask, max_length=None):
        """The decoding state of a batch of source sequences (a nest of batch-major tensors)."""
        raise NotImplementedError

    def decode_step(self, token_ids, state, step):
        """`(logits [B, V], new_state)` of the token following `token_ids` at position `step`."""
        raise NotImplementedError

    @staticmethod
    def repeat_state(state, times):
        """Every sequence of `state` repeated `times` times in a row: row b*times+k is row b."""
        return tf.nest.map_structure(lambda t: tf.repeat(t, times, axis=0), state)

    @staticmethod
    def gather_state(state, indices):
        """The rows `indices` (`[N]` int) of every tensor of `state`."""
        return tf.nest.map_structure(lambda t: tf.gather(t, indices, axis=0), state)


def _check_search_arguments(model, bos_id, eos_id, max_length, pad_id):
    vocabulary_size = getattr(model, "target_vocabulary_size", None)
    if vocabulary_size is None:
        raise ValueError(
            "`model` must be a Seq2SeqModel with `target_vocabulary_size`, "
            f"`encode` and `decode_step`, got {type(model).__name__}."
        )
    for name, value in (("bos_id", bos_id), ("eos_id", eos_id), ("pad_id", pad_id)):
        if (
            isinstance(value, bool)
            or not isinstance(value, numbers.Integral)
            or not 0 <= value < vocabulary_size
        ):
            raise ValueError(
                f"`{name}` must be a token id in [0, {vocabulary_size}) (the model's target "
                f"vocabulary), got {name}={value!r}."
            )
    if isinstance(max_length, bool) or not isinstance(max_length, numbers.Integral):
        raise ValueError(f"`max_length` must be a positive integer, got {max_length!r}.")
    if max_length < 1:
        raise ValueError(f"`max_length` must be a positive integer, got {max_length!r}.")


def _length_penalty(length, length_penalty, alpha):
    """The divisor of a hypothesis' log-probability: len, ((5 + len) / 6)^alpha, or 1."""
    length = tf.cast(length, tf.float32)
    if length_penalty == "average":
        return length
    if length_penalty == "gnmt":
        return tf.pow((5.0 + length) / 6.0, alpha)
    return tf.ones_like(length)


# One traced function per (model, search, settings) when the searches are called eagerly.
_TRACED = weakref.WeakKeyDictionary()


def _run_traced(model, loop, encoder_ids, encoder_mask, **settings):
    encoder_ids = tf.convert_to_tensor(encoder_ids, tf.int32)
    encoder_mask = tf.cast(tf.convert_to_tensor(encoder_mask), tf.int32)
    if tf.inside_function():
        return loop(model, encoder_ids, encoder_mask, **settings)
    key = (loop.__name__, tuple(sorted(settings.items())))
    functions = _TRACED.setdefault(model, {})
    if key not in functions:
        functions[key] = tf.function(
            functools.partial(loop, model, **settings), reduce_retracing=True
        )
    return functions[key](encoder_ids, encoder_mask)


def greedy_search(model, encoder_ids, encoder_mask, *, bos_id, eos_id, max_length, pad_id=0):
    """The most probable token at every step, until EOS or `max_length` tokens.

    Args:
        model: a `Seq2SeqModel`.
        encoder_ids: int32 `[B, S]` source token ids.
        encoder_mask: int `[B, S]`, 1 for real source tokens.
        bos_id: the token fed at the first step (not part of the output).
        eos_id: the token that ends a sequence (kept in the output).
        max_length: the most tokens generated per sequence, EOS included.
        pad_id: the token filling the output after EOS.

    Returns:
        `(token_ids, scores)`: int32 `[B, max_length]` generated tokens, padded with `pad_id`
        after EOS; float32 `[B]` sums of the log-probabilities of the generated tokens (EOS
        included).

    Example:

    >>> from lmpipe.models.transformer import TransformerConfig, transformer
    >>> model = transformer(TransformerConfig.tiny(vocabulary_size=20))
    >>> ids, scores = greedy_search(model, [[5, 6, 7]], [[1, 1, 1]], bos_id=1, eos_id=2,
    ...                             max_length=6)
    >>> tuple(ids.shape), tuple(scores.shape)
    ((1, 6), (1,))
    """
    _check_search_arguments(model, bos_id, eos_id, max_length, pad_id)
    return _run_traced(
        model,
        _greedy_loop,
        encoder_ids,
        encoder_mask,
        bos_id=int(bos_id),
        eos_id=int(eos_id),
        max_length=int(max_length),
        pad_id=int(pad_id),
    )


def _greedy_loop(model, encoder_ids, encoder_mask, *, bos_id, eos_id, max_length, pad_id):
    batch = tf.shape(encoder_ids)[0]
    state = model.encode(encoder_ids, encoder_mask, max_length=max_length)
    positions = tf.range(max_length)[None, :]  # [1, L]

    def body(step, tokens, state, output, scores, finished):
        logits, state = model.decode_step(tokens, state, step)
        log_probs = tf.nn.log_softmax(tf.cast(logits, tf.float32))  # [B, V]
        best = tf.argmax(log_probs, axis=-1, output_type=tf.int32)  # [B]
        best_log_prob = tf.gather(log_probs, best, batch_dims=1)
        scores += tf.where(finished, 0.0, best_log_prob)
        best = tf.where(finished, pad_id, best)
        output = tf.where(positions == step, best[:, None], output)
        finished = tf.logical_or(finished, best == eos_id)
        return step + 1, best, state, output, scores, finished

    def cond(step, tokens, state, output, scores, finished):
        return tf.logical_and(step < max_length, tf.logical_not(tf.reduce_all(finished)))

    _, _, _, output, scores, _ = tf.while_loop(
        cond,
        body,
        (
            tf.constant(0, tf.int32),
            tf.fill([batch], bos_id),
            state,
            tf.fill([batch, max_length], pad_id),
            tf.zeros([batch], tf.float32),
            tf.zeros([batch], tf.bool),
        ),
    )
    return output, scores


def beam_search(
    model,
    encoder_ids,
    encoder_mask,
    *,
    bos_id,
    eos_id,
    max_length,
    beam_width=4,
    length_penalty="average",
    alpha=0.6,
    pad_id=0,
    return_all=False,
):
    """Beam search keeping finished hypotheses aside, ranked with a length penalty.

    At each step every live hypothesis is extended by every token; of the best `2k`
    extensions, those ending in EOS that rank among the best `k` join the finished
    hypotheses (the best `k` of which are kept), those ending in EOS ranked lower are
    dropped, and the best `k` not ending in EOS continue, as in Hugging Face's
    `BeamSearchScorer`: a beam of 1 is greedy search, and no hypothesis grows past its EOS.
    A hypothesis is scored by its log-probability divided by a length penalty of its
    length `n` (tokens generated, EOS included): `"average"`: `n`; `"gnmt"`:
    `((5 + n) / 6)^alpha` (Wu et al., 2016); `None`: 1.
    Hypotheses still alive after `max_length` tokens count as finished (truncated).
    The search stops early once no live hypothesis can beat the best finished one (the k-th
    with `return_all`): log-probabilities only decrease, so a live one's best possible score
    is its current log-probability divided by the penalty of `max_length`.

    Args:
        model: a `Seq2SeqModel`.
        encoder_ids: int32 `[B, S]` source token ids.
        encoder_mask: int `[B, S]`, 1 for real source tokens.
        bos_id: the token fed at the first step (not part of the output).
        eos_id: the token that ends a hypothesis (kept in the output).
        max_length: the most tokens generated per hypothesis, EOS included.
        beam_width: the number `k` of hypotheses kept, a positive integer.
        length_penalty: "average", "gnmt" or None, see above.
        alpha: the exponent of the "gnmt" penalty.
        pad_id: the token filling the output after EOS.
        return_all: return the `k` finished hypotheses, best first, instead of the best.

    Returns:
        `(token_ids, scores)`: int32 `[B, max_length]` and float32 `[B]` (the length-penalized
        score of the best hypothesis); with `return_all`, `[B, k, max_length]` and `[B, k]`
        (`-inf` for slots without a hypothesis).

    Example:

    >>> from lmpipe.models.transformer import TransformerConfig, transformer
    >>> model = transformer(TransformerConfig.tiny(vocabulary_size=20))
    >>> ids, scores = beam_search(model, [[5, 6, 7]], [[1, 1, 1]], bos_id=1, eos_id=2,
    ...                           max_length=6, beam_width=3, return_all=True)
    >>> tuple(ids.shape), tuple(scores.shape)
    ((1, 3, 6), (1, 3))

    Reference: Wu et al., "Google's Neural Machine Translation System", 2016, section 7.
    """
    _check_search_arguments(model, bos_id, eos_id, max_length, pad_id)
    if isinstance(beam_width, bool) or not isinstance(beam_width, numbers.Integral):
        raise ValueError(f"`beam_width` must be a positive integer, got {beam_width!r}.")
    if beam_width < 1:
        raise ValueError(f"`beam_width` must be a positive integer, got {beam_width!r}.")
    if length_penalty not in LENGTH_PENALTIES:
        raise ValueError(
            f"`length_penalty` must be one of {LENGTH_PENALTIES}, got {length_penalty!r}."
        )
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real) or alpha < 0:
        raise ValueError(f"`alpha` must be a non-negative number, got alpha={alpha!r}.")
    return _run_traced(
        model,
        _beam_loop,
        encoder_ids,
        encoder_mask,
        bos_id=int(bos_id),
        eos_id=int(eos_id),
        max_length=int(max_length),
        beam_width=int(beam_width),
        length_penalty=length_penalty,
        alpha=float(alpha),
        pad_id=int(pad_id),
        return_all=bool(return_all),
    )


def _beam_loop(
    model,
    encoder_ids,
    encoder_mask,
    *,
    bos_id,
    eos_id,
    max_length,
    beam_width,
    length_penalty,
    alpha,
    pad_id,
    return_all,
):
    k = beam_width
    vocabulary_size = model.target_vocabulary_size
    # At most k of the best 2k extensions end in EOS (one per hypothesis): k others remain.
    num_candidates = min(2 * k, k * vocabulary_size)
    batch = tf.shape(encoder_ids)[0]
    state = model.encode(encoder_ids, encoder_mask, max_length=max_length)
    state = Seq2SeqModel.repeat_state(state, k)  # row b*k + j: hypothesis j of sequence b
    positions = tf.range(max_length)[None, None, :]  # [1, 1, L]
    batch_offsets = tf.range(batch)[:, None] * k  # [B, 1]
    negative_infinity = tf.constant(-float("inf"), tf.float32)
    final_penalty = _length_penalty(max_length, length_penalty, alpha)

    def body(step, tokens, state, alive_ids, alive_log_probs, finished_ids, finished_scores):
        logits, state = model.decode_step(tokens, state, step)
        log_probs = tf.nn.log_softmax(tf.cast(logits, tf.float32))  # [B*k, V]
        log_probs = tf.reshape(log_probs, [batch, k, vocabulary_size])
        candidates = alive_log_probs[:, :, None] + log_probs  # [B, k, V]
        candidates = tf.reshape(candidates, [batch, k * vocabulary_size])
        top_log_probs, top_indices = tf.math.top_k(candidates, num_candidates)  # [B, 2k]
        parents = top_indices // vocabulary_size
        top_tokens = top_indices % vocabulary_size
        top_ids = tf.gather(alive_ids, parents, batch_dims=1)  # [B, 2k, L]
        top_ids = tf.where(positions == step, top_tokens[:, :, None], top_ids)
        # An extension ending in EOS finishes only if it ranks among the k best, i.e. if it
        # would have been kept in a beam of k: so a beam of 1 is greedy search. One ranked
        # lower is dropped: the hypothesis it ends is complete and must not grow further.
        is_eos = top_tokens == eos_id  # [B, 2k]
        ends = tf.logical_and(is_eos, tf.range(num_candidates)[None, :] < k)

        # Hypotheses ending in EOS leave the beam and compete with the finished ones.
        penalty = _length_penalty(step + 1, length_penalty, alpha)
        ended_scores = tf.where(ends, top_log_probs / penalty, negative_infinity)
        pool_scores = tf.concat([finished_scores, ended_scores], axis=1)  # [B, 3k]
        pool_ids = tf.concat([finished_ids, top_ids], axis=1)
        finished_scores, best = tf.math.top_k(pool_scores, k)
        finished_ids = tf.gather(pool_ids, best, batch_dims=1)

        # The k best extensions not ending in EOS continue.
        alive_log_probs, best = tf.math.top_k(
            tf.where(is_eos, negative_infinity, top_log_probs), k
        )  # [B, k]
        alive_ids = tf.gather(top_ids, best, batch_dims=1)
        tokens = tf.reshape(tf.gather(top_tokens, best, batch_dims=1), [-1])  # [B*k]
        rows = tf.gather(parents, best, batch_dims=1) + batch_offsets  # [B, k]
        state = Seq2SeqModel.gather_state(state, tf.reshape(rows, [-1]))
        return step + 1, tokens, state, alive_ids, alive_log_probs, finished_ids, finished_scores

    def cond(step, tokens, state, alive_ids, alive_log_probs, finished_ids, finished_scores):
        best_possible = tf.reduce_max(alive_log_probs, axis=1) / final_penalty  # [B]
        to_beat = finished_scores[:, k - 1] if return_all else finished_scores[:, 0]
        settled = tf.reduce_all(best_possible < to_beat)
        return tf.logical_and(step < max_length, tf.logical_not(settled))

    # Only the first hypothesis is live at the start, or all k would extend the same prefix.
    initial_log_probs = tf.concat([[0.0], tf.fill([k - 1], negative_infinity)], axis=0)
    step, _, _, alive_ids, alive_log_probs, finished_ids, finished_scores = tf.while_loop(
        cond,
        body,
        (
            tf.constant(0, tf.int32),
            tf.fill([batch * k], bos_id),
            state,
            tf.fill([batch, k, max_length], pad_id),
            tf.tile(initial_log_probs[None, :], [batch, 1]),
            tf.fill([batch, k, max_length], pad_id),
            tf.fill([batch, k], negative_infinity),
        ),
    )
    # Hypotheses cut at max_length are complete too; after an early stop none can win.
    truncated_scores = tf.where(
        step >= max_length, alive_log_probs / final_penalty, negative_infinity
    )
    scores, best = tf.math.top_k(tf.concat([finished_scores, truncated_scores], axis=1), k)
    ids = tf.gather(tf.concat([finished_ids, alive_ids], axis=1), best, batch_dims=1)
    if return_all:
        return ids, scores
    return ids[:, 0], scores[:, 0]
