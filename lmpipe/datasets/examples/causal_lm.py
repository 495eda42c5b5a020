"""Raw documents to causal (next-token) language-model batches, online in tf.data.

documents -> groups of documents -> WordPiece (one call per group) -> one token stream per
group -> fixed-length windows -> window shuffle -> batch -> `(features, labels)`.

Document boundaries: every document is followed by `[SEP]`, and each group's stream also
starts with one, so every document is read after a `[SEP]` and the model learns to end a
document with `[SEP]` (GPT-2's `<|endoftext|>`). A prompt for generation should therefore
start with `[SEP]`, and `[SEP]` is the natural end-of-text id. Windows do not reset at a
boundary: a window may hold the end of one document and the start of the next (as GPT-2).

Targets: window `i` of a stream `x` holds `x[i S : (i + 1) S]`; `next_ids[t]` is the token
after position `t` in the stream, so the last position of a full window predicts the first
token of the following window. A group's last window is padded; `weights` is 0 on padding and
at the stream's last token, which has no next token. With `bidirectional=True` (ELMo's
backward LM) the labels also hold `previous_ids[t]`, the token before position `t` in the
stream, with `previous_weights` 0 on padding and at the stream's first token.

Randomness: only the order: the files' (a permutation per epoch) and the windows', shuffled
within windows of `shuffle_window` examples by `lmpipe.datasets.corpora.shuffling.window_shuffle`,
keyed by `seed`, the input pipeline and the epoch: the same seed gives the same batches in
any process, whatever TensorFlow's global seed, each epoch has its own order and each input
pipeline reads its own shard.
"""

import tensorflow as tf

from lmpipe.arguments import check_number, check_positive_int, check_seed
from lmpipe.contract import (
    NEXT_IDS,
    PADDING_MASK,
    PREVIOUS_IDS,
    PREVIOUS_WEIGHTS,
    TOKEN_IDS,
    WEIGHTS,
    feature_names,
    label_names,
    min_seq_len,
)
from lmpipe.datasets.corpora.sharding import pipeline_position
from lmpipe.datasets.corpora.shuffling import by_epoch, epoch_documents, graph_code, window_shuffle

FEATURES = feature_names("gpt")
LABELS = label_names("gpt")
BACKWARD_LABELS = (PREVIOUS_IDS, PREVIOUS_WEIGHTS)


def check_causal_sequence_length(seq_len):
    """Raise unless `seq_len` is an int of at least 2 (one token and the one it predicts)."""
    check_number("seq_len", seq_len, minimum=min_seq_len("gpt"), integer=True)


def token_stream(tokenizer, documents):
    """One int32 stream `[N]` for a group of documents: `[SEP] doc_1 [SEP] doc_2 [SEP] ...`.

    Args:
        tokenizer: a `WordPieceTokenizer` (for its `[SEP]` id, and to tokenize strings).
        documents: `[G, (sentences)]` strings, or already tokenized `[G, (sentences),
            (tokens)]` int ids (a `TokenizedCorpus`).

    Returns:
        int32 `[N]`.
    """
    tokens = documents if documents.dtype != tf.string else tokenizer.tokenize_documents(documents)
    tokens = tf.cast(tokens.merge_dims(1, 2), tf.int32)  # [G, (tokens)]
    separators = tf.fill([tokens.nrows(), 1], tf.constant(tokenizer.sep_id, tf.int32))
    ended = tf.concat([tokens, separators], axis=1)  # each document followed by [SEP]
    return tf.concat([[tokenizer.sep_id], ended.flat_values], axis=0)


