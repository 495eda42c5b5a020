"""Raw documents to causal (next-token) language-model batches, on the seekable stream.

The stream (`lmpipe.datasets.examples.stream`) reads the corpus in windows of `window_size`
documents; each window's documents are tokenized in one call, joined into one token stream,
and cut into `seq_len` rows; the stream puts the rows in a keyed order and gives each its
`stream_position`. Nothing here is random: a window's rows are a function of its documents
alone, so the row at a position is the same whichever position the stream starts from.

Document boundaries: each document is opened by `[SEP]` and the window's stream also ends
with one (`[SEP] doc_1 [SEP] doc_2 ... [SEP] doc_n [SEP]`), so every document is read after a
`[SEP]` and the model learns to end a document with `[SEP]` (GPT-2's `<|endoftext|>`). A
prompt for generation should therefore start with `[SEP]`, and `[SEP]` is the natural
end-of-text id. Rows do not reset at a boundary: a row may hold the end of one document and
the start of the next (as GPT-2), and with `document_ids=True` each row says which of its
tokens belong together: `document_ids` int32 `[S]` numbers the row's documents from 1 (the
`[SEP]` that opens a document belongs to it, the window's last `[SEP]` to its last document)
and is 0 on padding, so that GPT can attend within a document only.

Targets: row `i` of a stream `x` holds `x[i S : (i + 1) S]`; `next_ids[t]` is the token after
position `t` in the stream, so the last position of a full row predicts the first token of
the following row, and a document's last token predicts the `[SEP]` that follows it. A
window's last row is padded; `weights` is 0 on padding and at the stream's last token, which
has no next token. With `bidirectional=True` (ELMo's backward LM) the labels also hold
`previous_ids[t]`, the token before position `t` in the stream, with `previous_weights` 0 on
padding and at the stream's first token.
"""

import tensorflow as tf

from lmpipe.arguments import check_number, check_positive_int, check_seed
from lmpipe.contract import (
    DOCUMENT_IDS,
    NEXT_IDS,
    PADDING_MASK,
    PREVIOUS_IDS,
    PREVIOUS_WEIGHTS,
    STREAM_POSITION,
    TOKEN_IDS,
    WEIGHTS,
    label_names,
    min_seq_len,
)
from lmpipe.datasets.corpora.shuffling import graph_code
from lmpipe.datasets.examples.stream import DEFAULT_WINDOW_SIZE, stream_batches, stream_examples

LABELS = label_names("gpt")
BACKWARD_LABELS = (PREVIOUS_IDS, PREVIOUS_WEIGHTS)


def check_causal_sequence_length(seq_len):
    """Raise unless `seq_len` is an int of at least 2 (one token and the one it predicts)."""
    check_number("seq_len", seq_len, minimum=min_seq_len("gpt"), integer=True)


def token_stream(tokenizer, documents, with_documents=False):
    """One int32 stream `[N]` for a window of documents: `[SEP] doc_1 [SEP] doc_2 ... [SEP]`.

    Args:
        tokenizer: a `WordPieceTokenizer` (for its `[SEP]` id, and to tokenize strings).
        documents: `[G, (sentences)]` strings, or already tokenized `[G, (sentences),
            (tokens)]` int ids (a `TokenizedCorpus`).
        with_documents: also return each token's document, int32 `[N]`: `i` (from 0) for
            document `i` and the `[SEP]` that opens it, `G - 1` for the stream's last `[SEP]`.

    Returns:
        int32 `[N]`, or `(stream, documents)` with `with_documents`.
    """
    tokens = documents if documents.dtype != tf.string else tokenizer.tokenize_documents(documents)
    tokens = tf.cast(tokens.merge_dims(1, 2), tf.int32)  # [G, (tokens)]
    separator = tf.constant(tokenizer.sep_id, tf.int32)
    opened = tf.concat([tf.fill([tokens.nrows(), 1], separator), tokens], axis=1)  # [SEP] doc
    stream = tf.concat([opened.flat_values, [separator]], axis=0)
    if not with_documents:
        return stream
    owners = tf.cast(opened.value_rowids(), tf.int32)
    return stream, tf.concat([owners, [tf.cast(tokens.nrows(), tf.int32) - 1]], axis=0)


