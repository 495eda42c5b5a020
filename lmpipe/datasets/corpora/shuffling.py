"""Shuffling that depends on the pipeline's seed alone, never on TensorFlow's global seed.

`tf.data.Dataset.shuffle(seed=s)` mixes `s` with the global seed of `tf.random.set_seed`, so
the same pipeline seed gives other batches once anything (Keras' `set_random_seed`, a test, a
user) sets the global seed. The shuffles here draw from stateless ops keyed by the seed and by
the epoch or window index, so the same seed gives the same order in any process.
"""

import zlib

import tensorflow as tf

from lmpipe.arguments import check_positive_int


def graph_code(function):
    """`function` for a tf.data `map`/`flat_map`, traced as written, without AutoGraph: the
    example builders' functions use no Python control flow on tensors, and AutoGraph's
    rewriting of their source is most of the time to a process's first dataset (2 of the 4
    seconds of BERT's pair-and-mask pipeline on this corpus, measured)."""
    return tf.autograph.experimental.do_not_convert(function)


def _key(seed, *indices):
    """A `[2]` int64 stateless key from an int (or `[2]` tensor) seed and integer indices."""
    if isinstance(seed, int) and not isinstance(seed, bool):
        key = tf.constant([seed, 0], tf.int64)
    else:
        key = tf.cast(seed, tf.int64)
    for index in indices:
        key = tf.random.experimental.stateless_fold_in(key, tf.cast(index, tf.int64))
    return key


def key_of(seed, *parts):
    """A `[2]` int64 stateless key from an int seed (or a `[2]` key) and `parts`: ints or int
    tensors, and strings that name what the key is for (each folded in as its CRC-32), so that
    keys for different purposes never coincide.

    >>> bool(tf.reduce_all(key_of(3, "mask", 1) == key_of(3, "mask", 1)))
    True
    """
    indices = [zlib.crc32(part.encode()) if isinstance(part, str) else part for part in parts]
    return _key(seed, *indices)


def shuffled(values, seed, *indices):
    """`values` permuted along axis 0 by a permutation keyed by `seed` and `indices`.

    >>> shuffled(tf.range(5), 7, 0).numpy().tolist() == shuffled(tf.range(5), 7, 0).numpy().tolist()
    True
    """
    return tf.random.experimental.stateless_shuffle(values, seed=_key(seed, *indices))


def window_shuffle(dataset, window_size, seed):
    """Shuffle `dataset` within consecutive windows of `window_size` elements.

    Each window is permuted by a stateless permutation keyed by `seed` and the window's index,
    so an element moves at most `window_size - 1` places, and the result depends on nothing
    but `seed` and the input order. The last window may be shorter. Elements must be tensors
    (or nests of tensors) of one static shape each, as `batch` requires.

    Args:
        dataset: a `tf.data.Dataset`.
        window_size: elements shuffled together (a positive int).
        seed: an int, or an int `[2]` tensor (for instance a key already folded with the epoch).

    Returns:
        The shuffled dataset.

    >>> ds = window_shuffle(tf.data.Dataset.range(6), 3, seed=1)
    >>> values = [int(x) for x in ds]
    >>> sorted(values[:3]), sorted(values[3:])
    ([0, 1, 2], [3, 4, 5])
    """
    check_positive_int("window_size", window_size)
    if window_size == 1:
        return dataset

    element_spec = dataset.element_spec

    def permute(index, window):
        size = tf.shape(tf.nest.flatten(window)[0], out_type=tf.int64)[0]
        order = shuffled(tf.range(size), seed, index)
        return tf.data.Dataset.from_tensor_slices(
            tf.nest.map_structure(lambda x: tf.gather(x, order), window)
        )

    def restore(value, spec):
        # Slices of a ragged window come back ragged; give back dense elements where the
        # input had them.
        if isinstance(value, tf.RaggedTensor) and isinstance(spec, tf.TensorSpec):
            return value.to_tensor()
        return value

    def as_input_spec(*element):
        element = element[0] if len(element) == 1 else element
        return tf.nest.map_structure(restore, element, element_spec)

    windows = dataset.ragged_batch(window_size).enumerate().flat_map(permute)
    return windows.map(as_input_spec)


def by_epoch(make_epoch, epochs=None):
    """`make_epoch(epoch)` for epoch 0, 1, ... concatenated: `epochs` passes, or forever if None.

    `epoch` is a scalar int64 tensor; fold it into the seeds of the epoch's shuffles so every
    epoch has its own order.

    >>> ds = by_epoch(lambda epoch: tf.data.Dataset.range(2).map(lambda x: x + 10 * epoch), 2)
    >>> [int(x) for x in ds]
    [0, 1, 10, 11]
    """
    check_positive_int("epochs", epochs, none=True)
    epoch_numbers = tf.data.Dataset.counter() if epochs is None else tf.data.Dataset.range(epochs)
    return epoch_numbers.flat_map(graph_code(make_epoch))


def epoch_documents(corpus, input_context, seed, shuffle_key=None):
    """`epoch -> the corpus's documents for that epoch`, for `by_epoch`.

    A corpus of files reads them in the epoch's order (`corpus.documents(shuffle_files=True,
    seed=seed, epoch=epoch)`). An in-memory corpus's documents are the same every epoch: their
    dataset is made once, here, rather than rebuilt from the corpus's tensors inside the
    per-epoch function at every epoch (most of the time to the first batch on the bundled
    corpus); with a `shuffle_key` (a `[2]` key) all its documents are shuffled every epoch,
    keyed by `shuffle_key` and the epoch.
    """
    if corpus.files:
        return lambda epoch: corpus.documents(
            input_context=input_context, shuffle_files=True, seed=seed, epoch=epoch
        )
    documents = corpus.documents(input_context=input_context)
    if shuffle_key is None:
        return lambda epoch: documents
    num_pipelines = 1 if input_context is None else input_context.num_input_pipelines
    window = max(len(corpus) // num_pipelines, 1)

    def shuffle(epoch):
        return window_shuffle(documents, window, _key(shuffle_key, epoch))

    return shuffle
