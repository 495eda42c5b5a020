"""Where an example is in the seekable stream (see `lmpipe.datasets.examples.stream`): a
`StreamPosition` in the stream of one corpus, a `MixturePosition` in a mixture's."""

import dataclasses

import tensorflow as tf

from lmpipe.arguments import check_number
from lmpipe.contract import STREAM_POSITION


def _last_position(batch):
    """The `stream_position` of a batch's last example."""
    features = batch[0] if isinstance(batch, tuple) else batch
    if not isinstance(features, dict) or STREAM_POSITION not in features:
        raise ValueError(
            f"`batch` holds no `{STREAM_POSITION}`: give a batch of a pretraining "
            "pipeline's `dataset` (its features, or `(features, labels)`)."
        )
    return features[STREAM_POSITION][-1]


@dataclasses.dataclass(frozen=True)
class StreamPosition:
    """Where an example is in the stream: `offset` examples into window `window` of epoch
    `epoch`. An offset past the window's last example continues into the windows after it, so
    `StreamPosition(e, w, o).advanced(n)` is always the example `n` further on.

    Example:

    >>> StreamPosition(2, 7, 30).advanced(32)
    StreamPosition(epoch=2, window=7, offset=62)
    """

    epoch: int = 0
    window: int = 0
    offset: int = 0

    def __post_init__(self):
        for field in dataclasses.fields(self):
            check_number(field.name, getattr(self, field.name), minimum=0, integer=True)

    def advanced(self, examples):
        """The position `examples` examples further on."""
        return dataclasses.replace(self, offset=self.offset + int(examples))

    @classmethod
    def of(cls, values):
        """The position held in a `stream_position` row (a `[3]` tensor, array or list)."""
        epoch, window, offset = (int(value) for value in tf.reshape(values, [3]).numpy())
        return cls(epoch, window, offset)

    @classmethod
    def after(cls, batch):
        """The position of the example after a batch's last: where to start the stream again
        to continue after it (in a loop of one input pipeline).

        Args:
            batch: a batch of the stream: `(features, labels)` or the features, whose
                `stream_position` is int64 `[B, 3]`.
        """
        return cls.of(_last_position(batch)).advanced(1)

    def as_list(self):
        """`[epoch, window, offset]`, for JSON."""
        return [self.epoch, self.window, self.offset]


@dataclasses.dataclass(frozen=True)
class MixturePosition:
    """Where an example is in the stream of a `CorpusMixture`: the mixture's example `index`,
    and `sources`, the `StreamPosition` of the example each source emits next from there.

    An example's `stream_position` is int64 `[1 + K, 3]` for `K` sources: row 0 `(index, 0,
    0)`, row `1 + k` source `k`'s next example (for the example's own source: itself).

    Which source the examples after `index` come from is the mixture's schedule (see
    `lmpipe.datasets.examples.mixture`): `advanced(n, schedule)` moves each source on by its
    examples among the `n`. Without the schedule (a position read back from a checkpoint),
    `advanced(n)` moves `index` alone and keeps `behind` = `n` examples to settle: the
    mixture's stream settles them when it starts there (the schedule of those `n` examples
    only, no source example rebuilt).

    Example:

    >>> MixturePosition(10, (StreamPosition(0, 1, 2), StreamPosition(0, 0, 5))).advanced(4)
    MixturePosition(index=14, sources=(StreamPosition(epoch=0, window=1, offset=2), \
StreamPosition(epoch=0, window=0, offset=5)), behind=4)
    """

    index: int = 0
    sources: tuple = ()
    behind: int = 0

    def __post_init__(self):
        check_number("index", self.index, minimum=0, integer=True)
        check_number("behind", self.behind, minimum=0, maximum=self.index, integer=True)
        sources = tuple(self.sources)
        if not sources or not all(isinstance(source, StreamPosition) for source in sources):
            raise ValueError(
                f"`sources` must be one StreamPosition per source, got {self.sources!r}."
            )
        object.__setattr__(self, "sources", sources)

    def advanced(self, examples, schedule=None):
        """The position `examples` examples further on; with the mixture's `schedule` (an
        object with `counts(start, stop)`: each source's examples among the mixture's
        `start` to `stop`), its sources' positions too (see the class docstring)."""
        moved = dataclasses.replace(
            self, index=self.index + int(examples), behind=self.behind + int(examples)
        )
        return moved if schedule is None else moved.settled(schedule)

    def settled(self, schedule):
        """This position with no example `behind`: each source moved on by its examples among
        those (`schedule`: see `advanced`)."""
        if not self.behind:
            return self
        counts = schedule.counts(self.index - self.behind, self.index)
        if len(counts) != len(self.sources):
            raise ValueError(
                f"The position has {len(self.sources)} sources and the mixture "
                f"{len(counts)}: it is another mixture's."
            )
        sources = tuple(
            source.advanced(count) for source, count in zip(self.sources, counts, strict=True)
        )
        return MixturePosition(self.index, sources)

    @classmethod
    def of(cls, values):
        """The position held in a `stream_position` value (`[1 + K, 3]`, or flat: `3 + 3K`
        values, then padded with -1 rows that are left out)."""
        rows = tf.reshape(tf.cast(values, tf.int64), [-1, 3]).numpy().tolist()
        rows = [row for row in rows if row != [-1, -1, -1]]
        if len(rows) < 2 or rows[0][1:] != [0, 0]:
            raise ValueError(f"{values!r} is no mixture's `{STREAM_POSITION}`.")
        return cls(rows[0][0], tuple(StreamPosition(*row) for row in rows[1:]))

    @classmethod
    def after(cls, batch, schedule=None):
        """The position of the example after a batch's last (see `StreamPosition.after`)."""
        return cls.of(_last_position(batch)).advanced(1, schedule)

    def as_list(self):
        """`[[index, 0, 0], [epoch, window, offset] per source]` (the rows of the example's
        `stream_position`), for JSON; a position `behind` cannot be written so."""
        if self.behind:
            raise ValueError(
                f"{self!r} has examples `behind`: settle it with the mixture's schedule first."
            )
        return [[self.index, 0, 0], *(source.as_list() for source in self.sources)]
