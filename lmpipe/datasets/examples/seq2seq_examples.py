"""Teacher-forcing batches for sequence-to-sequence training, built in tf.data graph code.

From a `ParallelCorpus` of `(source, target)` sentences, `seq2seq_examples` makes batches of the
seq2seq data contract: features `encoder_ids`, `encoder_mask` int32 `[B, S]`, `decoder_ids`,
`decoder_mask` int32 `[B, T]`; labels `target_ids` int32 `[B, T]`, `weights` float32 `[B, T]`.
For a target sentence y the decoder reads `[BOS] y` and predicts `y [EOS]`, position by
position (teacher forcing); padding has mask 0 and weight 0.

Pipeline, per epoch: the pairs of this input pipeline's shard are shuffled within windows by a
stateless permutation keyed by the seed, the pipeline and the epoch (so the same seed gives the
same batches in any process, and every epoch another order); tokenized a batch of texts at a
time; cut to the maximum lengths; grouped into buckets of similar length
(`tf.data.Dataset.bucket_by_sequence_length`) and padded to the longest sequence of each batch.
"""

import logging

import numpy as np
import tensorflow as tf

from lmpipe.arguments import check_number, check_positive_int, check_seed
from lmpipe.contract import (
    DECODER_IDS,
    DECODER_MASK,
    ENCODER_IDS,
    ENCODER_MASK,
    TARGET_IDS,
    WEIGHTS,
    feature_names,
    label_names,
)
from lmpipe.datasets.corpora.parallel_text import ParallelCorpus
from lmpipe.datasets.corpora.sharding import pipeline_position
from lmpipe.datasets.corpora.shuffling import by_epoch, window_shuffle

logger = logging.getLogger(__name__)

BOS_TOKEN = "[BOS]"
"""The token a target sequence starts with in the decoder's input."""
EOS_TOKEN = "[EOS]"
"""The token that ends a target sequence in the labels and in generated text."""
TARGET_TOKENS = (BOS_TOKEN, EOS_TOKEN)
"""Reserved tokens a target vocabulary needs: pass them to `WordPieceTokenizer.train`."""

FEATURES = feature_names("seq2seq")
LABELS = label_names("seq2seq")

# Texts tokenized per call of the tokenizer op: vectorized work, small enough to stream.
_TOKENIZE_BATCH = 256


def target_token_ids(tokenizer):
    """`(bos_id, eos_id)` of a target tokenizer; ValueError naming the missing token(s).

    >>> from lmpipe.tokenizers.wordpiece import SPECIAL_TOKENS, WordPieceTokenizer
    >>> tokenizer = WordPieceTokenizer(list(SPECIAL_TOKENS) + ["[BOS]", "[EOS]", "a"])
    >>> target_token_ids(tokenizer)
    (5, 6)
    """
    vocabulary = set(tokenizer.vocabulary)
    missing = [token for token in TARGET_TOKENS if token not in vocabulary]
    if missing:
        raise ValueError(
            f"The target vocabulary lacks {' and '.join(missing)}: a target tokenizer needs "
            f"both {BOS_TOKEN} and {EOS_TOKEN}; train it with "
            f"WordPieceTokenizer.train(..., reserved_tokens={list(TARGET_TOKENS)})."
        )
    return tokenizer.token_id(BOS_TOKEN), tokenizer.token_id(EOS_TOKEN)


def default_bucket_boundaries(max_length):
    """Bucket boundaries 8, 16, 32, ... below `max_length` (the longest sequence).

    >>> default_bucket_boundaries(100)
    [8, 16, 32, 64]
    """
    boundaries = []
    boundary = 8
    while boundary < max_length:
        boundaries.append(boundary)
        boundary *= 2
    return boundaries


