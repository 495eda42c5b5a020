"""The seekable stream of one corpus (see `lmpipe.datasets.examples.stream`): its windows'
examples, each with its `StreamPosition`."""

import tensorflow as tf

from lmpipe.arguments import check_positive_int
from lmpipe.contract import STREAM_POSITION
from lmpipe.datasets.corpora.document_order import document_windows
from lmpipe.datasets.corpora.shuffling import graph_code, key_of, shuffled
from lmpipe.datasets.examples.stream_position import StreamPosition


def window_key(seed, epoch, window):
    """The `[2]` int64 key of every random draw for window `window` of epoch `epoch`."""
    return key_of(seed, "window", epoch, window)


def corpus_examples(
    corpus, window_examples, *, seed, window_size, start=None, epochs=None, window_order=None
):
    """The stream of one corpus's examples, one by one, from `start` on: `stream_examples`
    for a `TextCorpus` or `TokenizedCorpus` (see its arguments), `start` a `StreamPosition`.
    Each example's `stream_position` is int64 `[3]`."""
    check_positive_int("window_size", window_size)
    start = StreamPosition() if start is None else start
    if not isinstance(start, StreamPosition):
        raise ValueError(f"`start` must be a StreamPosition or None, got {start!r}.")
    windows = document_windows(
        corpus,
        seed=seed,
        window_size=window_size,
        epoch=start.epoch,
        window=start.window,
        epochs=epochs,
    )
    build = graph_code(window_examples)

    def examples_of(epoch, window, documents):
        key = window_key(seed, epoch, window)
        examples = build(documents, key)
        count = tf.shape(tf.nest.flatten(examples)[0], out_type=tf.int64)[0]
        order = shuffled(tf.range(count), key, 0)
        if window_order is not None:
            order = window_order(examples, order, key)
        examples = {name: tf.gather(value, order) for name, value in examples.items()}
        examples[STREAM_POSITION] = tf.stack(
            [tf.fill([count], epoch), tf.fill([count], window), tf.range(count)], axis=1
        )
        return examples

    examples = windows.map(
        graph_code(examples_of), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
    ).unbatch()
    return examples.skip(start.offset) if start.offset else examples