def stream_windows(stream, seq_len, pad_id, bidirectional=False):
    """Cut a token stream `[N]` into windows of `seq_len` with their next (and previous) ids.

    Returns:
        A dict of `[W, seq_len]` tensors, `W = ceil((N - 1) / seq_len)` windows (each with at
        least one prediction): `token_ids`, `padding_mask` (int32, 1 = real token),
        `next_ids` (int32) and `weights` (float32, 1 = a real next token), and with
        `bidirectional` `previous_ids` and `previous_weights`.
    """
    length = tf.shape(stream)[0]
    num_windows = tf.maximum((length - 1 + seq_len - 1) // seq_len, 0)
    size = num_windows * seq_len
    padded = tf.concat([stream, tf.fill([size + 1 - length], tf.constant(pad_id, tf.int32))], 0)
    positions = tf.reshape(tf.range(size), [num_windows, seq_len])  # index in the stream
    windows = {
        TOKEN_IDS: tf.reshape(padded[:size], [num_windows, seq_len]),
        PADDING_MASK: tf.cast(positions < length, tf.int32),
        NEXT_IDS: tf.reshape(padded[1 : size + 1], [num_windows, seq_len]),
        WEIGHTS: tf.cast(positions + 1 < length, tf.float32),
    }
    if bidirectional:
        shifted = tf.concat([[pad_id], padded[:size]], axis=0)
        windows[PREVIOUS_IDS] = tf.reshape(shifted[:size], [num_windows, seq_len])
        windows[PREVIOUS_WEIGHTS] = tf.cast((positions >= 1) & (positions < length), tf.float32)
    return windows


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
    group_size=64,
    shuffle_window=1024,
    drop_remainder=True,
):
    """A `tf.data.Dataset` of causal language-model batches `(features, labels)`.

    See the module docstring for the document boundaries (`[SEP]`) and the targets.

    Args:
        corpus: a `TextCorpus`, or a `TokenizedCorpus` (already tokenized).
        tokenizer: a `WordPieceTokenizer`.
        seq_len: tokens per example (at least 2).
        batch_size: examples per batch (per input pipeline).
        seed: int seed of the shuffle.
        input_context: a `tf.distribute.InputContext`: which shard to read.
        epochs: passes over the corpus; None repeats forever. Every pass has its own order.
        bidirectional: also give the backward LM's labels `previous_ids`, `previous_weights`.
        group_size: documents tokenized together and joined into one stream; the last window
            of each stream is padded.
        shuffle_window: examples shuffled together (1 keeps the corpus order).
        drop_remainder: drop a last incomplete batch (static shapes for distribution).

    Returns:
        A dataset of `(features, labels)`: features `token_ids`, `padding_mask` int32
        `[B, seq_len]`; labels `next_ids` int32 and `weights` float32 `[B, seq_len]`, plus
        `previous_ids` int32 and `previous_weights` float32 with `bidirectional=True`.

    Example:

    >>> from lmpipe.datasets.corpora.corpus import TextCorpus
    >>> from lmpipe.tokenizers.wordpiece import WordPieceTokenizer
    >>> corpus = TextCorpus.from_documents([["to be or not to be"], ["that is the question"]])
    >>> tokenizer = WordPieceTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
    ...     "to", "be", "or", "not", "that", "is", "the", "question"])
    >>> batches = causal_lm_examples(corpus, tokenizer, seq_len=5, batch_size=3, seed=0,
    ...     epochs=1, shuffle_window=1)
    >>> features, labels = next(iter(batches))
    >>> features["token_ids"].numpy().tolist()
    [[3, 5, 6, 7, 8], [5, 6, 3, 9, 10], [11, 12, 3, 0, 0]]
    >>> labels["next_ids"].numpy().tolist()
    [[5, 6, 7, 8, 5], [6, 3, 9, 10, 11], [12, 3, 0, 0, 0]]
    >>> labels["weights"].numpy()[2].tolist(), features["padding_mask"].numpy()[2].tolist()
    ([1.0, 1.0, 0.0, 0.0, 0.0], [1, 1, 1, 0, 0])
    """
    check_causal_sequence_length(seq_len)
    check_positive_int("batch_size", batch_size)
    check_positive_int("group_size", group_size)
    check_positive_int("shuffle_window", shuffle_window)
    check_seed(seed)
    _, pipeline_id = pipeline_position(input_context)
    if hasattr(corpus, "check_tokenizer"):
        corpus.check_tokenizer(tokenizer)
    pipeline_seed = tf.random.experimental.stateless_fold_in(
        tf.constant([seed, 0], tf.int64), pipeline_id
    )
    pad_id = tokenizer.pad_id

    def windows(documents):
        stream = token_stream(tokenizer, documents)
        return tf.data.Dataset.from_tensor_slices(
            stream_windows(stream, seq_len, pad_id, bidirectional)
        )

    documents_of_epoch = epoch_documents(corpus, input_context, seed)

    def make_epoch(epoch):
        # Files in a new order every epoch, then windows shuffled with a key per epoch.
        documents = documents_of_epoch(epoch)
        examples = documents.ragged_batch(group_size).flat_map(graph_code(windows))
        epoch_seed = tf.random.experimental.stateless_fold_in(pipeline_seed, epoch)
        return window_shuffle(examples, shuffle_window, epoch_seed)

    label_names = LABELS + (BACKWARD_LABELS if bidirectional else ())

    def split(example):
        return (
            {name: example[name] for name in FEATURES},
            {name: example[name] for name in label_names},
        )

    batches = by_epoch(make_epoch, epochs).batch(batch_size, drop_remainder=drop_remainder)
    return batches.map(graph_code(split), num_parallel_calls=tf.data.AUTOTUNE).prefetch(
        tf.data.AUTOTUNE
    )
