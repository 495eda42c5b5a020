"""A sampler by its strategy's name: the one module that knows every `Sampler`, so that the
samplers themselves import one way (sampler -> beam -> here)."""

from lmpipe.models.samplers.beam import BeamSampler
from lmpipe.models.samplers.sampler import GreedySampler, Sampler, TopKSampler, TopPSampler

STRATEGIES = ("greedy", "top_k", "top_p", "beam")


def sampler_for(strategy, k=50, p=0.9, temperature=1.0, beam_width=4, length_penalty="average"):
    """The sampler a strategy name describes, or `strategy` itself if it is a `Sampler`."""
    if isinstance(strategy, Sampler):
        return strategy
    if strategy == "greedy":
        return GreedySampler()
    if strategy == "top_k":
        return TopKSampler(k, temperature)
    if strategy == "top_p":
        return TopPSampler(p, temperature)
    if strategy == "beam":
        return BeamSampler(beam_width, length_penalty)
    raise ValueError(
        f"`strategy` must be one of {STRATEGIES} or a Sampler, got strategy={strategy!r}."
    )
