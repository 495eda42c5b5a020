"""Decoding, in one place: the token samplers (greedy, top-k, top-p) and beam search, the
`Decoded` result they all return, and the two families they decode: causal LMs (`generate`)
and encoder-decoders (`decode`, `greedy_search`, `beam_search`)."""

from lmpipe.models.samplers.beam import BeamSampler
from lmpipe.models.samplers.causal_lm import generate, left_pad
from lmpipe.models.samplers.sampler import (
    Decoded,
    GreedySampler,
    Sampler,
    TopKSampler,
    TopPSampler,
    traced_function,
)
from lmpipe.models.samplers.seq2seq import Seq2SeqModel, beam_search, decode, greedy_search
from lmpipe.models.samplers.strategies import sampler_for

__all__ = [
    "BeamSampler",
    "Decoded",
    "GreedySampler",
    "Sampler",
    "Seq2SeqModel",
    "TopKSampler",
    "TopPSampler",
    "beam_search",
    "decode",
    "generate",
    "greedy_search",
    "left_pad",
    "sampler_for",
    "traced_function",
]
