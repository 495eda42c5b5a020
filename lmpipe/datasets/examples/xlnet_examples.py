"""Raw documents to finished XLNet pretraining batches, online in tf.data.

Every example is laid out as XLNet's: `A <sep> B <sep> <cls>` (the tokenizer's `[SEP]` and
`[CLS]` play `<sep>` and `<cls>`; `<cls>` comes last), segment ids 0 for A and its `<sep>`,
1 for B and its `<sep>`, 2 for `<cls>` (XLNet gives `<cls>` a segment of its own), then
`[PAD]`s. Each batch then gets its permutation-LM targets and order from `PermutationLM`.

Two ways to read the corpus:

- Without memory (`reuse_len=None`): documents -> groups -> WordPiece -> chunks of whole
  sentences cut as BERT's pipeline cuts them (`sentence_pairs.pair_spans`, no short
  sequences), A the first sentences of a chunk and B the rest, so B continues A -> packing ->
  `window_shuffle` -> batch.
- With memory (`reuse_len=R`, Transformer-XL's recurrence, XLNet's `data_utils`): each
  epoch the pipeline's documents (its shard, in a fresh order for an in-memory corpus) are
  concatenated into one token stream, cut into `batch_size` contiguous streams of equal
  length (the tail that does not divide is dropped, as XLNet's `batchify` does). Batch `t`
  row `r` holds the tokens `t R ...` of stream `r`: its first `R` positions are the next `R`
  tokens of the stream and the rest `A <sep> B <sep> <cls>` with the tokens after them (A
  and B split at a random boundary between words), so the stream advances by `R` per batch
  and the model's memory of the previous batch's first `R` positions is exactly the text
  before the current example. The first `R` positions belong to segment 0. The feature
  `stream_start` int32 `[B]` is 1 where a row starts a stream (the first batch of each
  epoch), telling the model to drop that row's memory. Records are not shuffled, which
  would break the streams. Documents are concatenated without a marker: the vocabulary has
  no end-of-document token (XLNet's `<eod>`), and `[SEP]` already ends segments. The whole
  epoch's shard is held in memory as one int32 stream (4 bytes per token).

`bidirectional=True` (XLNet's `bi_data`): the second half of every batch reads text backward.
With memory, rows `B/2 + r` read stream `r` of the first half backward, from its end (XLNet's
layout); without memory, the second half's examples are reversed (A becomes B reversed and B
becomes A reversed). First half forward, second half backward is also the order in which
the model's `bi_data` (as Hugging Face's) gives the second half negated relative distances.

Randomness: every choice is a stateless op keyed by `seed`, the input pipeline and a running
counter (of document groups, of batches) or the epoch; TensorFlow's global seed plays no
part. The same seed gives identical batches in any process; each epoch draws new chunks,
orders and targets, and each input pipeline reads its own shard with its own seeds.
"""

import numbers

import tensorflow as tf

from lmpipe.arguments import check_bool, check_number, check_positive_int, check_seed
from lmpipe.contract import (
    ENCODER_FEATURES,
    MASKED_TOKENS,
    PADDING_MASK,
    PERM_MASK,
    SEGMENT_IDS,
    TARGET_MAPPING,
    TOKEN_IDS,
    label_names,
    min_seq_len,
)
from lmpipe.datasets.corpora.sharding import pipeline_position
from lmpipe.datasets.corpora.shuffling import by_epoch, epoch_documents, graph_code, window_shuffle
from lmpipe.datasets.examples.packing import check_sequence_length, pack_segments
from lmpipe.datasets.examples.permutation import MAX_SEQ_LEN, PermutationLM
from lmpipe.datasets.examples.sentence_pairs import gather_spans, pair_spans

