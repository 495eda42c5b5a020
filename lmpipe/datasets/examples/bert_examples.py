"""Raw documents to finished BERT/ALBERT pretraining batches, online in tf.data, on the
seekable stream (`lmpipe.datasets.examples.stream`).

A window of documents (the stream's unit) -> WordPiece (one call per window) -> sentence pairs
cut in the graph (`sentence_pairs.pair_spans`, the window's documents the pool of NSP's random
B) -> `[CLS] A [SEP] B [SEP]` packing -> masked-LM masking of all the window's examples at once
-> the window's examples in the stream's keyed order -> batches of consecutive examples ->
`(features, labels)`, `stream_position` among the features.

Randomness: every random choice (short target lengths, pair cuts, NSP's other document, SOP
swaps, truncation sides, masks) comes from stateless ops keyed by the window's key (the seed,
the epoch and the window), one key per purpose. A window's examples are therefore a pure
function of (seed, corpus, epoch, window): the same seed gives identical batches in any process
and for any number of input pipelines, each epoch draws new pairs and new masks, and the stream
restarts at any example without building the ones before it.
"""

import tensorflow as tf

from lmpipe.contract import (
    MASK_IDS,
    MASK_POSITIONS,
    MASK_WEIGHTS,
    NSP_LABELS,
    PADDING_MASK,
    SEGMENT_IDS,
    SOP_LABELS,
    STREAM_POSITION,
    TOKEN_IDS,
)
from lmpipe.datasets.corpora.shuffling import graph_code, key_of
from lmpipe.datasets.examples import packing
from lmpipe.datasets.examples.length_groups import (
    bucket_lengths,
    cut_to_bucket,
    window_length_groups,
)
from lmpipe.datasets.examples.packing import pack_segments
from lmpipe.datasets.examples.sentence_pairs import gather_spans, pair_spans
from lmpipe.datasets.examples.stream import DEFAULT_WINDOW_SIZE, stream_batches, stream_examples

# What the pair stage calls each objective, and the name of its label in the batch.
PAIR_MODES = {"nsp": "nsp", "sop": "sop", "mlm": "single"}
LABEL_NAMES = {"nsp": NSP_LABELS, "sop": SOP_LABELS, "mlm": None}


def special_token_count(objective):
    """Number of special tokens in an example: [CLS] A [SEP] (B [SEP])."""
    return 3 if PAIR_MODES[objective] != "single" else 2


def check_objective_sequence_length(
    seq_len, objective, max_length=None, limit="the model's positions"
):
    """Raise unless `seq_len` holds the special tokens plus one token per segment of
    `objective`, and is at most `max_length` (see `packing.check_sequence_length`)."""
    segments = 1 if PAIR_MODES[objective] == "single" else 2
    packing.check_sequence_length(seq_len, segments, max_length, limit)


def _document_fingerprints(documents):
    """An int64 fingerprint per document of `[G, (sentences)]` strings or
    `[G, (sentences), (tokens)]` ids, so that NSP never pairs a document with itself."""
    if documents.dtype != tf.string:
        documents = tf.strings.reduce_join(tf.strings.as_string(documents), axis=-1, separator=" ")
    joined = tf.strings.reduce_join(documents, axis=1, separator="\n")
    return tf.strings.to_hash_bucket_fast(joined, 2**62)


