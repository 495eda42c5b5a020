"""The order in which the seekable stream reads a corpus's documents, epoch by epoch, in
windows of documents that can be read from any window on, without reading what comes before.

An epoch reads every document once:
- an in-memory corpus in a keyed permutation of its document ids (TensorFlow's bijective
  `index_shuffle`, keyed by the seed and the epoch): the id of the document at rank `r` is
  computed for that rank alone, so starting at any rank costs nothing;
- a corpus of files in a keyed permutation of its files (the same keys), each file's documents
  in their order: starting at a rank reads the files before it not at all, and the documents
  before it in its own file as lines only (no tokenizing), since a text file cannot be entered
  in the middle of a document. The documents per file come from the corpus's validation pass
  (or the tokenized corpus's description).

The epoch's ranks are cut into windows of `window_size` consecutive documents (the last one
shorter): window `w` of epoch `e` holds ranks `[w G, (w + 1) G)`. A window is the unit the
examples are made from (see `lmpipe.datasets.examples.stream`), so `(epoch, window)` is all it
takes to restart the document order anywhere.
"""

import tensorflow as tf

from lmpipe.arguments import check_number, check_positive_int
from lmpipe.datasets.corpora.shuffling import graph_code, key_of


def _as_int64(value):
    return tf.cast(value, tf.int64)


def document_ranks(num_documents, seed, epoch, ranks):
    """The document ids at `ranks` of epoch `epoch`'s keyed permutation of `num_documents`
    in-memory documents (int64, the shape of `ranks`)."""
    key = key_of(seed, "documents", epoch)
    return tf.random.experimental.index_shuffle(
        _as_int64(ranks), key, tf.constant(num_documents - 1, tf.int64)
    )


def file_order(num_files, seed, epoch):
    """Epoch `epoch`'s order of the corpus's files, int64 `[num_files]`."""
    return tf.random.experimental.stateless_shuffle(
        tf.range(num_files, dtype=tf.int64), seed=key_of(seed, "files", epoch)
    )


def windows_per_epoch(num_documents, window_size):
    """Windows of `window_size` documents in an epoch of `num_documents`."""
    return -(-num_documents // window_size)


def document_windows(corpus, *, seed, window_size, epoch=0, window=0, epochs=None):
    """The corpus's documents in the stream's order, in windows, from window `window` of epoch
    `epoch` on.

    Args:
        corpus: a `TextCorpus` or `TokenizedCorpus`.
        seed: the int seed of the orders.
        window_size: documents per window (the last window of an epoch may hold fewer).
        epoch, window: where to start.
        epochs: the epoch to stop before (an int), or None to go on forever.

    Returns:
        A `tf.data.Dataset` of `(epoch, window, documents)`: int64 scalars and the window's
        documents as a RaggedTensor, `[G, (sentences)]` strings (a `TextCorpus`) or
        `[G, (sentences), (tokens)]` int32 ids (a `TokenizedCorpus`).
    """
    check_positive_int("window_size", window_size)
    check_number("epoch", epoch, minimum=0, integer=True)
    check_number("window", window, minimum=0, integer=True)
    check_number("epochs", epochs, minimum=1, integer=True, none=True)
    num_documents = len(corpus)
    if num_documents == 0:
        raise ValueError(f"{corpus!r} has no document to read.")
    per_epoch = windows_per_epoch(num_documents, window_size)
    if window >= per_epoch:
        raise ValueError(
            f"`window`={window} is past the last window of an epoch ({per_epoch} windows of "
            f"{window_size} documents in {num_documents:,} documents)."
        )
    first_epoch, first_window = epoch, window
    if epochs is None:
        epoch_numbers = tf.data.Dataset.counter(first_epoch)
    else:
        epoch_numbers = tf.data.Dataset.range(first_epoch, max(epochs, first_epoch))
    if corpus.files:
        read_epoch = _file_epoch(corpus, seed, window_size, first_epoch, first_window)
    else:
        read_epoch = _memory_epoch(corpus, seed, window_size, first_epoch, first_window)
    return epoch_numbers.flat_map(graph_code(read_epoch))


def _start_window(epoch, first_epoch, first_window):
    return tf.where(epoch == first_epoch, tf.constant(first_window, tf.int64), 0)


def _memory_epoch(corpus, seed, window_size, first_epoch, first_window):
    documents = corpus.document_tensor()  # [D, (sentences), ...]
    num_documents = len(corpus)
    per_epoch = windows_per_epoch(num_documents, window_size)

    def read_epoch(epoch):
        def read_window(window):
            ranks = tf.range(
                window * window_size, tf.minimum((window + 1) * window_size, num_documents)
            )
            ids = document_ranks(num_documents, seed, epoch, ranks)
            return epoch, window, tf.gather(documents, ids)

        start = _start_window(epoch, first_epoch, first_window)
        windows = tf.data.Dataset.range(start, per_epoch)
        return windows.map(graph_code(read_window), num_parallel_calls=tf.data.AUTOTUNE)

    return read_epoch


def _file_epoch(corpus, seed, window_size, first_epoch, first_window):
    paths = tf.constant(list(corpus.files), tf.string)
    counts = tf.constant(corpus.file_document_counts(), tf.int64)
    num_files = len(corpus.files)

    def read_epoch(epoch):
        start = _start_window(epoch, first_epoch, first_window)
        first_rank = start * window_size
        order = file_order(num_files, seed, epoch)
        ends = tf.cumsum(tf.gather(counts, order))  # [F], rank after each file
        file_index = tf.searchsorted(ends, first_rank[None], side="right")[0]
        skipped = first_rank - (ends[file_index] - tf.gather(counts, order[file_index]))
        first = corpus.file_documents(paths[order[file_index]]).skip(skipped)
        rest = tf.data.Dataset.from_tensor_slices(tf.gather(paths, order[file_index + 1 :]))
        documents = first.concatenate(rest.flat_map(corpus.file_documents))
        windows = documents.ragged_batch(window_size).enumerate(start)
        return windows.map(lambda window, batch: (epoch, window, batch))

    return read_epoch