def stream_windows(stream, seq_len, pad_id, bidirectional=False, documents=None):
    """Cut a token stream `[N]` into rows of `seq_len` with their next (and previous) ids.

    Args:
        stream: int32 `[N]`.
        seq_len: tokens per row.
        pad_id: the id that pads the last row.
        bidirectional: also give `previous_ids` and `previous_weights`.
        documents: None, or each token's document, int32 `[N]` (nondecreasing, as
            `token_stream` gives them): adds `document_ids`.

    Returns:
        A dict of `[W, seq_len]` tensors, `W = ceil((N - 1) / seq_len)` rows (each with at
        least one prediction): `token_ids`, `padding_mask` (int32, 1 = real token),
        `next_ids` (int32) and `weights` (float32, 1 = a real next token); with
        `bidirectional` `previous_ids` and `previous_weights`; with `documents`
        `document_ids` (int32, the row's documents numbered from 1, 0 on padding).
    """
    length = tf.shape(stream)[0]
    num_windows = tf.maximum((length - 1 + seq_len - 1) // seq_len, 0)
    size = num_windows * seq_len
    padded = tf.concat([stream, tf.fill([size + 1 - length], tf.constant(pad_id, tf.int32))], 0)
    positions = tf.reshape(tf.range(size), [num_windows, seq_len])  # index in the stream
    real = tf.cast(positions < length, tf.int32)
    windows = {
        TOKEN_IDS: tf.reshape(padded[:size], [num_windows, seq_len]),
        PADDING_MASK: real,
        NEXT_IDS: tf.reshape(padded[1 : size + 1], [num_windows, seq_len]),
        WEIGHTS: tf.cast(positions + 1 < length, tf.float32),
    }
    if bidirectional:
        shifted = tf.concat([[pad_id], padded[:size]], axis=0)
        windows[PREVIOUS_IDS] = tf.reshape(shifted[:size], [num_windows, seq_len])
        windows[PREVIOUS_WEIGHTS] = tf.cast((positions >= 1) & (positions < length), tf.float32)
    if documents is not None:
        # Padding repeats the last document; the mask below zeroes it.
        owners = tf.gather(documents, tf.minimum(positions, length - 1))  # [W, S]
        windows[DOCUMENT_IDS] = (owners - owners[:, :1] + 1) * real
    return windows


def causal_window_examples(tokenizer, seq_len, bidirectional=False, document_ids=False):
    """The stream's `window_examples` of the causal LM: `(documents, key) -> {name: [W,
    seq_len]}`, the rows of the window's token stream (see `stream_windows`). The key is not
    used: the rows have nothing random; the stream orders them."""

    def window_examples(documents, key):
        del key
        if document_ids:
            stream, owners = token_stream(tokenizer, documents, with_documents=True)
        else:
            stream, owners = token_stream(tokenizer, documents), None
        return stream_windows(stream, seq_len, tokenizer.pad_id, bidirectional, owners)

    return window_examples


def causal_lm_examples(
    corpus,
    tokenizer,
    *,
    seq_len,
    batch_size,
    seed,
    input_context=None,
    epochs=None,
    bidirectional=False,
    document_ids=False,
    window_size=DEFAULT_WINDOW_SIZE,
    start=None,
    drop_remainder=True,
):
    """A `tf.data.Dataset` of causal language-model batches `(features, labels)`, from the
    seekable stream.

    See the module docstring for the document boundaries (`[SEP]`) and the targets, and
    `lmpipe.datasets.examples.stream` for the order, the positions and several input pipelines.

    Args:
        corpus: a `TextCorpus`, or a `TokenizedCorpus` (already tokenized).
        tokenizer: a `WordPieceTokenizer`.
        seq_len: tokens per example (at least 2).
        batch_size: examples per batch (per input pipeline: its replicas' share of a step).
        seed: int seed of the order.
        input_context: a `tf.distribute.InputContext`: which share of each global step to keep.
        epochs: passes over the corpus; None repeats forever. Every pass has its own order.
        bidirectional: also give the backward LM's labels `previous_ids`, `previous_weights`.
        document_ids: also give the feature `document_ids` (each row's documents numbered
            from 1, 0 on padding), for attention within a document.
        window_size: documents tokenized together and joined into one stream, the stream's
            window (the last row of each is padded).
        start: a `StreamPosition` to start from (None: the beginning).
        drop_remainder: drop a last incomplete batch (static shapes for distribution).

    Returns:
        A dataset of `(features, labels)`: features `token_ids`, `padding_mask` int32
        `[B, seq_len]` (and `document_ids` int32 `[B, seq_len]`), `stream_position` int64
        `[B, 3]`; labels `next_ids` int32 and `weights` float32 `[B, seq_len]`, plus
        `previous_ids` int32 and `previous_weights` float32 with `bidirectional=True`.

    Example:

    >>> from lmpipe.datasets.corpora.corpus import TextCorpus
    >>> from lmpipe.tokenizers.wordpiece import WordPieceTokenizer
    >>> corpus = TextCorpus.from_documents([["to be or not to be"], ["that is the question"]])
    >>> tokenizer = WordPieceTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
    ...     "to", "be", "or", "not", "that", "is", "the", "question"])
    >>> batches = causal_lm_examples(corpus, tokenizer, seq_len=5, batch_size=3, seed=0,
    ...     epochs=1, document_ids=True)
    >>> features, labels = next(iter(batches))
    >>> features["token_ids"].numpy().tolist()
    [[5, 6, 3, 9, 10], [11, 12, 3, 0, 0], [3, 5, 6, 7, 8]]
    >>> features["document_ids"].numpy().tolist()
    [[1, 1, 2, 2, 2], [1, 1, 1, 0, 0], [1, 1, 1, 1, 1]]
    >>> labels["next_ids"].numpy().tolist()
    [[6, 3, 9, 10, 11], [12, 3, 0, 0, 0], [5, 6, 7, 8, 5]]
    >>> features["stream_position"].numpy().tolist()  # (epoch, window, offset)
    [[0, 0, 0], [0, 0, 1], [0, 0, 2]]
    """
    check_causal_sequence_length(seq_len)
    check_positive_int("batch_size", batch_size)
    check_positive_int("window_size", window_size)
    check_seed(seed)
    check_number("epochs", epochs, minimum=1, integer=True, none=True)
    if hasattr(corpus, "check_tokenizer"):
        corpus.check_tokenizer(tokenizer)
    examples = stream_examples(
        corpus,
        causal_window_examples(tokenizer, seq_len, bidirectional, document_ids),
        seed=seed,
        window_size=window_size,
        start=start,
        epochs=epochs,
    )
    features = (TOKEN_IDS, PADDING_MASK) + ((DOCUMENT_IDS,) if document_ids else ())
    labels = LABELS + (BACKWARD_LABELS if bidirectional else ())

    def split(example):
        return (
            {name: example[name] for name in (*features, STREAM_POSITION)},
            {name: example[name] for name in labels},
        )

    batches = stream_batches(examples, batch_size, input_context, drop_remainder)
    return batches.map(graph_code(split), num_parallel_calls=tf.data.AUTOTUNE).prefetch(
        tf.data.AUTOTUNE
    )
