"""Length buckets for BERT/ALBERT pretraining on the seekable stream: a window's examples in
groups of similar length, and each batch cut to the smallest of a few lengths that holds it.

Pretraining pairs fill `seq_len` but for the documents given a short target length
(`short_seq_prob`) and the last pair of a document: on the bundled Shakespeare corpus an
eighth of the positions of BERT's batches at `seq_len` 128 is `[PAD]` (docs/stream.md).
The stream's order is what makes such examples meet: here a window's examples, once built
(pairs and masks as without buckets), go in groups by length bucket (`bucket_lengths`), the
groups in an order keyed by the window, and each group's examples in the window's keyed
order. Batches stay consecutive examples of the stream, so every contract of the stream
holds as it is: the example at `(epoch, window, offset)` is a pure function of the seed,
the corpus and its address, a run resumes by seeking, the global batch of a step is the same
for every number of replicas. A batch is then cut (`cut_to_bucket`) to its longest
example's bucket: most batches hold one group and need its length only; a batch across two
groups (or two windows) takes the longer.

Model Garden's dynamic dataloader also keeps the tokens of a batch about constant (more
examples in shorter batches); lmpipe keeps the global batch's example count, the unit of its
addresses, of a resume and of a replica's share: a shorter batch is a cheaper step.
"""

import tensorflow as tf

from lmpipe.contract import PADDING_MASK
from lmpipe.datasets.corpora.shuffling import key_of, shuffled

# The shortest bucket; the others grow by about 1.5x, so a batch carries at most a third of
# padding beyond its longest example.
SHORTEST_BUCKET = 16


def bucket_lengths(seq_len, shortest=SHORTEST_BUCKET):
    """The lengths batches are cut to: 16, 24, 32, 48, 64, 96, 128, ... (powers of two and 1.5
    times them) below `seq_len`, and `seq_len`.

    >>> bucket_lengths(128)
    (16, 24, 32, 48, 64, 96, 128)
    >>> bucket_lengths(40)
    (16, 24, 32, 40)
    """
    lengths, power = [], shortest
    while power < seq_len:
        lengths += [length for length in (power, power * 3 // 2) if length < seq_len]
        power *= 2
    return (*lengths, seq_len)


def cut_to_bucket(batch, seq_len, lengths):
    """A packed, right-padded batch (a nest of tensors; its features hold `padding_mask`) with
    every `[B, seq_len]` tensor cut to the smallest of `lengths` that holds the batch's longest
    example: only padding is cut."""
    features = batch[0] if isinstance(batch, tuple) else batch
    longest = tf.reduce_max(tf.reduce_sum(features[PADDING_MASK], axis=1))
    lengths = tf.constant(lengths, tf.int32)
    length = lengths[tf.argmax(tf.cast(lengths >= longest, tf.int32), output_type=tf.int32)]

    def cut(value):
        if value.shape.rank is not None and value.shape.rank >= 2 and value.shape[1] == seq_len:
            return value[:, :length]
        return value

    return tf.nest.map_structure(cut, batch)


def length_grouped_order(lengths, order, key, buckets):
    """A window's examples grouped by length bucket: the stream's `window_order`.

    Args:
        lengths: int32 `[N]`, each example's tokens (its `padding_mask`'s sum).
        order: int64 `[N]`, the window's keyed random order of its examples.
        key: the window's `[2]` key: the groups' order is keyed by it.
        buckets: the ascending bucket lengths (`bucket_lengths(seq_len)`).

    Returns:
        int64 `[N]`, a permutation of `order`: the examples of each bucket together, in
        `order`'s order, the buckets in an order keyed by `key`.
    """
    buckets = tf.constant(buckets, tf.int32)
    bucket = tf.searchsorted(buckets, tf.gather(lengths, order), side="left")  # [N]
    rank = shuffled(tf.range(tf.size(buckets)), key_of(key, "length groups"), 0)
    grouped = tf.argsort(tf.gather(rank, bucket), stable=True)
    return tf.gather(order, grouped)


def window_length_groups(seq_len):
    """The stream's `window_order` for examples of `seq_len` (see `length_grouped_order`)."""
    buckets = bucket_lengths(seq_len)

    def window_order(examples, order, key):
        lengths = tf.reduce_sum(examples[PADDING_MASK], axis=1)
        return length_grouped_order(lengths, order, key, buckets)

    return window_order
