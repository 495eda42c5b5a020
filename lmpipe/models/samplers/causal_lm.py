"""Generating text with a causal LM and its key/value cache, with any sampler (greedy, top-k,
nucleus, beam search).

The prompt is run once through the model (prefill), which fills the cache; then one token per
step, each step attending to the cached keys and values of everything before it. The loop is
a `tf.while_loop` of graph ops, so `generate` runs eagerly, in a `tf.function`, and in an
exported SavedModel (without XLA).

Batched prompts of different lengths are left-padded: the real tokens of each row are moved
to the end of the prompt block (`prompt_mask` may mark them anywhere; their order is kept),
so every row writes its new tokens at the same cache slot; positions count the real tokens
of each row, so a padded prompt is decoded exactly as it would be alone. The decoding state
is the cache with each row's prompt length and cache mask, all batch-major, so that beam
search repeats and reorders them together (`BeamSampler`).
"""

import tensorflow as tf

from lmpipe.arguments import check_number, check_seed
from lmpipe.models.samplers.beam import BeamSampler
from lmpipe.models.samplers.sampler import (
    Sampler,
    TopKSampler,
    TopPSampler,
    check_token_id,
    traced_function,
)
from lmpipe.models.samplers.strategies import sampler_for


def left_pad(prompt_ids, prompt_mask, pad_id=0):
    """Move each row's real tokens (mask 1) to the end of the row, keeping their order.

    Returns:
        `(ids, mask)` int32 `[B, P]`, pads (set to `pad_id`) first.
    """
    prompt_mask = tf.cast(prompt_mask, tf.int32)
    # A stable sort of the mask puts the pads (0) first and the real tokens after, in order.
    order = tf.argsort(prompt_mask, axis=1, stable=True)
    ids = tf.gather(tf.cast(prompt_ids, tf.int32), order, batch_dims=1)
    mask = tf.gather(prompt_mask, order, batch_dims=1)
    return tf.where(mask > 0, ids, pad_id), mask


def generate(
    model,
    prompt_ids,
    prompt_mask=None,
    *,
    max_new_tokens,
    strategy="greedy",
    k=50,
    p=0.9,
    temperature=1.0,
    beam_width=4,
    length_penalty="average",
    alpha=0.6,
    eos_id=None,
    pad_id=0,
    seed=0,
    return_logits=False,
):
    """Continue each prompt by up to `max_new_tokens` tokens, using the key/value cache;
    a `Decoded`.

    Args:
        model: a causal LM with `initial_cache(batch_size, max_length)` and
            `call_with_cache(token_ids, positions, cache_padding_mask, cache, index)
            -> (logits, cache)`, e.g. `lmpipe.models.gpt.GptCausalLM`; its `config` has
            `max_sequence_length`.
        prompt_ids: int `[B, P]` prompts.
        prompt_mask: `[B, P]`, 1 on real prompt tokens (each row needs one); default all 1.
            Padding may be on either side (see the module docstring).
        max_new_tokens: tokens to generate per row (>= 1).
        strategy: "greedy" (the most likely token), "top_k" or "top_p" (sampling), "beam"
            (beam search, see `BeamSampler`), or a `GreedySampler`, `TopKSampler`,
            `TopPSampler` or `BeamSampler` (then the settings below are its own).
        k: "top_k": sample among the `k` most likely tokens.
        p: "top_p": sample in the nucleus of cumulative probability `p`, in (0, 1].
        temperature: divides the logits before sampling (> 0).
        beam_width: "beam": the hypotheses kept (1 is greedy search).
        length_penalty: "beam": "average", "gnmt" or None (see `BeamSampler`).
        alpha: "beam": the exponent of the "gnmt" penalty.
        eos_id: a row stops after generating this id (kept in the output); later slots hold
            `pad_id` with mask 0, and the loop ends once every row has stopped. Beam search
            finishes a hypothesis at it (without one, every hypothesis runs
            `max_new_tokens` tokens).
        pad_id: the id of the slots after a row stopped.
        seed: int; step `t` draws with the stateless key `fold_in([seed, 0], t)`, so the
            same seed gives the same samples in any process.
        return_logits: also return the model's logits at each step.

    Returns:
        A `Decoded`: `token_ids` int32 `[B, max_new_tokens]`, the new tokens; `padding_mask`
        int32 `[B, max_new_tokens]`, 1 on generated tokens; `scores` float32 `[B]`, the sum
        of their log-probabilities (beam search: divided by the length penalty; a
        `BeamSampler(return_all=True)` returns its `k` best, `[B, k, ...]`); with
        `return_logits` (not for beam search), `logits` float32 `[B, max_new_tokens, V]`,
        the logits each token was chosen from (before filtering).

    Example:

    >>> from lmpipe.models.gpt import GptConfig, gpt
    >>> model = gpt(GptConfig.tiny(vocabulary_size=50, dropout=0.0))
    >>> out = generate(model, [[5, 6, 7], [0, 8, 9]], [[1, 1, 1], [0, 1, 1]], max_new_tokens=4)
    >>> tuple(out.token_ids.shape)
    (2, 4)
    """
    sampler = _sampler(strategy, k, p, temperature, beam_width, length_penalty, alpha)
    check_number("max_new_tokens", max_new_tokens, minimum=1, integer=True)
    if eos_id is not None:
        check_token_id("eos_id", eos_id)
    check_token_id("pad_id", pad_id)
    check_seed(seed)
    prompt_ids = tf.convert_to_tensor(prompt_ids)
    if not prompt_ids.dtype.is_integer or prompt_ids.shape.rank != 2:
        raise ValueError(
            "`prompt_ids` must be integer token ids of shape [batch, length], got "
            f"{prompt_ids.dtype.name} {prompt_ids.shape}."
        )
    if prompt_mask is None:
        prompt_mask = tf.ones_like(prompt_ids, tf.int32)
    prompt_mask = tf.convert_to_tensor(prompt_mask)
    if not prompt_mask.shape.is_compatible_with(prompt_ids.shape):
        raise ValueError(
            f"`prompt_mask` must have the shape of `prompt_ids`: got {prompt_mask.shape} for "
            f"prompt_ids of shape {prompt_ids.shape} (batch size or length mismatch)."
        )
    max_length = model.config.max_sequence_length
    prompt_length = prompt_ids.shape[1]
    if prompt_length is not None and prompt_length + max_new_tokens > max_length:
        raise ValueError(
            f"The prompt length ({prompt_length}) plus `max_new_tokens` ({max_new_tokens}) "
            f"exceeds the model's max_sequence_length ({max_length})."
        )
    settings = dict(
        max_new_tokens=int(max_new_tokens),
        eos_id=None if eos_id is None else int(eos_id),
        pad_id=int(pad_id),
        seed=int(seed),
        return_logits=bool(return_logits),
    )
    prompt_ids = tf.cast(prompt_ids, tf.int32)
    prompt_mask = tf.cast(prompt_mask, tf.int32)
    if tf.inside_function():
        return _generate(model, sampler, prompt_ids, prompt_mask, **settings)
    key = ("generate", sampler.key(), tuple(sorted(settings.items())))

    def make():
        def run(prompt_ids, prompt_mask):
            return _generate(model, sampler, prompt_ids, prompt_mask, **settings)

        return tf.function(run, reduce_retracing=True)

    return traced_function(model, key, make)(prompt_ids, prompt_mask)


