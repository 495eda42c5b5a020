"""Text generation with a key/value cache: greedy, top-k and nucleus (top-p) sampling.

The prompt is run once through the model (prefill), which fills the cache; then one token per
step, each step attending to the cached keys and values of everything before it. The loop is
a `tf.while_loop` of graph ops, so `generate` runs eagerly, in a `tf.function`, and in an
exported SavedModel (without XLA).

Batched prompts of different lengths are left-padded: the real tokens of each row are moved
to the end of the prompt block (`prompt_mask` may mark them anywhere; their order is kept),
so every row writes its new tokens at the same cache slot; positions count the real tokens
of each row, so a padded prompt is decoded exactly as it would be alone.
"""

import tensorflow as tf

STRATEGIES = ("greedy", "top_k", "top_p")


def check_generation_arguments(max_new_tokens, strategy, k, p, temperature, eos_id, seed):
    """Raise a ValueError naming the first bad argument of `generate`."""
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int):
        raise ValueError(
            f"`max_new_tokens` must be a positive integer, got max_new_tokens={max_new_tokens!r}."
        )
    if max_new_tokens < 1:
        raise ValueError(
            f"`max_new_tokens` must be a positive integer, got max_new_tokens={max_new_tokens!r}."
        )
    if strategy not in STRATEGIES:
        raise ValueError(f"`strategy` must be one of {STRATEGIES}, got strategy={strategy!r}.")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"`k` must be a positive integer, got k={k!r}.")
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 < p <= 1.0:
        raise ValueError(f"`p` must be a number in (0, 1], got p={p!r}.")
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)):
        raise ValueError(f"`temperature` must be a positive number, got {temperature!r}.")
    if temperature <= 0:
        raise ValueError(f"`temperature` must be a positive number, got {temperature!r}.")
    if eos_id is not None and (isinstance(eos_id, bool) or not isinstance(eos_id, int)):
        raise ValueError(f"`eos_id` must be an int or None, got eos_id={eos_id!r}.")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"`seed` must be an int, got seed={seed!r}.")


def filter_logits(logits, strategy, k=50, p=0.9, temperature=1.0):
    """The logits `[B, V]` a sampler draws from: scaled by `1 / temperature`, and set to
    `-inf` outside the `k` best tokens ("top_k") or outside the nucleus ("top_p": the
    fewest best tokens whose probabilities sum to at least `p`; the best token always stays).
    """
    logits = tf.cast(logits, tf.float32) / temperature
    vocabulary_size = logits.shape[-1] or tf.shape(logits)[-1]
    if strategy == "top_k":
        k = min(k, vocabulary_size) if isinstance(vocabulary_size, int) else k
        kth_best = tf.math.top_k(logits, k=k).values[:, -1:]  # [B, 1]
        return tf.where(logits < kth_best, float("-inf"), logits)
    if strategy == "top_p":
        ranked = tf.sort(logits, axis=-1, direction="DESCENDING")  # [B, V]
        probabilities = tf.nn.softmax(ranked, axis=-1)
        # A token is in the nucleus if the tokens ranked before it sum to less than p.
        before = tf.cumsum(probabilities, axis=-1, exclusive=True)
        in_nucleus = before < p
        smallest_kept = tf.reduce_min(
            tf.where(in_nucleus, ranked, float("inf")), axis=-1, keepdims=True
        )  # [B, 1]
        return tf.where(logits < smallest_kept, float("-inf"), logits)
    return logits