def _tokenize_group(tokenizer, documents):
    """`[G, (sentences)]` strings (or already tokenized `[G, (sentences), (tokens)]` ids) ->
    `[G', (sentences), (tokens)]` ids and fingerprints, without sentences that have no token
    and without documents left with no sentence (text of only whitespace, control or format
    characters, such as zero-width spaces, has no token)."""
    ids = _document_fingerprints(documents)
    tokens = documents if documents.dtype != tf.string else tokenizer.tokenize(documents)
    # Dropping empty rows leaves the tokens as they are and only shortens the row lengths:
    # built so, not with tf.ragged.boolean_mask (20 ops here, 500 there).
    lengths = tokens.values.row_lengths()  # [sentences] pieces
    kept = lengths > 0
    sentences = tf.math.unsorted_segment_sum(
        tf.cast(kept, lengths.dtype), tokens.value_rowids(), tokens.nrows()
    )  # [G] sentences left in each document
    keep = tf.reshape(tf.where(sentences > 0), [-1])
    tokens = tf.RaggedTensor.from_row_lengths(
        tf.RaggedTensor.from_row_lengths(
            tokens.flat_values, tf.gather(lengths, tf.reshape(tf.where(kept), [-1])), validate=False
        ),
        tf.gather(sentences, keep),
        validate=False,
    )
    return tokens, tf.gather(ids, keep)


def bert_window_examples(tokenizer, *, seq_len, objective, masker, short_seq_prob=0.1):
    """The stream's `window_examples` for BERT/ALBERT: `(documents, key) -> {name: [N, ...]}`.

    The window's documents are tokenized, cut into pairs (or single segments) with the window
    as the pool of NSP's other documents, packed, and all masked in one call of `masker`. A
    window without a token gives no example (N = 0).

    Args:
        tokenizer: a `WordPieceTokenizer` (or `SentencePieceTokenizer`).
        seq_len: length of every example, special tokens included.
        objective: "nsp", "sop" or "mlm".
        masker: a `MaskedLMMasker`.
        short_seq_prob: probability that a document gets a shorter target length.

    Returns:
        The function; its dict holds the features `token_ids`, `segment_ids`, `padding_mask`
        int32 `[N, seq_len]`, `mask_positions` int32 `[N, P]` and the labels `mask_ids` int32,
        `mask_weights` float32 `[N, P]` and `nsp_labels` or `sop_labels` int32 `[N]`.
    """
    mode = PAIR_MODES[objective]
    label_name = LABEL_NAMES[objective]
    max_num_tokens = seq_len - special_token_count(objective)

    def cut_pack_and_mask(tokens, ids, key):
        spans = pair_spans(
            tokens,
            ids,
            tf.shape(ids)[0],
            key_of(key, "pairs"),
            mode,
            max_num_tokens,
            short_seq_prob,
        )
        flat = tokens.flat_values
        segments = [gather_spans(flat, spans["a_start"], spans["a_end"])]
        if mode != "single":
            segments.append(gather_spans(flat, spans["b_start"], spans["b_end"]))
        packed = pack_segments(tokenizer, segments, seq_len)
        masked = masker(packed[TOKEN_IDS], key_of(key, "mask"))
        examples = {
            TOKEN_IDS: masked[TOKEN_IDS],
            SEGMENT_IDS: packed[SEGMENT_IDS],
            PADDING_MASK: packed[PADDING_MASK],
            MASK_POSITIONS: masked[MASK_POSITIONS],
            MASK_IDS: masked[MASK_IDS],
            MASK_WEIGHTS: masked[MASK_WEIGHTS],
        }
        if label_name is not None:
            examples[label_name] = spans["label"]
        return examples

    def no_example():
        # The shapes and dtypes of `cut_pack_and_mask`'s, with no row.
        tokens = tf.zeros([0, seq_len], tf.int32)
        lists = tf.zeros([0, masker.max_predictions], tf.int32)
        examples = {
            TOKEN_IDS: tokens,
            SEGMENT_IDS: tokens,
            PADDING_MASK: tokens,
            MASK_POSITIONS: lists,
            MASK_IDS: lists,
            MASK_WEIGHTS: tf.zeros([0, masker.max_predictions], tf.float32),
        }
        if label_name is not None:
            examples[label_name] = tf.zeros([0], tf.int32)
        return examples

    def window_examples(documents, key):
        tokens, ids = _tokenize_group(tokenizer, documents)
        # A window whose documents all lack tokens (text of only whitespace or control
        # characters) cannot be cut: it gives no example.
        return tf.cond(tf.size(ids) > 0, lambda: cut_pack_and_mask(tokens, ids, key), no_example)

    return window_examples


