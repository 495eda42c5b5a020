"""`lmpipe pretrain --corpus PATTERN[:WEIGHT]`, repeatable: the corpora of a mixture and their
weights, read from the command line before any work (standard library only, as `paths`).

A value's part after its last ':' is its weight when it reads as a number; otherwise the
whole value is the pattern (a path may hold ':'). A weight is checked where it is parsed,
and the flag's error names the value.
"""

import argparse
import collections
import math
import os

MAX_CORPORA = 8
"""The most `--corpus` flags (a `CorpusMixture`'s most sources)."""

CorpusSource = collections.namedtuple("CorpusSource", ["pattern", "weight"])
"""One `--corpus`: its file pattern and its weight (None where none is given)."""


def corpus_source(value):
    """`--corpus`'s argparse type: `"PATTERN[:WEIGHT]"` -> `CorpusSource`."""
    pattern, colon, suffix = value.rpartition(":")
    if not colon or not pattern:
        return CorpusSource(value, None)
    try:
        weight = float(suffix)
    except ValueError:
        weight = None
    if weight is None:
        # No number after the ':': a path holding ':', unless only what is before it exists.
        if not os.path.exists(value) and os.path.exists(pattern):
            raise argparse.ArgumentTypeError(
                f"{value!r}: the weight {suffix!r} is not a number (give PATTERN:WEIGHT, "
                "a positive number such as 0.3)"
            )
        return CorpusSource(value, None)
    if not math.isfinite(weight) or weight <= 0:
        raise argparse.ArgumentTypeError(
            f"{value!r}: the weight must be a positive number, got {suffix}"
        )
    return CorpusSource(pattern, weight)


def corpus_sources(corpus):
    """The `CorpusSource`s of a parsed `--corpus` (a list of them, one pattern string, or
    None: none)."""
    if corpus is None:
        return []
    if isinstance(corpus, str):
        return [CorpusSource(corpus, None)]
    return list(corpus)


def check_corpus_sources(corpus):
    """Refuse several `--corpus` without a weight each, or more than `MAX_CORPORA`."""
    sources = corpus_sources(corpus)
    if len(sources) > MAX_CORPORA:
        raise SystemExit(
            f"error: --corpus is given {len(sources)} times; a mixture takes at most "
            f"{MAX_CORPORA} corpora"
        )
    if len(sources) > 1:
        for source in sources:
            if source.weight is None:
                raise SystemExit(
                    f"error: --corpus {source.pattern}: give each of the {len(sources)} "
                    "corpora a weight (--corpus PATTERN:WEIGHT)"
                )


def is_mixture(corpus):
    """Whether a parsed `--corpus` names several corpora."""
    return len(corpus_sources(corpus)) > 1