NUM_SPECIAL_TOKENS = 3  # A <sep> B <sep> <cls>
# The special tokens XLNet's layout needs, by the tokenizer attribute holding their id.
REQUIRED_SPECIALS = {"pad_id": "[PAD]", "sep_id": "[SEP]", "cls_id": "[CLS]", "mask_id": "[MASK]"}
PACKED = ENCODER_FEATURES
LABELS = label_names("xlnet")
_PAIRS, _PERMUTATION, _SHUFFLE, _SPLIT = 1, 2, 3, 4  # the seeds derived from `seed`


def _fold(seed, value):
    return tf.random.experimental.stateless_fold_in(seed, value)


def special_ids(tokenizer):
    """`{"pad_id", "sep_id", "cls_id", "mask_id"}` of `tokenizer`; a ValueError naming the
    missing ones ([SEP] plays `<sep>`, [CLS] `<cls>`, [MASK] `<mask>`)."""
    ids, missing = {}, []
    for attribute, token in REQUIRED_SPECIALS.items():
        try:
            value = getattr(tokenizer, attribute, None)
        except (KeyError, ValueError):  # a vocabulary lookup that fails
            value = None
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
            missing.append(token)
        else:
            ids[attribute] = int(value)
    if missing:
        raise ValueError(
            f"`tokenizer` lacks the special token(s) {', '.join(missing)}: XLNet's layout needs "
            "[SEP] (as <sep>), [CLS] (as <cls>), [MASK] (as <mask>) and [PAD]."
        )
    return ids


def check_xlnet_arguments(
    seq_len,
    max_predictions,
    reuse_len,
    perm_size,
    batch_size,
    bidirectional,
    mask_alpha=6,
    max_span=5,
):
    """Raise a ValueError naming the parameter unless the arguments fit together."""
    check_number("reuse_len", reuse_len, integer=True, none=True)
    check_sequence_length(
        seq_len,
        segments=2,
        max_length=MAX_SEQ_LEN,
        limit="the longest XLNet example (the permutation's order keys are 64-bit)",
    )
    minimum = min_seq_len("xlnet") + max(reuse_len or 0, 0)
    if reuse_len is not None and not 1 <= reuse_len <= seq_len - NUM_SPECIAL_TOKENS - 2:
        raise ValueError(
            f"`reuse_len` must be in [1, seq_len - 5 = {seq_len - 5}] (the memory part, then "
            f"one token of A and of B and 3 special tokens), got reuse_len={reuse_len!r}."
        )
    if seq_len < minimum:
        raise ValueError(
            f"`seq_len` must be at least {minimum}: 3 special tokens (<sep>, <sep>, <cls>) and "
            f"one token of A and of B, got seq_len={seq_len!r}."
        )
    check_number("mask_alpha", mask_alpha, minimum=2)
    check_number("max_span", max_span, minimum=1, integer=True)
    check_positive_int("max_predictions", max_predictions)
    maskable = seq_len - NUM_SPECIAL_TOKENS
    if max_predictions > maskable:
        raise ValueError(
            f"`max_predictions` must be at most {maskable}, the tokens of an example that may "
            f"be predicted (seq_len={seq_len} minus 3 special tokens), got "
            f"max_predictions={max_predictions!r}."
        )
    if perm_size is not None:
        check_positive_int("perm_size", perm_size)
        if seq_len % perm_size:
            raise ValueError(
                f"`perm_size` must divide seq_len={seq_len}, got perm_size={perm_size!r}."
            )
        if reuse_len and reuse_len % perm_size:
            raise ValueError(
                f"`perm_size` must divide reuse_len={reuse_len}, got perm_size={perm_size!r}."
            )
    check_positive_int("batch_size", batch_size)
    check_bool("bidirectional", bidirectional)
    if bidirectional and batch_size % 2:
        raise ValueError(
            "`batch_size` must be even with bidirectional=True (half the rows read backward), "
            f"got batch_size={batch_size!r}."
        )


