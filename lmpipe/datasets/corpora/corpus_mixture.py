"""Several corpora read as one for pretraining, each in a given share of the examples.

The mixture is a corpus to the pipelines (`len`, `iter_documents`, `split`, `describe`,
`check_tokenizer`, `tokenized`); its stream of examples is made in
`lmpipe.datasets.examples.mixture`, which interleaves the sources' own streams by a
deterministic schedule.
"""

import math

from lmpipe.arguments import check_number, check_positive_int

MAX_SOURCES = 8
"""The most sources a mixture takes (the training checkpoint keeps a position for each)."""

DEFAULT_CHUNK_SIZE = 32
"""Consecutive examples taken from one source before the schedule moves on: any 10,000
consecutive examples then hold each source within half a percent of its weight (the
schedule's counts stray by up to about two chunks over a span; 64 strayed past 1%)."""


class CorpusMixture:
    """Corpora mixed in given proportions of the pretraining examples.

    Args:
        sources: a list of `(corpus, weight)`: `TextCorpus` or `TokenizedCorpus` sources (all
            of one kind), at most 8, with positive weights (normalized to sum to 1).
        chunk_size: consecutive examples taken from one source (see
            `lmpipe.datasets.examples.mixture`); the shares hold over any span of many chunks.
        names: a name per source for messages (None: a tokenized corpus's folder, else
            "source k").

    Example:

    >>> from lmpipe.datasets import TextCorpus
    >>> a = TextCorpus.from_documents([["one."], ["two."]])
    >>> b = TextCorpus.from_documents([["three."]])
    >>> CorpusMixture([(a, 3), (b, 1)]).weights
    (0.75, 0.25)
    """

    def __init__(self, sources, chunk_size=DEFAULT_CHUNK_SIZE, names=None):
        check_positive_int("chunk_size", chunk_size)
        if isinstance(sources, (str, bytes)) or not hasattr(sources, "__iter__"):
            raise ValueError(
                f"`sources` must be a list of (corpus, weight) pairs, got {sources!r}."
            )
        sources = list(sources)
        if not 1 <= len(sources) <= MAX_SOURCES:
            raise ValueError(
                f"`sources` must hold 1 to {MAX_SOURCES} (corpus, weight) pairs, got "
                f"{len(sources)}."
            )
        corpora, weights = [], []
        for k, source in enumerate(sources):
            if not isinstance(source, tuple) or len(source) != 2:
                raise ValueError(f"`sources[{k}]` must be a (corpus, weight) pair, got {source!r}.")
            corpus, weight = source
            if isinstance(corpus, CorpusMixture) or not callable(
                getattr(corpus, "file_document_counts", None)
            ):
                raise ValueError(
                    f"`sources[{k}]`'s corpus must be a TextCorpus or TokenizedCorpus, got "
                    f"{type(corpus).__name__}."
                )
            check_number(f"sources[{k}] weight", weight, above=0)
            if len(corpus) == 0:
                raise ValueError(f"`sources[{k}]` ({corpus!r}) has no document.")
            corpora.append(corpus)
            weights.append(float(weight))
        kinds = {bool(getattr(corpus, "tokenized", False)) for corpus in corpora}
        if len(kinds) > 1:
            raise ValueError(
                "`sources` mixes TextCorpus and TokenizedCorpus sources: give one kind (the "
                "examples of both kinds are built differently)."
            )
        total = math.fsum(weights)
        self.sources = tuple(corpora)
        self.weights = tuple(weight / total for weight in weights)
        self.chunk_size = chunk_size
        self.tokenized = kinds.pop()
        if names is None:
            names = [
                getattr(corpus, "directory", None) or f"source {k}"
                for k, corpus in enumerate(corpora)
            ]
        names = [str(name) for name in names]
        if len(names) != len(corpora):
            raise ValueError(
                f"`names` must name the {len(corpora)} sources, got {len(names)} names."
            )
        self.names = tuple(names)

    def __len__(self):
        """The documents of all sources."""
        return sum(len(corpus) for corpus in self.sources)

    def __repr__(self):
        parts = ", ".join(
            f"({corpus!r}, {weight:.3f})"
            for corpus, weight in zip(self.sources, self.weights, strict=True)
        )
        return f"CorpusMixture([{parts}], chunk_size={self.chunk_size})"

    def describe(self):
        """A few lines: each source's weight and description."""
        lines = [
            f"CorpusMixture of {len(self.sources)} sources, {len(self):,} documents, "
            f"chunks of {self.chunk_size} examples:"
        ]
        for name, corpus, weight in zip(self.names, self.sources, self.weights, strict=True):
            described = corpus.describe() if hasattr(corpus, "describe") else repr(corpus)
            first, *rest = described.splitlines()
            lines.append(f"  {weight:.1%} {name}: {first}")
            lines.extend(f"  {line}" for line in rest)
        return "\n".join(lines)

    def with_sources(self, corpora):
        """A mixture of `corpora` with this one's weights and chunk size."""
        return CorpusMixture(
            list(zip(corpora, self.weights, strict=True)), self.chunk_size, self.names
        )

    def split(self, held_out=0.05, seed=0):
        """`(rest, held out)`: each source split by document (see `TextCorpus.split`), as two
        mixtures with this one's weights. A number `held_out` is taken from each source."""
        parts = []
        for k, corpus in enumerate(self.sources):
            if not callable(getattr(corpus, "split", None)):
                raise ValueError(
                    f"`sources[{k}]` ({corpus!r}) cannot be split: hold out a separate corpus "
                    "(or give `held_out`=0)."
                )
            try:
                parts.append(corpus.split(held_out, seed=seed))
            except ValueError as error:
                raise ValueError(f"`sources[{k}]`: {error}") from None
        rest, held = zip(*parts, strict=True)
        return self.with_sources(rest), self.with_sources(held)

    @property
    def num_sentences(self):
        """The sentences of all sources (of those that count them)."""
        return sum(getattr(corpus, "num_sentences", 0) for corpus in self.sources)

    def fingerprint(self):
        """What identifies the mixture as it is now (see `TextCorpus.fingerprint`): its
        sources' fingerprints, weights and chunk size; None when a source has none."""
        sources = [getattr(corpus, "fingerprint", lambda: None)() for corpus in self.sources]
        if any(source is None for source in sources):
            return None
        return {"sources": sources, "shares": list(self.weights), "chunk_size": self.chunk_size}

    def iter_documents(self):
        """Every source's documents, source after source (for vocabulary learning)."""
        for corpus in self.sources:
            yield from corpus.iter_documents()

    def check_tokenizer(self, tokenizer):
        """Raise unless every tokenized source was written with `tokenizer`'s vocabulary."""
        for corpus in self.sources:
            if hasattr(corpus, "check_tokenizer"):
                corpus.check_tokenizer(tokenizer)
