"""The seekable stream of a `CorpusMixture`: its sources' streams interleaved by a schedule.

- Each source is its own stream (`corpus_examples`, with the stream's seed folded with the
  source's index), so a source's examples do not depend on the other sources.
- The mixture's examples come in chunks of `chunk_size` consecutive examples of one source;
  chunk `j` comes from source `table[j mod PERIOD]`. The table is the sequence of a divisor
  (Sainte-Lague) apportionment of `PERIOD` chunks by the weights: source `k`'s `m`-th chunk
  of a period sits at time `(m + 1/2) / q_k` (`q_k` its chunks per period), chunks in the
  order of their times. Any `n` consecutive chunks then hold within about two chunks of
  `n * weight` of each source, and the examples before any index are counted from the table
  alone (`MixtureSchedule.counts`), without reading a source.
- The mixture's example `i` has the `MixturePosition` `(i, next example of each source)`, kept
  by a scan over the mixed chunks: starting at a position starts each source at its row and
  the schedule at `i`.
"""

import zlib

import numpy as np
import tensorflow as tf

from lmpipe.arguments import check_positive_int
from lmpipe.contract import STREAM_POSITION
from lmpipe.datasets.corpora.corpus_mixture import CorpusMixture
from lmpipe.datasets.examples.corpus_stream import corpus_examples
from lmpipe.datasets.examples.stream_position import MixturePosition, StreamPosition

PERIOD = 2**16
"""Chunks in one period of the schedule: the weights are kept to 1 / PERIOD of a chunk."""


class MixtureSchedule:
    """Which source each of a mixture's examples comes from (see the module docstring).

    Args:
        weights: the sources' shares, positive, summing to 1.
        chunk_size: consecutive examples of one source.
    """

    def __init__(self, weights, chunk_size):
        check_positive_int("chunk_size", chunk_size)
        self.chunk_size = chunk_size
        self.chunks_per_period = _apportioned(np.asarray(weights, np.float64), PERIOD)
        sources = np.repeat(np.arange(len(weights)), self.chunks_per_period)
        ranks = np.concatenate([np.arange(q) for q in self.chunks_per_period])
        times = (2 * ranks + 1) / (2.0 * self.chunks_per_period[sources])
        # Equal times (equal rational numbers) go to the lower source index.
        self.table = sources[np.lexsort((sources, times))].astype(np.int32)  # [PERIOD]
        self._before = np.zeros([PERIOD + 1, len(weights)], np.int64)  # chunks before j
        np.add.at(self._before, (np.arange(1, PERIOD + 1), self.table), 1)
        self._before = np.cumsum(self._before, axis=0)

    @property
    def num_sources(self):
        """The number of sources."""
        return len(self.chunks_per_period)

    def source_of(self, indices):
        """The source of each of the mixture's example `indices` (ints or an int64 tensor)."""
        chunks = indices // self.chunk_size
        if isinstance(indices, tf.Tensor):
            return tf.gather(tf.constant(self.table, tf.int64), chunks % PERIOD)
        return self.table[np.asarray(chunks) % PERIOD]

    def _examples_before(self, index):
        """`[K]`: each source's examples among the mixture's first `index`."""
        chunk, within = divmod(int(index), self.chunk_size)
        periods, rest = divmod(chunk, PERIOD)
        counts = (periods * self.chunks_per_period + self._before[rest]) * self.chunk_size
        counts[self.table[rest % PERIOD]] += within
        return counts

    def counts(self, start, stop):
        """`[K]` int64: each source's examples among the mixture's examples `start` to
        `stop` (excluded)."""
        return self._examples_before(stop) - self._examples_before(start)


def _apportioned(weights, total):
    """`total` split in integers by `weights` (largest remainders), each at least 1."""
    shares = weights * total
    counts = np.maximum(np.floor(shares).astype(np.int64), 1)
    while counts.sum() < total:
        counts[np.argmax(shares - counts)] += 1
    while counts.sum() > total:
        counts[np.argmax(np.where(counts > 1, counts - shares, -np.inf))] -= 1
    return counts


def source_seed(seed, source):
    """The int seed of source `source`'s stream in a mixture streamed with `seed`."""
    return zlib.crc32(f"mixture source {source} of seed {seed}".encode())


def schedule_of(mixture):
    """The `MixtureSchedule` of a `CorpusMixture`."""
    return MixtureSchedule(mixture.weights, mixture.chunk_size)