def xlnet_examples(
    corpus,
    tokenizer,
    *,
    seq_len,
    batch_size,
    seed,
    max_predictions,
    reuse_len=None,
    perm_size=None,
    mask_alpha=6,
    max_span=5,
    bidirectional=False,
    input_context=None,
    epochs=None,
    group_size=64,
    shuffle_buffer=1024,
):
    """A `tf.data.Dataset` of XLNet pretraining batches `(features, labels)`.

    See the module docstring for the layout, the two ways of reading (with and without
    memory) and the randomness, and `PermutationLM` for the targets and the masks.

    Args:
        corpus: a `TextCorpus`, or a `TokenizedCorpus` (already tokenized).
        tokenizer: a `WordPieceTokenizer` (its `[SEP]`, `[CLS]`, `[MASK]`, `[PAD]` play
            XLNet's `<sep>`, `<cls>`, `<mask>`, `<pad>`).
        seq_len: `S`, tokens per example, special tokens (and memory part) included.
        batch_size: examples per batch (per input pipeline); with memory, the number of
            streams.
        seed: int seed of every random choice.
        max_predictions: `P`, at most this many targets per example (XLNet: about S / K).
        reuse_len: `R`, the tokens each example hands to the next one as memory, or None to
            read independent, shuffled examples.
        perm_size: permute the order inside blocks of this many positions (must divide
            `seq_len` and `reuse_len`); None permutes each part whole.
        mask_alpha: `K`, one word in `K` is a target on average.
        max_span: longest target span in words.
        bidirectional: the second half of each batch reads text backward (`batch_size` even).
        input_context: a `tf.distribute.InputContext`: which shard to read.
        epochs: passes over the corpus; None repeats forever.
        group_size: documents tokenized (and, without memory, cut) together.
        shuffle_buffer: without memory, examples shuffled together (1 keeps their order).

    Returns:
        A dataset of `(features, labels)`, batches of exactly `batch_size`: features
        `token_ids`, `segment_ids`, `padding_mask` int32 `[B, S]`, `perm_mask` float32
        `[B, S, S]`, `target_mapping` float32 `[B, P, S]`, `masked_tokens` int32 `[B, S]`,
        and with memory `stream_start` int32 `[B]`; labels `target_ids` int32 `[B, P]`,
        `target_mask` float32 `[B, P]`.

    Example:

    >>> from lmpipe.datasets.corpora.corpus import TextCorpus
    >>> from lmpipe.tokenizers.wordpiece import WordPieceTokenizer
    >>> corpus = TextCorpus.from_documents([["to be or not to be", "that is the question"]])
    >>> tokenizer = WordPieceTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
    ...     "to", "be", "or", "not", "that", "is", "the", "question"])
    >>> batches = xlnet_examples(corpus, tokenizer, seq_len=8, batch_size=1, seed=0,
    ...     max_predictions=2, reuse_len=2, epochs=1)
    >>> features = [f for f, _ in batches]
    >>> [f["token_ids"].numpy()[0].tolist() for f in features]  # the stream advances by 2
    [[5, 6, 7, 3, 8, 5, 3, 2], [7, 8, 5, 3, 6, 9, 3, 2], [5, 6, 9, 3, 10, 11, 3, 2]]
    >>> features[0]["segment_ids"].numpy()[0].tolist(), features[0]["perm_mask"].shape
    ([0, 0, 0, 0, 1, 1, 1, 2], TensorShape([1, 8, 8]))
    """
    check_xlnet_arguments(seq_len, max_predictions, reuse_len, perm_size, batch_size, bidirectional)
    check_seed(seed)
    check_positive_int("group_size", group_size)
    check_positive_int("shuffle_buffer", shuffle_buffer)
    ids = special_ids(tokenizer)
    _, pipeline_id = pipeline_position(input_context)
    if hasattr(corpus, "check_tokenizer"):
        corpus.check_tokenizer(tokenizer)
    permutation = PermutationLM(
        seq_len,
        max_predictions,
        sorted(set(tokenizer.special_token_ids) | set(ids.values())),
        continuation_mask=tokenizer.continuation_mask,
        mask_alpha=mask_alpha,
        max_span=max_span,
        perm_size=perm_size,
        reuse_len=reuse_len,
    )
    pipeline_seed = _fold(tf.constant([seed, 0], tf.int64), pipeline_id)

    # An in-memory corpus: all its documents in a new order every epoch.
    documents_of_epoch = epoch_documents(corpus, input_context, seed, pipeline_seed)

    if reuse_len:
        # An upper bound on the groups of documents of an epoch, to batch them all at once.
        max_groups = len(corpus) // group_size + 1
        examples = _MemoryStreams(
            tokenizer,
            ids,
            seq_len,
            batch_size,
            bidirectional,
            pipeline_seed,
            reuse_len,
            group_size,
            max_groups,
        )
    else:
        examples = _IndependentExamples(
            tokenizer, ids, seq_len, batch_size, bidirectional, pipeline_seed, group_size
        )
    batches = examples.batches(documents_of_epoch, epochs, shuffle_buffer).enumerate()
    backward = tf.range(batch_size) >= batch_size // 2 if bidirectional else None
    permutation_seed = _fold(pipeline_seed, _PERMUTATION)

    def add_targets(index, example):
        drawn = permutation(
            example[TOKEN_IDS],
            example[PADDING_MASK],
            _fold(permutation_seed, index),
            backward=backward,
        )
        features = {name: example[name] for name in PACKED}
        features.update(
            perm_mask=drawn[PERM_MASK],
            target_mapping=drawn[TARGET_MAPPING],
            masked_tokens=drawn[MASKED_TOKENS],
        )
        if "stream_start" in example:
            features["stream_start"] = example["stream_start"]
        labels = {name: drawn[name] for name in LABELS}
        return features, labels

    return batches.map(graph_code(add_targets), num_parallel_calls=tf.data.AUTOTUNE).prefetch(
        tf.data.AUTOTUNE
    )


