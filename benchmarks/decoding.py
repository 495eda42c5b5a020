"""Decoding speed: lmpipe's beam_search / greedy_search against keras-hub's samplers.

One encoder-decoder Transformer (lmpipe's `TransformerSeq2Seq`: 3 + 3 layers, d_model 256,
4 heads, FFN 1024, shared vocabulary of 8000, random weights) decodes a batch of 8 source
sequences of 24 tokens, up to 32 target tokens, in float32 on the CPU, without XLA.

- lmpipe: `beam_search(model, ..., beam_width=4)` and `greedy_search(model, ...)`, called
  inside one `tf.function` each (as an exported serving function would).
- keras-hub: `keras_hub.samplers.BeamSampler(num_beams=4)` and `GreedySampler()` driving the
  very same model and weights through keras-hub's `next(prompt, cache, index)` contract:
  the cache is lmpipe's decoding state (`model.encode`: per-layer self-attention key/value
  caches and the encoder's cross-attention keys/values), and `next` runs `model.decode_step`
  on the previous token, so both searches do the same model work per step. Each is wrapped
  in one `tf.function`.

Both run all 32 steps: keras-hub is given no stop token, and the EOS id given to lmpipe
(checked below) is never the best token of this random model, so lmpipe's early stop does
not shorten its run. lmpipe's beam search also keeps finished hypotheses aside and ranks them
with a length penalty, which keras-hub's sampler does not. tokens/s = batch x 32 / seconds
(beam search: output tokens, not tokens scored across the beam), median of interleaved
rounds (see `measure.interleaved_seconds`).

Run: python benchmarks/decoding.py   (about 2 minutes on 2 CPU cores)
"""

import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import statistics  # noqa: E402

import keras  # noqa: E402
import keras_hub  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from measure import Results, interleaved_seconds, print_machine, ratio_range  # noqa: E402

from lmpipe.models.samplers import beam_search, greedy_search  # noqa: E402
from lmpipe.models.transformer import TransformerConfig, transformer  # noqa: E402

BATCH, SOURCE_LENGTH, MAX_LENGTH, BEAM = 8, 24, 32, 4
VOCABULARY, BOS, EOS = 8000, 1, 2
ROUNDS = 5


def keras_hub_search(model, sampler):
    """A tf.function decoding with a keras-hub sampler over lmpipe's cached decode_step."""

    def next_token_logits(prompt, cache, index):
        # keras-hub asks for the logits at `index`, i.e. after the token at `index - 1`.
        token_ids = prompt[:, index - 1]
        logits, cache = model.decode_step(token_ids, cache, index - 1)
        return logits, None, cache

    @tf.function
    def search(encoder_ids, encoder_mask):
        state = model.encode(encoder_ids, encoder_mask, max_length=MAX_LENGTH)
        batch = tf.shape(encoder_ids)[0]
        prompt = tf.concat(
            [tf.fill([batch, 1], BOS), tf.zeros([batch, MAX_LENGTH], tf.int32)], axis=1
        )
        return sampler(next_token_logits, prompt, cache=state, index=1)

    return search


def main():
    print_machine()
    keras.utils.set_random_seed(0)
    config = TransformerConfig(
        vocabulary_size=VOCABULARY,
        hidden_dim=256,
        num_encoder_layers=3,
        num_decoder_layers=3,
        num_heads=4,
        intermediate_dim=1024,
        dropout=0.0,
    )
    model = transformer(config)
    rng = np.random.default_rng(0)
    encoder_ids = tf.constant(rng.integers(3, VOCABULARY, (BATCH, SOURCE_LENGTH)), tf.int32)
    encoder_mask = tf.ones_like(encoder_ids)

    settings = dict(bos_id=BOS, eos_id=EOS, max_length=MAX_LENGTH)
    lmpipe_beam = tf.function(
        lambda ids, mask: beam_search(model, ids, mask, beam_width=BEAM, **settings)
    )
    lmpipe_greedy = tf.function(lambda ids, mask: greedy_search(model, ids, mask, **settings))
    hub_beam = keras_hub_search(model, keras_hub.samplers.BeamSampler(num_beams=BEAM))
    hub_greedy = keras_hub_search(model, keras_hub.samplers.GreedySampler())

    greedy_ids = lmpipe_greedy(encoder_ids, encoder_mask).token_ids
    hub_ids = hub_greedy(encoder_ids, encoder_mask)[:, 1:]
    if np.any(greedy_ids.numpy() == EOS):
        print("note: greedy search produced EOS; lmpipe may have stopped early")
    same = np.mean(greedy_ids.numpy() == hub_ids.numpy())
    print(f"greedy outputs of lmpipe and keras-hub agree on {same:.1%} of the tokens")

    functions = {
        "lmpipe beam_search": lambda: lmpipe_beam(encoder_ids, encoder_mask)[0].numpy(),
        "keras-hub BeamSampler": lambda: hub_beam(encoder_ids, encoder_mask).numpy(),
        "lmpipe greedy_search": lambda: lmpipe_greedy(encoder_ids, encoder_mask)[0].numpy(),
        "keras-hub GreedySampler": lambda: hub_greedy(encoder_ids, encoder_mask).numpy(),
    }
    seconds = interleaved_seconds(functions, rounds=ROUNDS)
    rates = {name: BATCH * MAX_LENGTH / statistics.median(times) for name, times in seconds.items()}
    print(
        f"\nTransformer 3+3 layers, d_model 256, vocabulary {VOCABULARY}; batch {BATCH}, "
        f"source {SOURCE_LENGTH} tokens, {MAX_LENGTH} output tokens, beam {BEAM}; median of "
        f"{ROUNDS} interleaved rounds"
    )
    for name, rate in rates.items():
        print(f"  {name:<24} {rate:10,.0f} output tokens/s")
    beam_ratio = rates["lmpipe beam_search"] / rates["keras-hub BeamSampler"]
    greedy_ratio = rates["lmpipe greedy_search"] / rates["keras-hub GreedySampler"]
    print(f"  beam search:   lmpipe / keras-hub = {beam_ratio:.2f}x")
    print(f"  greedy search: lmpipe / keras-hub = {greedy_ratio:.2f}x")

    record = Results("decoding")
    for search, ratio, lmpipe, keras_hub_name in (
        (f"beam search (beam {BEAM})", beam_ratio, "lmpipe beam_search", "keras-hub BeamSampler"),
        ("greedy search", greedy_ratio, "lmpipe greedy_search", "keras-hub GreedySampler"),
    ):
        record.add(
            f"output tokens/s, {search}, batch {BATCH} x {MAX_LENGTH} tokens",
            ratio,
            keras_hub_name,
            goal="> 1x",
            spread=ratio_range(seconds[keras_hub_name], seconds[lmpipe]),
            tokens_per_second={lmpipe: rates[lmpipe], keras_hub_name: rates[keras_hub_name]},
        )
    record.write()


if __name__ == "__main__":
    main()
