"""Length buckets: batches of examples of similar length, each padded to one of a few fixed
lengths rather than to `seq_len`.

Fine-tuning sets are mostly short texts packed to a `seq_len` made for the longest: a batch of
tweets or questions padded to 128 tokens spends most of the model's work on `[PAD]`. Here a
chunk of `chunk_batches` batches' worth of packed examples is sorted by length and cut into
batches, so each batch holds examples of similar length, and each batch is cut to the
smallest of the `bucket_lengths` that holds its longest example. The few fixed lengths keep
the number of shapes the model sees (and so the functions traced or compiled for it) small.

The examples of a chunk are the same examples, each once: only their grouping into batches
and the padding after their last token change. With `seed` the batches of a chunk come in a
keyed random order (training); without, shortest first (evaluation).
"""

import tensorflow as tf

from lmpipe.contract import PADDING_MASK
from lmpipe.datasets.corpora.shuffling import graph_code, key_of, shuffled
from lmpipe.datasets.examples.length_groups import bucket_lengths, cut_to_bucket

# Batches sorted together (HF Trainer's `group_by_length` sorts "megabatches" of 50): more
# gives batches of more even lengths, fewer keeps batches more random.
CHUNK_BATCHES = 50


def length_bucketed(chunks, batch_size, seq_len, drop_remainder=False, seed=None):
    """Batches of `batch_size` from `chunks`, a dataset of packed, right-padded chunks of
    examples (`(features, labels)` with `padding_mask` `[N, seq_len]`, N a multiple of
    `batch_size` but for a last chunk): each chunk sorted by length (stably), cut into batches,
    each cut to its length bucket (`cut_to_bucket`).

    Args:
        chunks: the dataset of chunks.
        batch_size: examples per batch; the last batch of a short chunk has fewer (dropped
            with `drop_remainder`).
        seq_len: the length the examples are packed to.
        drop_remainder: drop a batch of fewer than `batch_size` examples; the batches then have
            the static batch size `batch_size`.
        seed: None: each chunk's batches shortest first; an int or a `[2]` key: in an order
            keyed by it and the chunk's index (the same seed, the same batches).
    """
    lengths = bucket_lengths(seq_len)

    def batches(index, chunk):
        features = chunk[0] if isinstance(chunk, tuple) else chunk
        order = tf.argsort(tf.reduce_sum(features[PADDING_MASK], axis=1), stable=True)
        chunk = tf.nest.map_structure(lambda value: tf.gather(value, order), chunk)
        size = tf.shape(order, out_type=tf.int64)[0]
        end = size // batch_size * batch_size if drop_remainder else size
        starts = tf.range(0, end, batch_size, dtype=tf.int64)
        if seed is not None:
            starts = shuffled(starts, key_of(seed, "length buckets"), index)

        def batch(start):
            taken = tf.nest.map_structure(lambda value: value[start : start + batch_size], chunk)
            return cut_to_bucket(taken, seq_len, lengths)

        return tf.data.Dataset.from_tensor_slices(starts).map(graph_code(batch))

    dataset = chunks.enumerate().flat_map(graph_code(batches))
    if drop_remainder:
        dataset = dataset.map(graph_code(lambda *batch: _with_batch_size(batch, batch_size)))
    return dataset


def _with_batch_size(batch, batch_size):
    """`batch` (the `*args` of a map) with the static batch size `batch_size`."""
    batch = batch[0] if len(batch) == 1 else batch
    return tf.nest.map_structure(
        lambda value: tf.ensure_shape(value, [batch_size, *value.shape[1:]]), batch
    )