def bert_examples(
    corpus,
    tokenizer,
    *,
    seq_len,
    objective,
    masker,
    batch_size,
    seed,
    input_context=None,
    epochs=None,
    short_seq_prob=0.1,
    window_size=DEFAULT_WINDOW_SIZE,
    start=None,
    drop_remainder=True,
    length_buckets=False,
):
    """A `tf.data.Dataset` of BERT/ALBERT pretraining batches `(features, labels)`, from the
    seekable stream.

    Args:
        corpus: a `TextCorpus`, or a `TokenizedCorpus` (offline mode: already tokenized).
        tokenizer: a `WordPieceTokenizer`.
        seq_len: length of every example, special tokens included.
        objective: "nsp" (BERT), "sop" (ALBERT) or "mlm" (one segment, masked LM only).
        masker: a `MaskedLMMasker` for the masked-LM predictions.
        batch_size: examples per batch (per replica with an `input_context`).
        seed: int seed of every random choice.
        input_context: a `tf.distribute.InputContext`: which replicas' share of every global
            batch this input pipeline keeps (every pipeline reads the one global order).
        epochs: number of passes over the corpus; None repeats forever.
        short_seq_prob: probability that a document gets a shorter target length (BERT:
            0.1), drawn once per document and epoch.
        window_size: documents read together: cut into pairs together (the candidates for
            NSP's random B), and whose examples are shuffled together.
        start: a `StreamPosition` to start at (None: the beginning).
        drop_remainder: drop a last incomplete batch (static shapes for distribution).
        length_buckets: group each window's examples by length and cut each batch to the
            smallest of `bucket_lengths(seq_len)` that holds its longest example (see
            `lmpipe.datasets.examples.length_groups`): the same examples (pairs and masks) in
            another order, batches `[B, L]` rather than `[B, seq_len]`.

    Returns:
        A dataset of `(features, labels)`: features `token_ids`, `segment_ids`,
        `padding_mask` int32 `[B, seq_len]`, `mask_positions` int32 `[B, P]` and
        `stream_position` int64 `[B, 3]`; labels `mask_ids` int32 `[B, P]`, `mask_weights`
        float32 `[B, P]`, and `nsp_labels` or `sop_labels` int32 `[B]` for those objectives.
    """
    if objective not in PAIR_MODES:
        raise ValueError(f"`objective` must be one of {sorted(PAIR_MODES)}, got {objective!r}.")
    check_objective_sequence_length(seq_len, objective)
    if hasattr(corpus, "check_tokenizer"):
        corpus.check_tokenizer(tokenizer)
    window_examples = bert_window_examples(
        tokenizer,
        seq_len=seq_len,
        objective=objective,
        masker=masker,
        short_seq_prob=short_seq_prob,
    )
    examples = stream_examples(
        corpus,
        window_examples,
        seed=seed,
        window_size=window_size,
        start=start,
        epochs=epochs,
        window_order=window_length_groups(seq_len) if length_buckets else None,
    )
    batches = stream_batches(examples, batch_size, input_context, drop_remainder=drop_remainder)
    lengths = bucket_lengths(seq_len)
    labels = (MASK_IDS, MASK_WEIGHTS) + (
        (LABEL_NAMES[objective],) if LABEL_NAMES[objective] else ()
    )
    features = (TOKEN_IDS, SEGMENT_IDS, PADDING_MASK, MASK_POSITIONS, STREAM_POSITION)

    def split(batch):
        if length_buckets:
            batch = cut_to_bucket(batch, seq_len, lengths)
        return {name: batch[name] for name in features}, {name: batch[name] for name in labels}

    return batches.map(graph_code(split)).prefetch(tf.data.AUTOTUNE)
