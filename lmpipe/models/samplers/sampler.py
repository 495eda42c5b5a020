"""What every decoding loop shares: the `Decoded` result, the token-choosing samplers (greedy,
top-k, top-p) and their loop, and the one rule for tracing decoding functions.

A sampler decodes from a model through two things the model's family supplies: the logits
of the first token to choose (`[B, V]`, after a prompt or a BOS), and
`advance(tokens [B], state, step) -> (logits [B, V], state)`, which feeds the token chosen at
`step` and returns the logits of the next one. Causal LMs (`lmpipe.models.samplers.causal_lm`)
and encoder-decoders (`lmpipe.models.samplers.seq2seq`) both decode through it, with any
sampler, in graph code (`tf.while_loop`) that runs eagerly, in a `tf.function` and in an
exported SavedModel (without XLA). `state` is a nest of batch-major tensors (axis 0 is the
batch), which beam search reorders.
"""

import numbers
import weakref
from typing import NamedTuple

import tensorflow as tf

from lmpipe.arguments import check_number


class Decoded(NamedTuple):
    """What every decoding returns.

    Attributes:
        token_ids: int32 `[B, L]` the decoded tokens (`[B, k, L]` for beam search's
            `return_all`), the end token included, `pad_id` after it.
        padding_mask: int32, the shape of `token_ids`: 1 on decoded tokens (the end token
            included), 0 after.
        scores: float32 `[B]` (`[B, k]`): the sum of the tokens' log-probabilities under the
            model (before temperature and filtering); for beam search, that sum divided by
            the length penalty.
        logits: float32 `[B, L, V]`, the logits each token was chosen from, when asked for
            (`return_logits=True`), else None.
    """

    token_ids: tf.Tensor
    padding_mask: tf.Tensor
    scores: tf.Tensor
    logits: tf.Tensor = None


# One traced function per owner (a model) and key (what the function does, with its settings).
_TRACED = weakref.WeakKeyDictionary()


def traced_function(owner, key, make):
    """The `tf.function` `make()` for `owner` and `key`, made (and traced) once.

    The one caching rule of lmpipe's decoding functions (searches, generation, serving
    functions): tracing a decoding loop takes seconds, so each is made once per model and
    settings and reused while the model lives; a new model gets new functions.

    Args:
        owner: the object the function reads (a Keras model); weakly referenced.
        key: a hashable description of the function and its settings.
        make: `() -> tf.function`.
    """
    functions = _TRACED.setdefault(owner, {})
    if key not in functions:
        functions[key] = make()
    return functions[key]