def count_overlong(corpus, source_tokenizer, target_tokenizer, max_source_len, max_target_len):
    """`(sources, targets)`: how many pairs of `corpus` `seq2seq_examples` would cut.

    A source is cut when it has more than `max_source_len` tokens; a target when it has more
    than `max_target_len - 1` (the decoder sequences add `[BOS]` or `[EOS]`).
    """
    _check_lengths(max_source_len, max_target_len)
    too_long = np.zeros(2, np.int64)
    for batch in corpus.dataset().batch(4 * _TOKENIZE_BATCH):
        source_lengths = source_tokenizer.tokenize(batch["source"]).row_lengths()
        target_lengths = target_tokenizer.tokenize(batch["target"]).row_lengths()
        too_long += [
            int(tf.reduce_sum(tf.cast(source_lengths > max_source_len, tf.int64))),
            int(tf.reduce_sum(tf.cast(target_lengths > max_target_len - 1, tf.int64))),
        ]
    return int(too_long[0]), int(too_long[1])


def check_lengths(
    corpus, source_tokenizer, target_tokenizer, max_source_len, max_target_len, truncate=True
):
    """Count the pairs `seq2seq_examples` would cut; log a warning, or raise if not `truncate`.

    Returns:
        `(sources, targets)` cut, as `count_overlong`.

    Raises:
        ValueError: `truncate` is False and a sentence is too long.
    """
    sources, targets = count_overlong(
        corpus, source_tokenizer, target_tokenizer, max_source_len, max_target_len
    )
    if sources or targets:
        message = (
            f"{sources} of {len(corpus)} sources have more than max_source_len="
            f"{max_source_len} tokens and {targets} targets more than max_target_len - 1 = "
            f"{max_target_len - 1}"
        )
        if not truncate:
            raise ValueError(
                f"{message}; raise the maximum lengths or pass truncate=True to cut them."
            )
        logger.warning("%s; they are truncated.", message)
    return sources, targets