def _tokenize(tokenizer, documents):
    """`[G, (sentences)]` strings (or `[G, (sentences), (tokens)]` ids) -> int32 ids
    `[G', (sentences), (tokens)]` without empty sentences and without empty documents."""
    tokens = documents if documents.dtype != tf.string else tokenizer.tokenize(documents)
    tokens = tf.cast(tokens, tf.int32)
    tokens = tf.ragged.boolean_mask(tokens, tokens.row_lengths(axis=2) > 0)
    return tf.ragged.boolean_mask(tokens, tokens.row_lengths(axis=1) > 0)


class _IndependentExamples:
    """Examples cut from documents, `A <sep> B <sep> <cls>` with B continuing A, shuffled."""

    def __init__(
        self, tokenizer, ids, seq_len, batch_size, bidirectional, pipeline_seed, group_size
    ):
        self.tokenizer = tokenizer
        self.ids = ids
        self.seq_len = seq_len
        self.batch_size = batch_size
        self.bidirectional = bidirectional
        self.pipeline_seed = pipeline_seed
        self.group_size = group_size

    def batches(self, epoch_documents, epochs, shuffle_buffer):
        groups = by_epoch(epoch_documents, epochs).ragged_batch(self.group_size).enumerate()
        examples = groups.map(graph_code(self._cut_and_pack), num_parallel_calls=tf.data.AUTOTUNE)
        examples = window_shuffle(
            examples.unbatch(), shuffle_buffer, seed=_fold(self.pipeline_seed, _SHUFFLE)
        )
        batches = examples.batch(self.batch_size, drop_remainder=True)
        if self.bidirectional:
            batches = batches.map(self._second_half_backward)
        return batches

    def _cut_and_pack(self, index, documents):
        tokens = _tokenize(self.tokenizer, documents)
        num_documents = tokens.nrows(out_type=tf.int32)
        # SOP's cutting keeps B the continuation of A and only swaps half of the pairs; the
        # swap is undone below. Every chunk is as long as its document allows.
        spans = pair_spans(
            tokens,
            tf.zeros([num_documents], tf.int64),
            num_documents,
            _fold(_fold(self.pipeline_seed, _PAIRS), index),
            "sop",
            self.seq_len - NUM_SPECIAL_TOKENS,
            short_seq_prob=0.0,
        )
        swapped = tf.equal(spans["label"], 0)
        a_start = tf.where(swapped, spans["b_start"], spans["a_start"])
        a_end = tf.where(swapped, spans["b_end"], spans["a_end"])
        b_start = tf.where(swapped, spans["a_start"], spans["b_start"])
        b_end = tf.where(swapped, spans["a_end"], spans["b_end"])
        flat = tokens.flat_values
        segment_a = gather_spans(flat, a_start, a_end)  # [N, (tokens)]
        segment_b = gather_spans(flat, b_start, b_end)
        return pack_segments(self.tokenizer, [segment_a, segment_b], self.seq_len, "xlnet")

    def _second_half_backward(self, example):
        """Rows B/2.. read backward: `rev(B) <sep> rev(A) <sep> <cls>`, in one gather."""
        segment_ids = example[SEGMENT_IDS]
        real = example[PADDING_MASK] > 0
        a_length = tf.reduce_sum(tf.cast(real & (segment_ids == 0), tf.int32), axis=1) - 1
        b_length = tf.reduce_sum(tf.cast(real & (segment_ids == 1), tf.int32), axis=1) - 1
        a, b = a_length[:, None], b_length[:, None]  # [B, 1]
        position = tf.range(self.seq_len)[None, :]  # [1, S]
        source = tf.where(position < b, a + b - position, position)  # reversed B
        source = tf.where(position == b, a, source)  # the <sep> after A
        source = tf.where((position > b) & (position <= a + b), a + b - position, source)
        new_segments = tf.where(position <= b, 0, tf.where(position <= a + b + 1, 1, segment_ids))
        backward = (tf.range(self.batch_size) >= self.batch_size // 2)[:, None]
        result = dict(example)
        result[TOKEN_IDS] = tf.where(
            backward, tf.gather(example[TOKEN_IDS], source, batch_dims=1), example[TOKEN_IDS]
        )
        result[SEGMENT_IDS] = tf.where(backward & real, new_segments, segment_ids)
        return result


class _MemoryStreams:
    """`batch_size` contiguous token streams per epoch, advancing by `reuse_len` per batch."""

    def __init__(
        self,
        tokenizer,
        ids,
        seq_len,
        batch_size,
        bidirectional,
        pipeline_seed,
        reuse_len,
        group_size,
        max_groups,
    ):
        self.tokenizer = tokenizer
        self.ids = ids
        self.seq_len = seq_len
        self.batch_size = batch_size
        self.bidirectional = bidirectional
        self.pipeline_seed = pipeline_seed
        self.reuse_len = reuse_len
        self.group_size = group_size
        self.max_groups = max_groups
        self.continuation = tf.constant(tokenizer.continuation_mask)

    def batches(self, epoch_documents, epochs, _):
        def epoch_batches(epoch):
            groups = epoch_documents(epoch).ragged_batch(self.group_size)
            streams = groups.map(
                lambda documents: _tokenize(self.tokenizer, documents).flat_values,
                num_parallel_calls=tf.data.AUTOTUNE,
            )
            # All of the epoch's tokens in one element: the streams need the total length. An
            # empty group at the end makes the element exist even for an empty shard, so
            # that the length check below reports it instead of looping over empty epochs.
            streams = streams.concatenate(tf.data.Dataset.from_tensors(tf.zeros([0], tf.int32)))
            whole = streams.ragged_batch(self.max_groups + 1).map(lambda groups: groups.flat_values)
            return whole.flat_map(lambda tokens: self._stream_batches(tokens, epoch))

        return by_epoch(epoch_batches, epochs)

    def _stream_batches(self, tokens, epoch):
        """The batches of one epoch from its token stream `[N]`."""
        num_streams = self.batch_size // 2 if self.bidirectional else self.batch_size
        stream_len = tf.shape(tokens)[0] // num_streams
        streams = tf.reshape(tokens[: num_streams * stream_len], [num_streams, stream_len])
        if self.bidirectional:
            streams = tf.concat([streams, tf.reverse(streams, axis=[1])], axis=0)  # [B, L]
        window = self.seq_len - NUM_SPECIAL_TOKENS  # stream tokens per example
        num_batches = tf.maximum((stream_len - window) // self.reuse_len + 1, 0)
        check = tf.debugging.assert_positive(
            num_batches,
            message=(
                f"The corpus (this input pipeline's shard) is too short for one XLNet batch with "
                f"memory: it needs batch_size x (seq_len - 3) = {self.batch_size} x {window} "
                "tokens (half as many with bidirectional=True)."
            ),
        )
        with tf.control_dependencies([check]):
            num_batches = tf.identity(num_batches)
        split_seed = _fold(_fold(self.pipeline_seed, _SPLIT), epoch)

        def batch(step):
            start = tf.cast(step, tf.int32) * self.reuse_len
            text = streams[:, start : start + window]  # [B, window]
            example = self._layout(text, _fold(split_seed, step))
            example["stream_start"] = tf.fill([self.batch_size], tf.cast(step == 0, tf.int32))
            return example

        return tf.data.Dataset.range(tf.cast(num_batches, tf.int64)).map(batch)

    def _layout(self, text, seed):
        """`memory A <sep> B <sep> <cls>` from `[B, seq_len - 3]` stream tokens, A and B split
        at a uniformly chosen boundary between words (each gets at least one token; between
        any two tokens when the text after the memory is a single word)."""
        reuse_len, seq_len = self.reuse_len, self.seq_len
        # Candidate k in [1, pair_len - 1]: A keeps k tokens after the memory part. It falls
        # between words unless the token after the cut continues a word (reading forward),
        # or the token before it does (reading backward: "##" pieces come first).
        pair = text[:, reuse_len:]  # [B, pair_len]
        continuation = tf.gather(self.continuation, pair)
        inside_word = continuation[:, 1:]
        if self.bidirectional:
            backward = (tf.range(self.batch_size) >= self.batch_size // 2)[:, None]
            inside_word = tf.where(backward, continuation[:, :-1], inside_word)
        draw = tf.random.stateless_uniform(
            tf.shape(inside_word), seed, 1.0, 2.0, alg="philox"
        )  # [B, pair_len - 1]
        draw = tf.where(inside_word, draw - 1.0, draw)  # word boundaries win
        cut = 1 + tf.argmax(draw, axis=1, output_type=tf.int32)
        sep = (reuse_len + cut)[:, None]  # [B, 1] position of A's <sep>
        position = tf.range(seq_len)[None, :]
        source = tf.where(position < sep, position, position - 1)
        source = tf.minimum(source, seq_len - NUM_SPECIAL_TOKENS - 1)
        token_ids = tf.gather(text, source, batch_dims=1)
        token_ids = tf.where(position == sep, self.ids["sep_id"], token_ids)
        token_ids = tf.where(position == seq_len - 2, self.ids["sep_id"], token_ids)
        token_ids = tf.where(position == seq_len - 1, self.ids["cls_id"], token_ids)
        segment_ids = tf.where(position <= sep, 0, 1) + tf.cast(position == seq_len - 1, tf.int32)
        return {
            TOKEN_IDS: token_ids,
            SEGMENT_IDS: tf.broadcast_to(segment_ids, tf.shape(token_ids)),
            PADDING_MASK: tf.ones_like(token_ids),
        }
