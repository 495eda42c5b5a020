"""A window's examples grouped by length bucket (BERT's length buckets on the stream)."""

import numpy as np
import tensorflow as tf

from lmpipe.datasets.examples.length_groups import bucket_lengths, length_grouped_order


def test_the_grouped_order_is_the_windows_order_with_each_bucket_together():
    buckets = bucket_lengths(64)  # 16, 24, 32, 48, 64
    lengths = tf.constant(np.random.default_rng(0).integers(3, 65, size=200), tf.int32)
    order = tf.random.experimental.stateless_shuffle(tf.range(200, dtype=tf.int64), [1, 2])
    key = tf.constant([5, 6], tf.int64)
    grouped = length_grouped_order(lengths, order, key, buckets).numpy()
    assert sorted(grouped.tolist()) == list(range(200))
    bucket = np.searchsorted(buckets, lengths.numpy()[grouped])
    # Each bucket's examples are consecutive, and in the order they had in `order`.
    changes = np.flatnonzero(np.diff(bucket))
    assert len(changes) == len(set(bucket.tolist())) - 1
    rank = {value: place for place, value in enumerate(order.numpy().tolist())}
    for b in set(bucket.tolist()):
        places = [rank[value] for value in grouped[bucket == b]]
        assert places == sorted(places)
    # The buckets' order is keyed: the same key the same order, another key another.
    again = length_grouped_order(lengths, order, key, buckets).numpy()
    np.testing.assert_array_equal(again, grouped)
    others = {
        tuple(
            dict.fromkeys(
                np.searchsorted(
                    buckets,
                    lengths.numpy()[length_grouped_order(lengths, order, key + k, buckets)],
                ).tolist()
            )
        )
        for k in range(1, 6)
    }
    assert len(others) > 1
