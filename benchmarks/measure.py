"""Throughput measurement shared by the benchmarks: sequences per second of a tf.data stage.

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


def report(title, results, reference):
    """Print `results` ({name: sequences/s}) and each one's ratio to `results[reference]`."""
    print(f"\n{title}")
    width = max(len(name) for name in results)
    for name, rate in results.items():
        ratio = rate / results[reference]
        print(f"  {name:<{width}}  {rate:12,.0f} sequences/s   {ratio:6.2f}x {reference}")