def sample_tokens(logits, strategy, key, k=50, p=0.9, temperature=1.0):
    """One token per row of `logits` `[B, V]`: int32 `[B]`; `key` is a `[2]` stateless seed."""
    if strategy == "greedy":
        return tf.argmax(logits, axis=-1, output_type=tf.int32)
    filtered = filter_logits(logits, strategy, k=k, p=p, temperature=temperature)
    return tf.random.stateless_categorical(filtered, 1, seed=key, dtype=tf.int32)[:, 0]


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
    eos_id=None,
    pad_id=0,
    seed=0,
    return_logits=False,
):
    """Continue each prompt by up to `max_new_tokens` tokens, using the key/value cache.

    Args:
        model: a causal LM with `initial_cache(batch_size, max_length)` and
            `call_with_cache(token_ids, positions, cache_padding_mask, cache, index)
            -> (logits, cache)`, e.g. `lmpipe.models.gpt.GptCausalLM`; its `config` has
            `max_sequence_length`.
        prompt_ids: int `[B, P]` prompts.
        prompt_mask: `[B, P]`, 1 on real prompt tokens (each row needs one); default all 1.
            Padding may be on either side (see the module docstring).
        max_new_tokens: tokens to generate per row (>= 1).
        strategy: "greedy" (the most likely token), "top_k" or "top_p" (sampling).
        k: "top_k": sample among the `k` most likely tokens.
        p: "top_p": sample in the nucleus of cumulative probability `p`, in (0, 1].
        temperature: divides the logits before sampling (> 0).
        eos_id: a row stops after generating this id (kept in the output); later slots hold
            `pad_id` with mask 0, and the loop ends once every row has stopped.
        pad_id: the id of the slots after a row stopped.
        seed: int; step `t` draws with the stateless key `fold_in([seed, 0], t)`, so the
            same seed gives the same samples in any process.
        return_logits: also return the model's logits at each step.

    Returns:
        A dict: `token_ids` int32 `[B, max_new_tokens]`, the new tokens; `padding_mask` int32
        `[B, max_new_tokens]`, 1 on generated tokens; with `return_logits`, `logits` float32
        `[B, max_new_tokens, V]`, the logits each token was chosen from (before filtering).

    Example:

    >>> from lmpipe.models.gpt import GptConfig, gpt
    >>> model = gpt(GptConfig.tiny(vocabulary_size=50, dropout=0.0))
    >>> out = generate(model, [[5, 6, 7], [0, 8, 9]], [[1, 1, 1], [0, 1, 1]], max_new_tokens=4)
    >>> tuple(out["token_ids"].shape)
    (2, 4)
    """
    check_generation_arguments(max_new_tokens, strategy, k, p, temperature, eos_id, seed)
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
    next_logits = logits[:, -1]  # [B, V]
    vocabulary_size = tf.shape(next_logits)[-1]
    base_key = tf.constant([seed, 0], tf.int64)
    columns = tf.range(max_new_tokens)

    def not_finished(step, done, *_):
        return tf.logical_and(step < max_new_tokens, tf.logical_not(tf.reduce_all(done)))

    def step_fn(step, done, tokens, token_mask, all_logits, next_logits, cache):
        key = tf.random.experimental.stateless_fold_in(base_key, tf.cast(step, tf.int64))
        token = sample_tokens(next_logits, strategy, key, k=k, p=p, temperature=temperature)
        token = tf.where(done, pad_id, token)
        here = columns[None, :] == step  # [1, max_new_tokens]
        tokens = tf.where(here, token[:, None], tokens)
        token_mask = tf.where(here, tf.cast(~done, tf.int32)[:, None], token_mask)
        if return_logits:
            all_logits = tf.where(here[:, :, None], next_logits[:, None, :], all_logits)
        if eos_id is not None:
            done = done | (token == eos_id)
        # The next step's logits; the last step writes the cache's last slot, which fits.
        logits, cache = model.call_with_cache(
            token[:, None], (lengths + step)[:, None], cache_mask, cache, prompt_length + step
        )
        return step + 1, done, tokens, token_mask, all_logits, logits[:, 0], cache

    initial = (
        tf.constant(0),
        tf.zeros([batch_size], tf.bool),
        tf.fill([batch_size, max_new_tokens], tf.constant(pad_id, tf.int32)),
        tf.zeros([batch_size, max_new_tokens], tf.int32),
        tf.zeros([batch_size, max_new_tokens, vocabulary_size] if return_logits else [0]),
        next_logits,
        cache,
    )
    _, _, tokens, token_mask, all_logits, _, _ = tf.while_loop(
        not_finished, step_fn, initial, maximum_iterations=max_new_tokens
    )
    outputs = {"token_ids": tokens, "padding_mask": token_mask}
    if return_logits:
        outputs["logits"] = all_logits
    return outputs