def mixture_examples(
    mixture, window_examples, *, seed, window_size, start=None, epochs=None, window_order=None
):
    """The stream of a mixture's examples, one by one, from `start` on (see
    `lmpipe.datasets.examples.stream.stream_examples`, which calls it for a mixture).

    `start` is a `MixturePosition` (None: the beginning); `epochs`: passes over each source,
    the mixture ending where the schedule turns to a source that has ended (None: endless).
    Each example's `stream_position` is int64 `[1 + K, 3]` (see `MixturePosition`).
    """
    if not isinstance(mixture, CorpusMixture):
        raise ValueError(f"`mixture` must be a CorpusMixture, got {mixture!r}.")
    schedule = schedule_of(mixture)
    count = schedule.num_sources
    if start is None:
        start = MixturePosition(0, (StreamPosition(),) * count)
    if not isinstance(start, MixturePosition):
        raise ValueError(f"`start` must be a MixturePosition or None, got {start!r}.")
    start = start.settled(schedule)
    if len(start.sources) != count:
        raise ValueError(
            f"`start` has {len(start.sources)} sources and the mixture {count}: it is another "
            "mixture's position."
        )
    chunk = schedule.chunk_size
    first_chunk, within = divmod(start.index, chunk)
    first_source = int(schedule.source_of(start.index))
    sources = []
    for k, (corpus, position) in enumerate(zip(mixture.sources, start.sources, strict=True)):
        examples = corpus_examples(
            corpus,
            window_examples,
            seed=source_seed(seed, k),
            window_size=window_size,
            start=position,
            epochs=epochs,
            window_order=window_order,
        )
        if k == first_source and within:
            # The chunk `start` is in has `chunk - within` of this source's examples left:
            # they are a first, shorter batch (their windows are read twice, once).
            left = chunk - within
            sources.append(
                examples.take(left).batch(left).concatenate(examples.skip(left).batch(chunk))
            )
        else:
            sources.append(examples.batch(chunk))
    # Whole chunks go through tf.data's choice and the position scan: per chunk, not per
    # example, their work is a small share of the examples'.
    choices = tf.data.Dataset.range(first_chunk, tf.int64.max).map(
        lambda j: schedule.source_of(j * chunk)
    )
    mixed = tf.data.Dataset.zip(
        tf.data.Dataset.choose_from_datasets(sources, choices, stop_on_empty_dataset=True),
        choices,
    )
    rows = tf.constant([position.as_list() for position in start.sources], tf.int64)

    def positioned(state, element):
        index, rows = state  # the chunk's first example; each source's next, [K, 3]
        examples, source = element
        own = examples[STREAM_POSITION]  # [n, 3]
        count = tf.shape(own, out_type=tf.int64)[0]
        indices = index + tf.range(count)
        first_rows = tf.stack([indices, tf.zeros_like(indices), tf.zeros_like(indices)], axis=1)
        others = tf.tile(rows[None], [count, 1, 1])  # [n, K, 3]
        mine = tf.one_hot(source, tf.shape(rows)[0], on_value=True, off_value=False)
        positions = tf.where(mine[None, :, None], own[:, None, :], others)
        examples = dict(examples)
        examples[STREAM_POSITION] = tf.concat([first_rows[:, None], positions], axis=1)
        # The source's next example: one after the chunk's last.
        following = tf.tensor_scatter_nd_update(rows, source[None, None], own[-1:] + [[0, 0, 1]])
        return (index + count, following), examples  # [n, 1 + K, 3]

    return mixed.scan((tf.constant(start.index, tf.int64), rows), positioned).unbatch()


def realized_shares(mixture, start, stop):
    """`[(name, share, weight)]`: each source's share of the mixture's examples `start` to
    `stop` (from the schedule), and its weight."""
    counts = schedule_of(mixture).counts(start, stop)
    total = max(int(counts.sum()), 1)
    return [
        (name, int(n) / total, weight)
        for name, n, weight in zip(mixture.names, counts, mixture.weights, strict=True)
    ]


def describe_shares(mixture, start, stop):
    """Lines saying each source's share of the mixture's examples `start` to `stop`, as
    "wiki.txt 70.1% (weight 70.0%)"."""
    return "\n".join(
        f"{name} {share:.1%} (weight {weight:.1%})"
        for name, share, weight in realized_shares(mixture, start, stop)
    )