def seq2seq_examples(
    corpus,
    source_tokenizer,
    target_tokenizer,
    *,
    batch_size,
    max_source_len,
    max_target_len,
    seed=0,
    epochs=None,
    input_context=None,
    bucket_boundaries=None,
    shuffle=True,
    shuffle_window=None,
    truncate=True,
    check=True,
    drop_remainder=True,
):
    """Teacher-forcing batches `(features, labels)` of the seq2seq data contract.

    Args:
        corpus: a `ParallelCorpus`.
        source_tokenizer: a `WordPieceTokenizer` for the sources.
        target_tokenizer: a `WordPieceTokenizer` for the targets, with `[BOS]` and `[EOS]`
            (the same object as `source_tokenizer` for a shared vocabulary).
        batch_size: pairs per batch (per replica when given an `input_context`); every bucket
            makes batches of this size.
        max_source_len: the most source tokens (`S <= max_source_len`).
        max_target_len: the most decoder positions (`T <= max_target_len`): a target keeps at
            most `max_target_len - 1` tokens, plus `[BOS]` (decoder input) or `[EOS]` (labels).
        seed: int seed of the shuffles: the same seed gives the same batches in any process.
        epochs: passes over the corpus; None repeats forever.
        input_context: a `tf.distribute.InputContext`: this pipeline reads its own shard of
            the pairs and shuffles with its own seeds.
        bucket_boundaries: ascending lengths separating the buckets; a pair goes to the bucket
            of `max(len(source), len(target) + 1)`. Default `default_bucket_boundaries` of the
            longest sequence (8, 16, 32, ...); `[]` puts every pair in one bucket.
        shuffle: shuffle the pairs (False keeps the corpus order, for evaluation).
        shuffle_window: pairs shuffled together; default the whole shard.
        truncate: cut sentences longer than the maximum (counted and logged as a warning
            when `check`), or, if False, raise a ValueError naming how many are too long.
        check: count the sentences that are too long before building the pipeline (one pass
            of tokenization in Python); `False` skips it when the caller has checked already.
        drop_remainder: drop each bucket's last incomplete batch of an epoch, so every batch
            has `batch_size` pairs.

    Returns:
        A `tf.data.Dataset` of `(features, labels)`.

    Example:

    >>> from lmpipe.tokenizers.wordpiece import WordPieceTokenizer
    >>> corpus = ParallelCorpus.from_pairs([("the house", "la casa")] * 4)
    >>> tokenizer = WordPieceTokenizer.train(
    ...     [s for pair in corpus for s in pair], vocab_size=120, reserved_tokens=TARGET_TOKENS)
    >>> features, labels = next(iter(seq2seq_examples(
    ...     corpus, tokenizer, tokenizer, batch_size=2, max_source_len=8, max_target_len=8)))
    >>> tokenizer.detokenize(features["decoder_ids"])[0].numpy()
    b'[BOS] la casa'
    >>> tokenizer.detokenize(labels["target_ids"])[0].numpy()
    b'la casa [EOS]'

    Reference: Sutskever et al., "Sequence to Sequence Learning with Neural Networks", 2014
    (teacher forcing); Vaswani et al., 2017, section 5.1 (batches of similar lengths).
    """
    if not isinstance(corpus, ParallelCorpus):
        raise ValueError(f"`corpus` must be a ParallelCorpus, got {type(corpus).__name__}.")
    check_positive_int("batch_size", batch_size)
    check_seed(seed)
    _check_lengths(max_source_len, max_target_len)
    bos_id, eos_id = target_token_ids(target_tokenizer)
    longest = max(max_source_len, max_target_len)
    if bucket_boundaries is None:
        bucket_boundaries = default_bucket_boundaries(longest)
    bucket_boundaries = [int(b) for b in bucket_boundaries]
    if any(b < 1 for b in bucket_boundaries) or any(
        a >= b for a, b in zip(bucket_boundaries, bucket_boundaries[1:], strict=False)
    ):
        raise ValueError(
            "`bucket_boundaries` must be strictly ascending positive lengths, got "
            f"{bucket_boundaries!r}."
        )
    check_positive_int("shuffle_window", shuffle_window, none=True)
    if check:
        check_lengths(
            corpus, source_tokenizer, target_tokenizer, max_source_len, max_target_len, truncate
        )
    _, pipeline_id = pipeline_position(input_context)
    pairs = corpus.dataset(input_context).cache()
    window = shuffle_window or max(len(corpus), 1)
    pipeline_key = tf.random.experimental.stateless_fold_in(
        tf.constant([seed, 0], tf.int64), pipeline_id
    )

    def tokenize(batch):
        source = source_tokenizer.tokenize(batch["source"])[:, :max_source_len]
        target = target_tokenizer.tokenize(batch["target"])[:, : max_target_len - 1]
        rows = target.nrows()
        bos = tf.fill([rows, 1], tf.constant(bos_id, tf.int32))
        eos = tf.fill([rows, 1], tf.constant(eos_id, tf.int32))
        return {
            ENCODER_IDS: source,
            DECODER_IDS: tf.concat([bos, target], axis=1),  # [BOS] y
            TARGET_IDS: tf.concat([target, eos], axis=1),  # y [EOS]
        }

    def make_epoch(epoch):
        epoch_pairs = pairs
        if shuffle:
            key = tf.random.experimental.stateless_fold_in(pipeline_key, epoch)
            epoch_pairs = window_shuffle(epoch_pairs, window, key)
        examples = epoch_pairs.batch(_TOKENIZE_BATCH).map(tokenize).unbatch()
        examples = examples.map(_with_masks)
        return examples.bucket_by_sequence_length(
            _example_length,
            bucket_boundaries,
            [batch_size] * (len(bucket_boundaries) + 1),
            padded_shapes={name: [None] for name in (*FEATURES, *LABELS)},
            drop_remainder=drop_remainder,
        )

    return by_epoch(make_epoch, epochs).map(_split_features)


def _check_lengths(max_source_len, max_target_len):
    check_positive_int("max_source_len", max_source_len)
    # A decoder sequence holds at least [BOS] (or [EOS]) and one token.
    check_number("max_target_len", max_target_len, minimum=2, integer=True)


def _with_masks(example):
    """Add the masks and weights: 1 on every real position, 0 where padding will go."""
    return {
        **example,
        ENCODER_MASK: tf.ones_like(example[ENCODER_IDS]),
        DECODER_MASK: tf.ones_like(example[DECODER_IDS]),
        WEIGHTS: tf.ones_like(example[TARGET_IDS], tf.float32),
    }


def _example_length(example):
    return tf.maximum(tf.shape(example[ENCODER_IDS])[0], tf.shape(example[DECODER_IDS])[0])


def _split_features(batch):
    return (
        {name: batch[name] for name in FEATURES},
        {name: batch[name] for name in LABELS},
    )
