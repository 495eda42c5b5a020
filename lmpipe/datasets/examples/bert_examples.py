"""Raw documents to finished BERT/ALBERT pretraining batches, online in tf.data.

documents -> groups of documents -> WordPiece (one call per group) -> sentence pairs cut in
the graph (`sentence_pairs.pair_spans`) -> `[CLS] A [SEP] B [SEP]` packing -> shuffle ->
batch -> masked-LM masking per batch -> `(features, labels)`.

Randomness: every random choice comes from stateless ops keyed by `seed`, the input
pipeline's id and a running counter of groups (for pairs) or batches (for masks), and the
shuffles are stateless too (`lmpipe.datasets.corpora.shuffling`): TensorFlow's global seed plays no
part. The same seed therefore gives identical batches in any process; each epoch (each
repetition of the corpus) advances the counters and draws new pairs and new masks; each input
pipeline reads its own shard and uses its own seeds.
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
    TOKEN_IDS,
)
from lmpipe.datasets.corpora.sharding import pipeline_position
from lmpipe.datasets.corpora.shuffling import by_epoch, epoch_documents, graph_code, window_shuffle
from lmpipe.datasets.examples import packing
from lmpipe.datasets.examples.packing import pack_segments
from lmpipe.datasets.examples.sentence_pairs import gather_spans, pair_spans

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
    group_size=64,
    shuffle_buffer=1024,
    drop_remainder=True,
):
    """A `tf.data.Dataset` of BERT/ALBERT pretraining batches `(features, labels)`.

    Args:
        corpus: a `TextCorpus`, or a `TokenizedCorpus` (offline mode: already tokenized).
        tokenizer: a `WordPieceTokenizer`.
        seq_len: length of every example, special tokens included.
        objective: "nsp" (BERT), "sop" (ALBERT) or "mlm" (one segment, masked LM only).
        masker: a `MaskedLMMasker` for the masked-LM predictions.
        batch_size: examples per batch (per input pipeline).
        seed: int seed of every random choice.
        input_context: a `tf.distribute.InputContext`: which shard to read.
        epochs: number of passes over the corpus; None repeats forever.
        short_seq_prob: probability that a document gets a shorter target length (BERT:
            0.1), drawn once per document and epoch.
        group_size: documents cut into pairs together (and candidates for NSP's random B).
        shuffle_buffer: examples shuffled together before batching.
        drop_remainder: drop a last incomplete batch (static shapes for distribution).

    Returns:
        A dataset of `(features, labels)`: features `token_ids`, `segment_ids`,
        `padding_mask` int32 `[B, seq_len]` and `mask_positions` int32 `[B, P]`; labels
        `mask_ids` int32 `[B, P]`, `mask_weights` float32 `[B, P]`, and `nsp_labels` or
        `sop_labels` int32 `[B]` for those objectives.
    """
    if objective not in PAIR_MODES:
        raise ValueError(f"`objective` must be one of {sorted(PAIR_MODES)}, got {objective!r}.")
    check_objective_sequence_length(seq_len, objective)
    _, pipeline_id = pipeline_position(input_context)
    mode = PAIR_MODES[objective]
    max_num_tokens = seq_len - special_token_count(objective)
    pipeline_seed = tf.random.experimental.stateless_fold_in(
        tf.constant([seed, 0], tf.int64), pipeline_id
    )
    pair_seed = tf.random.experimental.stateless_fold_in(pipeline_seed, 1)
    mask_seed = tf.random.experimental.stateless_fold_in(pipeline_seed, 2)

    if hasattr(corpus, "check_tokenizer"):
        corpus.check_tokenizer(tokenizer)

    # All the documents of an in-memory corpus are shuffled every epoch.
    documents = by_epoch(epoch_documents(corpus, input_context, seed, pipeline_seed), epochs)
    groups = documents.ragged_batch(group_size).enumerate()

    def tokenize(index, sentences):
        tokens, ids = _tokenize_group(tokenizer, sentences)
        return index, tokens, ids

    groups = groups.map(graph_code(tokenize), num_parallel_calls=tf.data.AUTOTUNE)
    # A group whose documents all lack tokens gives no example (and could not be cut). The
    # groups keep their index, so the seeds of the others do not change.
    groups = groups.filter(lambda index, tokens, ids: tf.size(ids) > 0)

    # The pool of other documents for NSP: the previous group and the current one. The scan
    # carries the previous group as the dense parts of its RaggedTensor.
    def components(tokens):
        return (tokens.flat_values, *tokens.nested_row_splits)

    def from_components(values, document_splits, sentence_splits):
        return tf.RaggedTensor.from_nested_row_splits(values, (document_splits, sentence_splits))

    empty_group = (
        (tf.zeros([0], tf.int32), tf.zeros([1], tf.int64), tf.zeros([1], tf.int64)),
        tf.zeros([0], tf.int64),
    )

    def with_previous_group(previous, group):
        index, tokens, ids = group
        previous_tokens = from_components(*previous[0])
        pool = tf.concat([previous_tokens, tokens], axis=0), tf.concat([previous[1], ids], 0)
        return (components(tokens), ids), (index, pool, tf.shape(ids)[0])

    if mode == "nsp":
        groups = groups.scan(empty_group, with_previous_group)
    else:
        groups = groups.map(lambda index, tokens, ids: (index, (tokens, ids), tf.shape(ids)[0]))

    def cut_and_pack(index, pool, num_current):
        tokens, ids = pool
        seed_for_group = tf.random.experimental.stateless_fold_in(pair_seed, index)
        spans = pair_spans(
            tokens, ids, num_current, seed_for_group, mode, max_num_tokens, short_seq_prob
        )
        flat = tokens.flat_values
        segments = [gather_spans(flat, spans["a_start"], spans["a_end"])]
        if mode != "single":
            segments.append(gather_spans(flat, spans["b_start"], spans["b_end"]))
        example = pack_segments(tokenizer, segments, seq_len)
        example["pair_label"] = spans["label"]
        return example

    examples = groups.map(graph_code(cut_and_pack), num_parallel_calls=tf.data.AUTOTUNE).unbatch()
    examples = window_shuffle(
        examples, shuffle_buffer, seed=tf.random.experimental.stateless_fold_in(pipeline_seed, 3)
    )
    batches = examples.batch(batch_size, drop_remainder=drop_remainder).enumerate()

    label_name = LABEL_NAMES[objective]

    def mask(index, example):
        masked = masker(
            example[TOKEN_IDS], tf.random.experimental.stateless_fold_in(mask_seed, index)
        )
        features = {
            TOKEN_IDS: masked[TOKEN_IDS],
            SEGMENT_IDS: example[SEGMENT_IDS],
            PADDING_MASK: example[PADDING_MASK],
            MASK_POSITIONS: masked[MASK_POSITIONS],
        }
        labels = {MASK_IDS: masked[MASK_IDS], MASK_WEIGHTS: masked[MASK_WEIGHTS]}
        if label_name is not None:
            labels[label_name] = example["pair_label"]
        return features, labels

    return batches.map(graph_code(mask), num_parallel_calls=tf.data.AUTOTUNE).prefetch(
        tf.data.AUTOTUNE
    )
