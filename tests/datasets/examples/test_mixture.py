"""A corpus mixture's seekable stream: the schedule's exact shares over any span, examples
addressed by their mixture position (a seek anywhere gives the examples of the run from the
beginning, byte for byte), and the sources' own streams."""

import numpy as np
import pytest

from lmpipe.contract import STREAM_POSITION
from lmpipe.datasets import CorpusMixture, TextCorpus
from lmpipe.datasets.corpora.corpus_mixture import DEFAULT_CHUNK_SIZE
from lmpipe.datasets.examples.corpus_stream import corpus_examples
from lmpipe.datasets.examples.mixture import (
    PERIOD,
    MixtureSchedule,
    describe_shares,
    realized_shares,
    schedule_of,
    source_seed,
)
from lmpipe.datasets.examples.stream import MixturePosition, StreamPosition, stream_examples
from tests.pipelines.stream_regression import corpus, mixture, window_examples


def _stream(data, start=None, count=80):
    examples = stream_examples(data, window_examples, seed=3, window_size=5, start=start)
    return list(examples.take(count).as_numpy_iterator())


@pytest.fixture(scope="module")
def from_the_beginning():
    return _stream(mixture(), count=160)


def test_the_schedule_takes_chunks_in_the_weights_shares():
    schedule = MixtureSchedule([0.7, 0.3], chunk_size=4)
    assert schedule.chunks_per_period.tolist() == [45875, 19661]
    assert schedule.chunks_per_period.sum() == PERIOD
    # Chunks of 4 examples, the first few sources as a divisor method orders them.
    assert schedule.source_of(np.arange(0, 40, 4)).tolist() == [0, 1, 0, 0, 1, 0, 0, 0, 1, 0]
    assert schedule.source_of(np.arange(8)).tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
    # The counts equal the examples' sources counted one by one, from anywhere.
    for start, stop in [(0, 0), (0, 1), (3, 9), (5, 4001), (4 * PERIOD - 7, 4 * PERIOD + 90)]:
        sources = schedule.source_of(np.arange(start, stop))
        expected = np.bincount(sources, minlength=2)
        assert schedule.counts(start, stop).tolist() == expected.tolist()


def test_shares_hold_within_one_percent_over_any_10000_examples():
    """The default chunks (32 examples): over 10,000 examples from anywhere each source's
    share is its weight within a percent (the divisor sequence strays by up to about two
    chunks over a span: 0.64%)."""
    eight = [0.3, 0.3, 0.2, 0.1, 0.05, 0.03, 0.01, 0.01]
    for weights in ([0.7, 0.3], [0.5, 0.25, 0.125, 0.125], [0.9, 0.05, 0.05], [1 / 3] * 3, eight):
        schedule = MixtureSchedule(weights, chunk_size=DEFAULT_CHUNK_SIZE)
        for start in [*range(0, 10**7, 77_777), *range(0, 3_000, 7)]:
            shares = schedule.counts(start, start + 10_000) / 10_000
            assert np.abs(shares - weights).max() < 0.0064, (weights, start)


def test_a_one_source_mixture_streams_its_source():
    alone = _stream(CorpusMixture([(corpus(), 1.0)]), count=30)
    source = corpus_examples(corpus(), window_examples, seed=source_seed(3, 0), window_size=5)
    for mixed, example in zip(alone, source.take(30).as_numpy_iterator(), strict=True):
        np.testing.assert_array_equal(mixed["x"], example["x"])
        np.testing.assert_array_equal(mixed[STREAM_POSITION][1], example[STREAM_POSITION])


def test_a_single_corpus_stream_keeps_its_three_value_positions():
    examples = _stream(corpus(), count=8)
    assert [e[STREAM_POSITION].tolist() for e in examples[:3]] == [[0, 0, 0], [0, 0, 1], [0, 0, 2]]


def test_each_example_comes_from_its_scheduled_source_with_its_position(from_the_beginning):
    schedule = schedule_of(mixture())
    sources = schedule.source_of(np.arange(len(from_the_beginning)))
    next_of = [StreamPosition(), StreamPosition()]
    streams = [
        list(
            corpus_examples(source, window_examples, seed=source_seed(3, k), window_size=5)
            .take(160)
            .as_numpy_iterator()
        )
        for k, source in enumerate(mixture().sources)
    ]
    used = [0, 0]
    for i, (example, source) in enumerate(zip(from_the_beginning, sources, strict=True)):
        own = streams[source][used[source]]
        used[source] += 1
        np.testing.assert_array_equal(example["x"], own["x"])
        position = example[STREAM_POSITION]
        assert position.shape == (3, 3)
        assert position[0].tolist() == [i, 0, 0]
        assert position[1 + source].tolist() == own[STREAM_POSITION].tolist()
        other = 1 - source
        assert position[1 + other].tolist() == next_of[other].as_list()
        next_of[source] = StreamPosition.of(own[STREAM_POSITION]).advanced(1)


def _epoch_end(examples, source):
    """The first example of `source`'s second epoch."""
    for i, example in enumerate(examples):
        position = example[STREAM_POSITION]
        own = int(schedule_of(mixture()).source_of(i)) == source
        if own and position[1 + source][0] == 1:
            return i
    raise AssertionError("no epoch end")


