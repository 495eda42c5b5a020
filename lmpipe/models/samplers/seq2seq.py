"""Decoding encoder-decoders: the `Seq2SeqModel` contract and `decode` with any sampler
(`greedy_search` and `beam_search` are its two common forms).

Every lmpipe seq2seq model (`transformer(config)`, `rnn_seq2seq(config)`) is a
`Seq2SeqModel`: called on `{encoder_ids, encoder_mask, decoder_ids, decoder_mask}` it returns
teacher-forced logits `[B, T, V]`; for generation it offers

- `model.encode(encoder_ids, encoder_mask, max_length=None) -> state`, a nest (dict/list) of
  tensors that are all batch-major: axis 0 of every tensor is the batch, so `tf.gather(t,
  indices, axis=0)` on every leaf reorders, repeats or selects sequences (what beam search
  does with `repeat_state` / `gather_state`). `max_length` is the most decoder positions the
  state must hold (the Transformer allocates its key/value caches with it);
- `model.decode_step(token_ids, state, step) -> (logits [B, V], new_state)`: the logits of
  the token after `token_ids` (`[B]`, the token at position `step`, a scalar int32 tensor),
  given everything decoded before. The first step feeds BOS at `step` 0.

Called eagerly, `decode` traces one `tf.function` per model and settings and reuses it
(`traced_function`); inside a `tf.function` it runs as it is.
"""

import keras
import tensorflow as tf

from lmpipe.arguments import check_number, check_seed
from lmpipe.models.samplers.beam import BeamSampler, gather_state, repeat_state
from lmpipe.models.samplers.sampler import (
    GreedySampler,
    Sampler,
    check_token_id,
    traced_function,
)


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

    repeat_state = staticmethod(repeat_state)
    gather_state = staticmethod(gather_state)


def decode(
    model, encoder_ids, encoder_mask, sampler=None, *, bos_id, eos_id, max_length, pad_id=0, seed=0
):
    """Decode a target sequence for each source sequence with `sampler`; a `Decoded`.

    Args:
        model: a `Seq2SeqModel`.
        encoder_ids: int32 `[B, S]` source token ids.
        encoder_mask: int `[B, S]`, 1 for real source tokens.
        sampler: a `Sampler` (`GreedySampler()` when None; `BeamSampler(k)`, `TopPSampler(p)`).
        bos_id: the token fed at the first step (not part of the output).
        eos_id: the token that ends a sequence (kept in the output).
        max_length: the most tokens generated per sequence, EOS included.
        pad_id: the token filling the output after EOS.
        seed: the seed of sampling samplers.

    Example:

    >>> from lmpipe.models.transformer import TransformerConfig, transformer
    >>> model = transformer(TransformerConfig.tiny(vocabulary_size=20))
    >>> decoded = decode(model, [[5, 6, 7]], [[1, 1, 1]], bos_id=1, eos_id=2, max_length=6)
    >>> tuple(decoded.token_ids.shape), tuple(decoded.scores.shape)
    ((1, 6), (1,))
    """
    sampler = GreedySampler() if sampler is None else sampler
    if not isinstance(sampler, Sampler):
        raise ValueError(f"`sampler` must be a Sampler, got {sampler!r}.")
    vocabulary_size = getattr(model, "target_vocabulary_size", None)
    if vocabulary_size is None:
        raise ValueError(
            "`model` must be a Seq2SeqModel with `target_vocabulary_size`, "
            f"`encode` and `decode_step`, got {type(model).__name__}."
        )
    settings = dict(
        bos_id=check_token_id("bos_id", bos_id, vocabulary_size),
        eos_id=check_token_id("eos_id", eos_id, vocabulary_size),
        pad_id=check_token_id("pad_id", pad_id, vocabulary_size),
        max_length=int(check_number("max_length", max_length, minimum=1, integer=True)),
        seed=int(check_seed(seed)),
    )
    encoder_ids = tf.convert_to_tensor(encoder_ids, tf.int32)
    encoder_mask = tf.cast(tf.convert_to_tensor(encoder_mask), tf.int32)
    if tf.inside_function():
        return _decode(model, sampler, encoder_ids, encoder_mask, **settings)
    key = ("decode", sampler.key(), tuple(sorted(settings.items())))

    def make():
        def run(encoder_ids, encoder_mask):
            return _decode(model, sampler, encoder_ids, encoder_mask, **settings)

        return tf.function(run, reduce_retracing=True)

    return traced_function(model, key, make)(encoder_ids, encoder_mask)


def _decode(model, sampler, encoder_ids, encoder_mask, *, bos_id, eos_id, max_length, pad_id, seed):
    # One position more than the output: the sampler feeds the last token too.
    state = model.encode(encoder_ids, encoder_mask, max_length=max_length + 1)
    batch = tf.shape(encoder_ids)[0]
    first_logits, state = model.decode_step(tf.fill([batch], bos_id), state, tf.constant(0))

    def advance(tokens, state, step):
        return model.decode_step(tokens, state, step + 1)

    return sampler(
        first_logits, advance, state, max_length=max_length, eos_id=eos_id, pad_id=pad_id,
        seed=seed,
    )  # fmt: skip


def greedy_search(model, encoder_ids, encoder_mask, *, bos_id, eos_id, max_length, pad_id=0):
    """`decode` with the most probable token at every step; a `Decoded` (`scores`: the sums
    of the generated tokens' log-probabilities, EOS included)."""
    return decode(
        model,
        encoder_ids,
        encoder_mask,
        GreedySampler(),
        bos_id=bos_id,
        eos_id=eos_id,
        max_length=max_length,
        pad_id=pad_id,
    )


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
    """`decode` with `BeamSampler(beam_width, length_penalty, alpha, return_all)` (see it);
    a `Decoded` whose `scores` are the length-penalized scores of the best hypothesis (of
    the `k` best with `return_all`: `token_ids` `[B, k, L]`, `-inf` for empty slots).

    Example:

    >>> from lmpipe.models.transformer import TransformerConfig, transformer
    >>> model = transformer(TransformerConfig.tiny(vocabulary_size=20))
    >>> decoded = beam_search(model, [[5, 6, 7]], [[1, 1, 1]], bos_id=1, eos_id=2,
    ...                       max_length=6, beam_width=3, return_all=True)
    >>> tuple(decoded.token_ids.shape), tuple(decoded.scores.shape)
    ((1, 3, 6), (1, 3))
    """
    sampler = BeamSampler(beam_width, length_penalty, alpha, return_all)
    return decode(
        model,
        encoder_ids,
        encoder_mask,
        sampler,
        bos_id=bos_id,
        eos_id=eos_id,
        max_length=max_length,
        pad_id=pad_id,
    )
