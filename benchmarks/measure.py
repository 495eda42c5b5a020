"""Timing shared by the benchmarks: sequences per second of a tf.data stage, and the seconds
per call of functions timed in turns.

Each benchmark runs lmpipe and the library a user would otherwise pick on the same data in the
same process and prints the ratio. Absolute numbers depend on the (shared, noisy) machine; the
ratios are what to quote. Every measurement is the median of several repeats, taken after one
warm-up pass that traces the functions.
"""

import statistics
import time


def sequences_per_second(make_dataset, batch_size, num_batches, repeats=5):
    """Median sequences/s of iterating `num_batches` batches of `make_dataset()`."""
    dataset = make_dataset().take(num_batches)
    for _ in dataset:  # warm-up: tracing, caches
        pass
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        count = 0
        for _ in dataset:
            count += 1
        elapsed = time.perf_counter() - start
        rates.append(count * batch_size / elapsed)
    return statistics.median(rates)


def start_up_and_steady_state(make_datasets, batch_size, warmup=20, timed=200, rounds=3):
    """For each of `make_datasets` (`{name: () -> endless tf.data.Dataset}`): the seconds from
    making the dataset to its first batch (start-up: tracing, iterator creation, first batch),
    and the sequences/s of one long-lived iterator after `warmup` batches, over `timed`
    batches; the median of `rounds` rounds, the names taken in turns (rotated each round).

    Returns `{name: (start-up seconds, sequences/s)}`.
    """
    names = list(make_datasets)
    starts = {name: [] for name in names}
    rates = {name: [] for name in names}
    for round_index in range(rounds):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            begin = time.perf_counter()
            batches = iter(make_datasets[name]())
            next(batches)
            starts[name].append(time.perf_counter() - begin)
            for _ in range(warmup):
                next(batches)
            begin = time.perf_counter()
            for _ in range(timed):
                next(batches)
            rates[name].append(timed * batch_size / (time.perf_counter() - begin))
    return {
        name: (statistics.median(starts[name]), statistics.median(rates[name])) for name in names
    }


def report_start_up_and_steady_state(title, results, reference):
    """Print `results` of `start_up_and_steady_state`, each against `results[reference]`:
    steady-state sequences/s (ratio above 1: faster) and start-up seconds (ratio below 1:
    sooner)."""
    print(f"\n{title}")
    width = max(len(name) for name in results)
    start, rate = results[reference]
    for name, (seconds, sequences) in results.items():
        print(
            f"  {name:<{width}}  steady {sequences:10,.0f} sequences/s {sequences / rate:6.2f}x"
            f"   start-up {seconds:6.2f} s {seconds / start:5.2f}x"
        )


def report(title, results, reference):
    """Print `results` ({name: sequences/s}) and each one's ratio to `results[reference]`."""
    print(f"\n{title}")
    width = max(len(name) for name in results)
    for name, rate in results.items():
        ratio = rate / results[reference]
        print(f"  {name:<{width}}  {rate:12,.0f} sequences/s   {ratio:6.2f}x {reference}")


def interleaved_seconds(functions, rounds, warmup=1):
    """Seconds per call of each of `functions` (`{name: () -> anything}`), called in turns.

    Each function is first called `warmup` times (tracing, compilation, caches). Then every
    round calls each function once, the order rotated from round to round, so that load from
    other processes on a shared machine falls on all of them alike rather than on whichever
    happened to run during a busy spell. Returns `{name: [seconds of each timed call]}`.
    """
    names = list(functions)
    for name in names:
        for _ in range(warmup):
            functions[name]()
    seconds = {name: [] for name in names}
    for round_index in range(rounds):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            start = time.perf_counter()
            functions[name]()
            seconds[name].append(time.perf_counter() - start)
    return seconds


def percentile(values, fraction):
    """The `fraction` quantile of `values` (0.9: p90), linearly interpolated."""
    ordered = sorted(values)
    position = fraction * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)
