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
from lmpipe.datasets.labelled.length_buckets import bucket_lengths, cut_to_bucket

__all__ = ["bucket_lengths", "cut_to_bucket", "length_grouped_order"]


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