def check_token_id(name, value, vocabulary_size=None):
    """Raise a ValueError naming `name` unless `value` is a token id (below
    `vocabulary_size`, when given)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"`{name}` must be a token id, got {name}={value!r}.")
    if value < 0 or (vocabulary_size is not None and value >= vocabulary_size):
        bound = "" if vocabulary_size is None else f" in [0, {vocabulary_size}) (the vocabulary)"
        raise ValueError(f"`{name}` must be a token id{bound}, got {name}={value!r}.")
    return int(value)


class Sampler:
    """Chooses one token per row from next-token logits, step by step (see the module
    docstring); `GreedySampler`, `TopKSampler`, `TopPSampler` and `BeamSampler` are the
    samplers. Subclasses implement `choose` (or, for beam search, `__call__`)."""

    def key(self):
        """A hashable description of the sampler (its class and settings), for tracing."""
        return (type(self).__name__, *sorted(vars(self).items()))

    def choose(self, logits, seed):
        """int32 `[B]`: a token of each row of float32 `logits` `[B, V]`; `seed` is a `[2]`
        stateless key, new at every step."""
        raise NotImplementedError

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
        """Decode up to `max_length` tokens; a `Decoded`.

        Args:
            first_logits: float `[B, V]`, the logits of the first token.
            advance: `(tokens [B], state, step) -> (logits [B, V], state)`, see the module
                docstring; called after each step, the last one included.
            state: the decoding state (a nest of batch-major tensors).
            max_length: the most tokens decoded per row.
            eos_id: a row ends after this token (kept), or None.
            pad_id: the token after a row's end.
            seed: step `t` draws with the stateless key `fold_in([seed, 0], t)`.
            return_logits: also return the logits of every step.
        """
        batch = tf.shape(first_logits)[0]
        columns = tf.range(max_length)[None, :]  # [1, L]
        base_key = tf.constant([seed, 0], tf.int64)
        vocabulary_size = tf.shape(first_logits)[-1]

        def not_finished(step, done, *_):
            return tf.logical_and(step < max_length, tf.logical_not(tf.reduce_all(done)))

        def body(step, done, logits, tokens, mask, scores, all_logits, state):
            logits = tf.cast(logits, tf.float32)
            key = tf.random.experimental.stateless_fold_in(base_key, tf.cast(step, tf.int64))
            token = tf.where(done, pad_id, self.choose(logits, key))  # [B]
            log_probs = tf.nn.log_softmax(logits)
            scores += tf.where(done, 0.0, tf.gather(log_probs, token, batch_dims=1))
            here = columns == step
            tokens = tf.where(here, token[:, None], tokens)
            mask = tf.where(here, tf.cast(~done, tf.int32)[:, None], mask)
            if return_logits:
                all_logits = tf.where(here[:, :, None], logits[:, None, :], all_logits)
            if eos_id is not None:
                done = done | (token == eos_id)
            logits, state = advance(token, state, step)
            return step + 1, done, logits, tokens, mask, scores, all_logits, state

        initial = (
            tf.constant(0),
            tf.zeros([batch], tf.bool),
            first_logits,
            tf.fill([batch, max_length], tf.constant(pad_id, tf.int32)),
            tf.zeros([batch, max_length], tf.int32),
            tf.zeros([batch], tf.float32),
            tf.zeros([batch, max_length, vocabulary_size] if return_logits else [0]),
            state,
        )
        _, _, _, tokens, mask, scores, all_logits, _ = tf.while_loop(
            not_finished, body, initial, maximum_iterations=max_length
        )
        return Decoded(tokens, mask, scores, all_logits if return_logits else None)


class GreedySampler(Sampler):
    """The most probable token at every step.

    >>> GreedySampler().choose(tf.constant([[0.0, 2.0, 1.0]]), tf.constant([0, 0])).numpy()
    array([1], dtype=int32)
    """

    def choose(self, logits, seed):
        return tf.argmax(logits, axis=-1, output_type=tf.int32)


class TopKSampler(Sampler):
    """Sample among the `k` most probable tokens, from the logits divided by `temperature`."""

    def __init__(self, k=50, temperature=1.0):
        check_number("k", k, minimum=1, integer=True)
        check_number("temperature", temperature, above=0)
        self.k = int(k)
        self.temperature = float(temperature)

    def filter(self, logits):
        """The logits sampled from: scaled, and `-inf` outside the `k` best tokens."""
        logits = tf.cast(logits, tf.float32) / self.temperature
        vocabulary_size = logits.shape[-1]
        k = self.k if vocabulary_size is None else min(self.k, vocabulary_size)
        kth_best = tf.math.top_k(logits, k=k).values[:, -1:]  # [B, 1]
        return tf.where(logits < kth_best, float("-inf"), logits)

    def choose(self, logits, seed):
        return tf.random.stateless_categorical(self.filter(logits), 1, seed, dtype=tf.int32)[:, 0]


class TopPSampler(Sampler):
    """Nucleus sampling: among the fewest most probable tokens whose probabilities sum to at
    least `p` (the best token always stays), from the logits divided by `temperature`.

    Reference: Holtzman et al., "The Curious Case of Neural Text Degeneration", 2020.
    """

    def __init__(self, p=0.9, temperature=1.0):
        check_number("p", p, above=0, maximum=1)
        check_number("temperature", temperature, above=0)
        self.p = float(p)
        self.temperature = float(temperature)

    def filter(self, logits):
        """The logits sampled from: scaled, and `-inf` outside the nucleus."""
        logits = tf.cast(logits, tf.float32) / self.temperature
        ranked = tf.sort(logits, axis=-1, direction="DESCENDING")  # [B, V]
        probabilities = tf.nn.softmax(ranked, axis=-1)
        # A token is in the nucleus if the tokens ranked before it sum to less than p.
        before = tf.cumsum(probabilities, axis=-1, exclusive=True)
        smallest_kept = tf.reduce_min(
            tf.where(before < self.p, ranked, float("inf")), axis=-1, keepdims=True
        )  # [B, 1]
        return tf.where(logits < smallest_kept, float("-inf"), logits)

    def choose(self, logits, seed):
        return tf.random.stateless_categorical(self.filter(logits), 1, seed, dtype=tf.int32)[:, 0]


def end_mask(token_ids, eos_id):
    """int32, the shape of `token_ids` (`[..., L]`): 1 up to each row's first `eos_id`
    included, 0 after it (all 1 without one)."""
    is_eos = tf.cast(tf.equal(token_ids, eos_id), tf.int32)
    before = tf.cumsum(is_eos, axis=-1, exclusive=True)  # EOS seen before this position
    return tf.cast(before == 0, tf.int32)