@pytest.mark.parametrize("where", [0, 1, 2, 4, 37, 64, 101, "epoch end 0", "epoch end 1"])
def test_a_seek_gives_the_examples_of_the_run_from_the_beginning(from_the_beginning, where):
    if isinstance(where, str):
        where = _epoch_end(from_the_beginning, int(where[-1])) - 1
    expected = from_the_beginning[where : where + 40]
    position = MixturePosition.of(from_the_beginning[where][STREAM_POSITION])
    assert position.index == where
    for got, example in zip(_stream(mixture(), position, 40), expected, strict=True):
        assert got.keys() == example.keys()
        for name in got:
            assert got[name].tobytes() == example[name].tobytes(), name


@pytest.mark.parametrize("where, ahead", [(0, 1), (1, 5), (10, 4), (50, 33), (100, 2)])
def test_a_seek_ahead_settles_the_sources_from_the_schedule(from_the_beginning, where, ahead):
    """A position read back and advanced (as a resume does) starts at the example `ahead`
    further on: the sources moved on by their examples among those, none rebuilt."""
    position = MixturePosition.of(from_the_beginning[where][STREAM_POSITION]).advanced(ahead)
    assert position.behind == ahead
    settled = position.settled(schedule_of(mixture()))
    assert settled.index == where + ahead
    expected = from_the_beginning[where + ahead : where + ahead + 40]
    for got, example in zip(_stream(mixture(), position, 40), expected, strict=True):
        assert got["x"].tobytes() == example["x"].tobytes()
        assert got["y"].tobytes() == example["y"].tobytes()
        source = int(schedule_of(mixture()).source_of(int(example[STREAM_POSITION][0][0])))
        row = 1 + source
        assert got[STREAM_POSITION][row].tolist() == example[STREAM_POSITION][row].tolist()
        assert got[STREAM_POSITION][0].tolist() == example[STREAM_POSITION][0].tolist()


def test_the_stream_shares_are_the_weights_and_the_same_after_a_resume():
    """10,000 examples from the beginning, then 10,000 from a mid-stream position read back
    from an example (as a resume starts): each source's share within 1% of its weight."""
    a = TextCorpus.from_documents([[f"a {i} s {j}" for j in range(4)] for i in range(40)])
    b = TextCorpus.from_documents([[f"b {i} s {j}" for j in range(3)] for i in range(30)])
    data = CorpusMixture([(a, 0.7), (b, 0.3)], names=["a.txt", "b/*.txt"])

    def shares(start):
        examples = stream_examples(data, window_examples, seed=5, window_size=8, start=start)
        positions = examples.map(lambda e: e[STREAM_POSITION]).take(10_000).batch(10_000)
        positions = next(iter(positions)).numpy()  # [10000, 3, 3]
        sources = schedule_of(data).source_of(positions[:, 0, 0])
        return positions, np.bincount(sources, minlength=2) / 10_000

    positions, first = shares(None)
    np.testing.assert_allclose(first, [0.7, 0.3], atol=0.01)
    assert [s for _, s, _ in realized_shares(data, 0, 10_000)] == first.tolist()
    resumed_at = MixturePosition.of(positions[6_543]).advanced(8)
    later_positions, later = shares(resumed_at)
    assert later_positions[0, 0, 0] == 6_551
    np.testing.assert_allclose(later, [0.7, 0.3], atol=0.01)
    assert describe_shares(data, 0, 10_000).splitlines()[0] == (
        f"a.txt {first[0]:.1%} (weight 70.0%)"
    )


def test_a_position_from_another_mixture_is_refused(from_the_beginning):
    three = MixturePosition(0, (StreamPosition(),) * 3)
    with pytest.raises(ValueError, match="`start` has 3 sources and the mixture 2"):
        _stream(mixture(), three, 1)
    with pytest.raises(ValueError, match="`start` must be a MixturePosition or None"):
        _stream(mixture(), StreamPosition(), 1)


def test_mixture_positions_read_write_and_advance():
    position = MixturePosition.of([[12, 0, 0], [1, 2, 3], [0, 4, 1]])
    assert position == MixturePosition(12, (StreamPosition(1, 2, 3), StreamPosition(0, 4, 1)))
    assert position.as_list() == [[12, 0, 0], [1, 2, 3], [0, 4, 1]]
    padded = [12, 0, 0, 1, 2, 3, 0, 4, 1] + [-1] * 18
    assert MixturePosition.of(np.array(padded)) == position
    schedule = MixtureSchedule([0.5, 0.5], chunk_size=4)  # examples 12-15: source 1, 16-19: 0
    assert schedule.source_of(np.arange(12, 20)).tolist() == [1] * 4 + [0] * 4
    assert position.advanced(6, schedule) == MixturePosition(
        18, (StreamPosition(1, 2, 5), StreamPosition(0, 4, 5))
    )
    with pytest.raises(ValueError, match="settle it with the mixture's schedule"):
        position.advanced(6).as_list()
    with pytest.raises(ValueError, match="no mixture's `stream_position`"):
        MixturePosition.of([1, 2, 3])