def _generate(
    model, sampler, prompt_ids, prompt_mask, *, max_new_tokens, eos_id, pad_id, seed, return_logits
):
    max_length = model.config.max_sequence_length
    checks = [
        tf.debugging.assert_equal(
            tf.shape(prompt_mask),
            tf.shape(prompt_ids),
            message="`prompt_mask` must have the shape of `prompt_ids`",
        ),
        tf.debugging.assert_less_equal(
            tf.shape(prompt_ids)[1] + max_new_tokens,
            max_length,
            message=f"prompt length + max_new_tokens must be <= {max_length}",
        ),
        tf.debugging.assert_positive(
            tf.reduce_sum(tf.cast(prompt_mask, tf.int32), axis=1),
            message="every prompt needs at least one real token",
        ),
    ]
    with tf.control_dependencies([check for check in checks if check is not None]):
        ids, mask = left_pad(prompt_ids, prompt_mask, pad_id)

    batch_size, prompt_length = tf.shape(ids)[0], tf.shape(ids)[1]
    lengths = tf.reduce_sum(mask, axis=1)  # [B]
    cache_mask = tf.concat([mask, tf.ones([batch_size, max_new_tokens], tf.int32)], axis=1)
    cache = model.initial_cache(batch_size, prompt_length + max_new_tokens)
    positions = tf.maximum(tf.cumsum(mask, axis=1) - 1, 0)
    # A tensor index: the attention layer's static check of an int index needs known lengths.
    logits, cache = model.call_with_cache(ids, positions, cache_mask, cache, tf.constant(0))
    # Everything a row's steps read, batch-major, so that beam search reorders it with the row.
    state = {"cache": cache, "lengths": lengths, "cache_mask": cache_mask}

    def advance(tokens, state, step):
        # The last step writes the cache's last slot, which fits.
        logits, cache = model.call_with_cache(
            tokens[:, None],
            (state["lengths"] + step)[:, None],
            state["cache_mask"],
            state["cache"],
            prompt_length + step,
        )
        return logits[:, 0], {**state, "cache": cache}

    return sampler(
        logits[:, -1],
        advance,
        state,
        max_length=max_new_tokens,
        eos_id=eos_id,
        pad_id=pad_id,
        seed=seed,
        return_logits=return_logits,
    )


def _sampler(strategy, k, p, temperature, beam_width, length_penalty, alpha):
    if isinstance(strategy, Sampler):
        return strategy
    if strategy in ("greedy", "top_k", "top_p", "beam"):
        # Every setting is checked, whichever the strategy uses.
        TopKSampler(k, temperature), TopPSampler(p, temperature)
        beam = BeamSampler(beam_width, length_penalty, alpha)
        if strategy == "beam":
            return beam
        return sampler_for(strategy, k=k, p=p, temperature=temperature)
    raise ValueError(
        "`strategy` must be one of greedy, top_k, top_p, beam or a Sampler, got "
        f"strategy={strategy!r}."
    )
