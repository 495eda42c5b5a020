"""Beam search as a sampler: the `k` best hypotheses, finished ones kept aside and ranked
with a length penalty."""

import tensorflow as tf

from lmpipe.arguments import check_choice, check_number
from lmpipe.models.samplers.sampler import Decoded, Sampler, end_mask

LENGTH_PENALTIES = ("average", "gnmt", None)


def length_penalty_of(length, length_penalty, alpha):
    """The divisor of a hypothesis' log-probability: len, ((5 + len) / 6)^alpha, or 1."""
    length = tf.cast(length, tf.float32)
    if length_penalty == "average":
        return length
    if length_penalty == "gnmt":
        return tf.pow((5.0 + length) / 6.0, alpha)
    return tf.ones_like(length)


def repeat_state(state, times):
    """Every sequence of `state` repeated `times` times in a row: row b*times+k is row b."""
    return tf.nest.map_structure(lambda t: tf.repeat(t, times, axis=0), state)


def gather_state(state, indices):
    """The rows `indices` (`[N]` int) of every tensor of `state`."""
    return tf.nest.map_structure(lambda t: tf.gather(t, indices, axis=0), state)


class BeamSampler(Sampler):
    """Beam search keeping finished hypotheses aside, ranked with a length penalty.

    At each step every live hypothesis is extended by every token; of the best `2k`
    extensions, those ending in EOS that rank among the best `k` join the finished
    hypotheses (the best `k` of which are kept), those ending in EOS ranked lower are
    dropped, and the best `k` not ending in EOS continue, as in Hugging Face's
    `BeamSearchScorer`: a beam of 1 is greedy search, and no hypothesis grows past its EOS.
    A hypothesis is scored by its log-probability divided by a length penalty of its
    length `n` (tokens generated, EOS included): `"average"`: `n`; `"gnmt"`:
    `((5 + n) / 6)^alpha` (Wu et al., 2016); `None`: 1.
    Hypotheses still alive after `max_length` tokens count as finished (truncated); without
    an `eos_id`, every hypothesis runs `max_length` tokens.
    The search stops early once no live hypothesis can beat the best finished one (the k-th
    with `return_all`): log-probabilities only decrease, so a live one's best possible score
    is its current log-probability divided by the penalty of `max_length`. This is Hugging
    Face's `generate(num_beams=k, do_sample=False, early_stopping="never")` with
    `length_penalty=1.0` ("average") or `0.0` (None): the same hypotheses and scores (tested
    on GPT-2); its default `early_stopping=False` stops on a guess that can miss the best.

    Args:
        beam_width: the number `k` of hypotheses kept, a positive integer.
        length_penalty: "average", "gnmt" or None, see above.
        alpha: the exponent of the "gnmt" penalty.
        return_all: return the `k` finished hypotheses, best first (`[B, k, L]`), instead
            of the best.

    Reference: Wu et al., "Google's Neural Machine Translation System", 2016, section 7.
    """

    def __init__(self, beam_width=4, length_penalty="average", alpha=0.6, return_all=False):
        check_number("beam_width", beam_width, minimum=1, integer=True)
        check_choice("length_penalty", length_penalty, LENGTH_PENALTIES)
        check_number("alpha", alpha, minimum=0)
        self.beam_width = int(beam_width)
        self.length_penalty = length_penalty
        self.alpha = float(alpha)
        self.return_all = bool(return_all)

    def key(self):
        return (type(self).__name__, self.beam_width, self.length_penalty, self.alpha,
                self.return_all)  # fmt: skip

    def __call__(
        self,
        first_logits,
        advance,
        state,
        *,
        max_length,
        eos_id=None,
        pad_id=0,
        seed=0,
        return_logits=False,
    ):
        del seed  # beam search draws nothing
        if return_logits:
            raise ValueError("Beam search does not return logits: use return_logits=False.")
        # Without an end token no hypothesis finishes early: -1 is never a token.
        end_id = -1 if eos_id is None else eos_id
        k = self.beam_width
        vocabulary_size = first_logits.shape[-1]
        # At most k of the best 2k extensions end in EOS (one per hypothesis): k others remain.
        num_candidates = min(2 * k, k * vocabulary_size)
        batch = tf.shape(first_logits)[0]
        state = repeat_state(state, k)  # row b*k + j: hypothesis j of sequence b
        logits = tf.repeat(first_logits, k, axis=0)
        positions = tf.range(max_length)[None, None, :]  # [1, 1, L]
        batch_offsets = tf.range(batch)[:, None] * k  # [B, 1]
        negative_infinity = tf.constant(-float("inf"), tf.float32)
        penalty, alpha = self.length_penalty, self.alpha
        final_penalty = length_penalty_of(max_length, penalty, alpha)

        def body(step, logits, state, alive_ids, alive_log_probs, finished_ids, finished_scores):
            log_probs = tf.nn.log_softmax(tf.cast(logits, tf.float32))  # [B*k, V]
            log_probs = tf.reshape(log_probs, [batch, k, vocabulary_size])
            candidates = alive_log_probs[:, :, None] + log_probs  # [B, k, V]
            candidates = tf.reshape(candidates, [batch, k * vocabulary_size])
            top_log_probs, top_indices = tf.math.top_k(candidates, num_candidates)  # [B, 2k]
            parents = top_indices // vocabulary_size
            top_tokens = top_indices % vocabulary_size
            top_ids = tf.gather(alive_ids, parents, batch_dims=1)  # [B, 2k, L]
            top_ids = tf.where(positions == step, top_tokens[:, :, None], top_ids)
            # An extension ending in EOS finishes only if it ranks among the k best, i.e. if
            # it would have been kept in a beam of k: so a beam of 1 is greedy search. One
            # ranked lower is dropped: the hypothesis it ends is complete and must not grow.
            is_eos = top_tokens == end_id  # [B, 2k]
            ends = tf.logical_and(is_eos, tf.range(num_candidates)[None, :] < k)

            # Hypotheses ending in EOS leave the beam and compete with the finished ones.
            divisor = length_penalty_of(step + 1, penalty, alpha)
            ended_scores = tf.where(ends, top_log_probs / divisor, negative_infinity)
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
            state = gather_state(state, tf.reshape(rows, [-1]))
            logits, state = advance(tokens, state, step)
            return (
                step + 1,
                logits,
                state,
                alive_ids,
                alive_log_probs,
                finished_ids,
                finished_scores,
            )

        def cond(step, logits, state, alive_ids, alive_log_probs, finished_ids, finished_scores):
            best_possible = tf.reduce_max(alive_log_probs, axis=1) / final_penalty  # [B]
            to_beat = finished_scores[:, k - 1] if self.return_all else finished_scores[:, 0]
            settled = tf.reduce_all(best_possible < to_beat)
            return tf.logical_and(step < max_length, tf.logical_not(settled))

        # Only the first hypothesis is live at the start, or all k would extend one prefix.
        initial_log_probs = tf.concat([[0.0], tf.fill([k - 1], negative_infinity)], axis=0)
        step, _, _, alive_ids, alive_log_probs, finished_ids, finished_scores = tf.while_loop(
            cond,
            body,
            (
                tf.constant(0, tf.int32),
                logits,
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
        if not self.return_all:
            ids, scores = ids[:, 0], scores[:, 0]
        return Decoded(ids, end_mask(ids, end_id), scores)
