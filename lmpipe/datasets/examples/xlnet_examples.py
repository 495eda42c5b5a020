"""Raw documents to finished XLNet pretraining batches, online in tf.data, on the seekable
stream (`lmpipe.datasets.examples.stream`): every batch can be rebuilt from its position alone.

Every example is laid out as XLNet's: `A <sep> B <sep> <cls>` (the tokenizer's `[SEP]` and
`[CLS]` play `<sep>` and `<cls>`; `<cls>` comes last), segment ids 0 for A and its `<sep>`,
1 for B and its `<sep>`, 2 for `<cls>` (XLNet gives `<cls>` a segment of its own), then
`[PAD]`s. `PermutationLM` draws its permutation-LM targets and order.

Two ways to read the corpus:

- Without memory (`reuse_len=None`): the stream's windows of documents (`window_size` of them,
  in the stream's keyed order) -> WordPiece -> chunks of whole sentences cut as BERT's pipeline
  cuts them (`sentence_pairs.pair_spans`, no short sequences), A the first sentences of a chunk
  and B the rest, so B continues A -> packing -> targets and order drawn for all the window's
  examples at once -> the window's examples in a keyed order -> batches of consecutive
  examples. Every draw is keyed by the window's key, so the example at a `StreamPosition`
  `(epoch, window, offset)` is a pure function of the seed, the corpus and that position, and
  `start` resumes the stream at any example (see `stream`).
- With memory (`reuse_len=R`, Transformer-XL's recurrence, XLNet's `data_utils`): batches are
  rows of contiguous token streams, not a shuffle of independent examples. Each epoch all the
  corpus's documents, in the stream's order of that epoch, are concatenated into one token
  stream, cut into as many contiguous streams of equal length as the global batch has rows
  (the tail that does not divide is dropped, as XLNet's `batchify` does). Batch `t` row `r`
  holds the tokens `t R ...` of stream `r`: its first `R` positions are the next `R` tokens of
  the stream and the rest `A <sep> B <sep> <cls>` with the tokens after them (A and B split at
  a random boundary between words), so the stream advances by `R` per batch and the model's
  memory of the previous batch's first `R` positions is exactly the text before the current
  example. The first `R` positions belong to segment 0. The feature `stream_start` int32 `[B]`
  is 1 where a row starts a stream (the first batch of each epoch), telling the model to drop
  that row's memory. Documents are concatenated without a marker: the vocabulary has no
  end-of-document token (XLNet's `<eod>`), and `[SEP]` already ends segments. The whole
  epoch is held in memory as one int32 stream (4 bytes per token). Row `r` of batch `t` of
  epoch `e` has the stream position `(e, 0, t B + r)` (`B` the global batch): a `start` at
  offset `t B` rebuilds epoch `e`'s streams and begins at batch `t`, drawing nothing for the
  batches before it. So resuming costs one epoch's tokenization, whatever the number of steps
  done (an offset past the epoch's last batch goes on into the next epochs: the number of
  batches is the same in every epoch).

`bidirectional=True` (XLNet's `bi_data`): the second half of every replica's batch reads text
backward, as the model's `bi_data` (as Hugging Face's) expects, giving those rows negated
relative distances. With memory, global rows `B/2 + r` read stream `r` backward, from its end
(XLNet's layout), and each replica gets its share of the forward rows and the same share of
the backward ones. Without memory, the examples keep their forward draws (targets are whole
words either way), and the rows of the second half of each replica's batch are laid out
backward (A becomes B reversed and B becomes A reversed, targets and order following their
tokens): a layout of the batch that draws nothing, so it leaves the stream pure, but whether
an example reads backward depends on its row, so starts that keep the batches aligned (as
`StreamPosition.after(batch)` does) give the same batches.

Replicas: `batch_size` is the batch of one replica. With an `input_context` of `R` replicas
the global batch is `batch_size * R` consecutive examples (or rows of `batch_size * R`
streams) of the one global order, whatever the number of input pipelines; pipeline `i` yields,
step after step, the batches of its replicas in turn (replica `j` gets the global rows
`j batch_size ...`, or with `bidirectional` its forward and backward shares). So the global
batch at a step does not depend on how many pipelines or replicas read it.

Randomness: every draw is a stateless op keyed by the seed and the window (without memory) or
the epoch and batch (with memory); TensorFlow's global seed plays no part, nor any counter
across windows or any input pipeline's index. The same seed gives identical batches in any
process; each epoch draws new chunks, orders and targets.
"""

import numbers

import numpy as np
import tensorflow as tf

from lmpipe.arguments import check_bool, check_number, check_positive_int, check_seed
from lmpipe.contract import (
    ENCODER_FEATURES,
    MASKED_TOKENS,
    PADDING_MASK,
    PERM_MASK,
    SEGMENT_IDS,
    STREAM_POSITION,
    TARGET_MAPPING,
    TOKEN_IDS,
    label_names,
    min_seq_len,
)
from lmpipe.datasets.corpora.document_order import document_windows, windows_per_epoch
from lmpipe.datasets.corpora.sharding import pipeline_position
from lmpipe.datasets.corpora.shuffling import graph_code, key_of
from lmpipe.datasets.examples.packing import check_sequence_length, pack_segments
from lmpipe.datasets.examples.permutation import MAX_SEQ_LEN, ORDER_DRAWS, PermutationLM
from lmpipe.datasets.examples.sentence_pairs import gather_spans, pair_spans
from lmpipe.datasets.examples.stream import (
    DEFAULT_WINDOW_SIZE,
    StreamPosition,
    stream_examples,
    window_key,
)

NUM_SPECIAL_TOKENS = 3  # A <sep> B <sep> <cls>
# The special tokens XLNet's layout needs, by the tokenizer attribute holding their id.
REQUIRED_SPECIALS = {"pad_id": "[PAD]", "sep_id": "[SEP]", "cls_id": "[CLS]", "mask_id": "[MASK]"}
PACKED = ENCODER_FEATURES
LABELS = label_names("xlnet")
STREAM_START = "stream_start"
_BATCH_KEY = "batch_key"  # the key of a batch of memory streams, until its targets are drawn


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
    start=None,
    window_size=DEFAULT_WINDOW_SIZE,
):
    """A `tf.data.Dataset` of XLNet pretraining batches `(features, labels)`, from `start` on.

    See the module docstring for the layout, the two ways of reading (with and without
    memory), the replicas and the randomness, and `PermutationLM` for the targets and the
    masks.

    Args:
        corpus: a `TextCorpus`, or a `TokenizedCorpus` (already tokenized).
        tokenizer: a `WordPieceTokenizer` (its `[SEP]`, `[CLS]`, `[MASK]`, `[PAD]` play
            XLNet's `<sep>`, `<cls>`, `<mask>`, `<pad>`).
        seq_len: `S`, tokens per example, special tokens (and memory part) included.
        batch_size: examples per batch, the batch of one replica; with memory, the number of
            streams the replica reads.
        seed: int seed of every random choice.
        max_predictions: `P`, at most this many targets per example (XLNet: about S / K).
        reuse_len: `R`, the tokens each example hands to the next one as memory, or None to
            read independent examples.
        perm_size: permute the order inside blocks of this many positions (must divide
            `seq_len` and `reuse_len`); None permutes each part whole.
        mask_alpha: `K`, one word in `K` is a target on average.
        max_span: longest target span in words.
        bidirectional: the second half of each batch reads text backward (`batch_size` even).
        input_context: a `tf.distribute.InputContext`: how many replicas share a global batch
            and which of them this input pipeline feeds.
        epochs: the epoch to stop before (passes over the corpus, counted from epoch 0);
            None goes on forever.
        start: a `StreamPosition` to start from (None: the beginning), e.g.
            `StreamPosition.after(batch)` to continue after a batch. With memory its `window`
            must be 0 and its `offset` a multiple of the global batch (a batch's first row).
        window_size: documents read (tokenized, cut, drawn) together.

    Returns:
        A dataset of `(features, labels)`, batches of exactly `batch_size`: features
        `token_ids`, `segment_ids`, `padding_mask` int32 `[B, S]`, `perm_mask` float32
        `[B, S, S]`, `target_mapping` float32 `[B, P, S]`, `masked_tokens` int32 `[B, S]`,
        `stream_position` int64 `[B, 3]`, and with memory `stream_start` int32 `[B]`; labels
        `target_ids` int32 `[B, P]`, `target_mask` float32 `[B, P]`.

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
    [[5, 6, 7, 8, 3, 5, 3, 2], [7, 8, 5, 3, 6, 9, 3, 2], [5, 6, 9, 10, 3, 11, 3, 2]]
    >>> features[0]["segment_ids"].numpy()[0].tolist(), features[0]["perm_mask"].shape
    ([0, 0, 0, 0, 0, 1, 1, 2], TensorShape([1, 8, 8]))
    >>> features[2]["stream_position"].numpy().tolist()  # (epoch, 0, batch x rows + row)
    [[0, 0, 2]]
    """
    check_xlnet_arguments(seq_len, max_predictions, reuse_len, perm_size, batch_size, bidirectional)
    check_seed(seed)
    check_positive_int("window_size", window_size)
    ids = special_ids(tokenizer)
    replicas = _Replicas(batch_size, input_context, bidirectional)
    start = StreamPosition() if start is None else start
    if not isinstance(start, StreamPosition):
        raise ValueError(f"`start` must be a StreamPosition or None, got {start!r}.")
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
    if reuse_len:
        streams = _MemoryStreams(
            tokenizer, ids, seq_len, reuse_len, replicas.global_batch, bidirectional, seed
        )
        rows = streams.batches(corpus, permutation, window_size, start, epochs)
        backward = None  # the streams are already read backward
    else:
        examples = _PairExamples(tokenizer, seq_len, permutation)
        rows = stream_examples(
            corpus, examples, seed=seed, window_size=window_size, start=start, epochs=epochs
        ).batch(replicas.global_batch, drop_remainder=True)
        backward = bidirectional

    def finish(batch):
        if backward:
            batch = _second_half_backward(batch, seq_len, batch_size)
        drawn = permutation.expand(batch[TOKEN_IDS], batch[PADDING_MASK], batch)
        features = {name: batch[name] for name in PACKED}
        features.update({name: drawn[name] for name in (PERM_MASK, TARGET_MAPPING, MASKED_TOKENS)})
        for name in (STREAM_START, STREAM_POSITION):
            if name in batch:
                features[name] = batch[name]
        return features, {name: drawn[name] for name in LABELS}

    batches = replicas.split(rows).map(
        graph_code(finish), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
    )
    return batches.prefetch(tf.data.AUTOTUNE)


class _Replicas:
    """Which rows of the global batches the replicas of one input pipeline get."""

    def __init__(self, batch_size, input_context, bidirectional):
        num_pipelines, pipeline_id = pipeline_position(input_context)
        num_replicas = 1 if input_context is None else input_context.num_replicas_in_sync
        if num_replicas % num_pipelines:
            raise ValueError(
                f"`input_context` has {num_replicas} replicas in sync for {num_pipelines} input "
                "pipelines: each pipeline must feed the same number of replicas."
            )
        self.batch_size = batch_size
        self.global_batch = batch_size * num_replicas
        self.per_pipeline = num_replicas // num_pipelines
        first = pipeline_id * self.per_pipeline
        rows = []
        for replica in range(first, first + self.per_pipeline):
            if bidirectional:
                # Replica j: forward rows j h ... (j + 1) h - 1 and the same rows of the
                # backward half, so that its batch is half forward, half backward.
                half = batch_size // 2
                forward = np.arange(replica * half, (replica + 1) * half)
                rows += [forward, forward + self.global_batch // 2]
            else:
                rows.append(np.arange(replica * batch_size, (replica + 1) * batch_size))
        self.rows = np.concatenate(rows)
        self.whole = np.array_equal(self.rows, np.arange(self.global_batch))

    def split(self, batches):
        """The pipeline's per-replica batches of global `batches`, replica after replica."""
        if self.whole and self.per_pipeline == 1:
            return batches
        rows, shape = tf.constant(self.rows), [self.per_pipeline, self.batch_size]

        def parts(batch):
            return tf.data.Dataset.from_tensor_slices(
                {
                    name: tf.reshape(tf.gather(value, rows), shape + value.shape[1:])
                    for name, value in batch.items()
                }
            )

        return batches.flat_map(graph_code(parts))


def _tokenize(tokenizer, documents):
    """`[G, (sentences)]` strings (or `[G, (sentences), (tokens)]` ids) -> int32 ids
    `[G', (sentences), (tokens)]` without empty sentences and without empty documents."""
    tokens = documents if documents.dtype != tf.string else tokenizer.tokenize(documents)
    tokens = tf.cast(tokens, tf.int32)
    tokens = tf.ragged.boolean_mask(tokens, tokens.row_lengths(axis=2) > 0)
    return tf.ragged.boolean_mask(tokens, tokens.row_lengths(axis=1) > 0)


class _PairExamples:
    """A window's examples, `A <sep> B <sep> <cls>` with B continuing A, with their targets
    and order drawn: the stream's `window_examples`."""

    def __init__(self, tokenizer, seq_len, permutation):
        self.tokenizer = tokenizer
        self.seq_len = seq_len
        self.permutation = permutation

    def __call__(self, documents, key):
        tokens = _tokenize(self.tokenizer, documents)
        num_documents = tokens.nrows(out_type=tf.int32)
        # SOP's cutting keeps B the continuation of A and only swaps half of the pairs; the
        # swap is undone below. Every chunk is as long as its document allows.
        spans = pair_spans(
            tokens,
            tf.zeros([num_documents], tf.int64),
            num_documents,
            key_of(key, "pairs"),
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
        example = pack_segments(self.tokenizer, [segment_a, segment_b], self.seq_len, "xlnet")
        drawn = self.permutation.draw(
            example[TOKEN_IDS], example[PADDING_MASK], key_of(key, "permutation")
        )
        return {**example, **drawn}


def _second_half_backward(batch, seq_len, batch_size):
    """Rows B/2.. read backward: `rev(B) <sep> rev(A) <sep> <cls>`, in one gather (targets and
    order draws follow their tokens)."""
    segment_ids = batch[SEGMENT_IDS]
    real = batch[PADDING_MASK] > 0
    a_length = tf.reduce_sum(tf.cast(real & (segment_ids == 0), tf.int32), axis=1) - 1
    b_length = tf.reduce_sum(tf.cast(real & (segment_ids == 1), tf.int32), axis=1) - 1
    a, b = a_length[:, None], b_length[:, None]  # [B, 1]
    position = tf.range(seq_len)[None, :]  # [1, S]
    source = tf.where(position < b, a + b - position, position)  # reversed B
    source = tf.where(position == b, a, source)  # the <sep> after A
    source = tf.where((position > b) & (position <= a + b), a + b - position, source)
    new_segments = tf.where(position <= b, 0, tf.where(position <= a + b + 1, 1, segment_ids))
    backward = (tf.range(batch_size) >= batch_size // 2)[:, None]
    result = dict(batch)
    for name in (TOKEN_IDS, MASKED_TOKENS, ORDER_DRAWS):
        result[name] = tf.where(backward, tf.gather(batch[name], source, batch_dims=1), batch[name])
    result[SEGMENT_IDS] = tf.where(backward & real, new_segments, segment_ids)
    return result


class _MemoryStreams:
    """`global_batch` contiguous token streams per epoch, advancing by `reuse_len` per batch."""

    def __init__(self, tokenizer, ids, seq_len, reuse_len, global_batch, bidirectional, seed):
        self.tokenizer = tokenizer
        self.ids = ids
        self.seq_len = seq_len
        self.reuse_len = reuse_len
        self.global_batch = global_batch
        self.bidirectional = bidirectional
        self.seed = seed
        self.continuation = tf.constant(tokenizer.continuation_mask)
        self.backward = tf.range(global_batch) >= global_batch // 2 if bidirectional else None

    def batches(self, corpus, permutation, window_size, start, epochs):
        """The global batches from `start` on, their targets and order drawn."""
        if start.window or start.offset % self.global_batch:
            raise ValueError(
                f"`start`={start} is not where a batch of XLNet's memory streams starts: with "
                "memory, batches start at window 0 and at offsets that are multiples of the "
                f"global batch ({self.global_batch} rows)."
            )
        first_epoch, first_batch = start.epoch, start.offset // self.global_batch
        windows = document_windows(
            corpus, seed=self.seed, window_size=window_size, epoch=first_epoch, epochs=epochs
        )

        def window_tokens(epoch, window, documents):
            del window
            return epoch, _tokenize(self.tokenizer, documents).flat_values

        tokens = windows.map(
            graph_code(window_tokens), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
        )
        # One element per epoch (each starts at window 0): the streams need its total length.
        whole = tokens.ragged_batch(windows_per_epoch(len(corpus), window_size))

        def epoch_batches(epoch, tokens):
            epoch = epoch[0]
            streams, num_batches = self._streams(tokens.flat_values)
            # Every epoch has the same tokens (in another order), so as many batches: an
            # offset past the first epoch's last batch goes on into the epochs after it.
            first = tf.maximum(first_batch - (epoch - first_epoch) * num_batches, 0)
            steps = tf.data.Dataset.range(tf.minimum(first, num_batches), num_batches)
            # Cheap slices only: the batches before `first` are never made, and the targets
            # are drawn below, in parallel.
            return steps.map(graph_code(lambda step: self._layout(streams, epoch, step)))

        def draw(batch):
            key = key_of(batch[_BATCH_KEY], "permutation")
            drawn = permutation.draw(batch[TOKEN_IDS], batch[PADDING_MASK], key, self.backward)
            return {**{k: v for k, v in batch.items() if k != _BATCH_KEY}, **drawn}

        batches = whole.flat_map(graph_code(epoch_batches))
        return batches.map(
            graph_code(draw), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
        )

    def _streams(self, tokens):
        """`[global_batch, L]` streams of an epoch's tokens `[N]`, and the number of batches."""
        num_streams = self.global_batch // 2 if self.bidirectional else self.global_batch
        stream_len = tf.shape(tokens, out_type=tf.int64)[0] // num_streams
        streams = tf.reshape(
            tokens[: num_streams * stream_len], tf.stack([num_streams, stream_len])
        )
        if self.bidirectional:
            streams = tf.concat([streams, tf.reverse(streams, axis=[1])], axis=0)  # [B, L]
        window = self.seq_len - NUM_SPECIAL_TOKENS  # stream tokens per example
        num_batches = tf.maximum((stream_len - window) // self.reuse_len + 1, 0)
        check = tf.debugging.assert_positive(
            num_batches,
            message=(
                "The corpus is too short for one XLNet batch with memory: it needs the global "
                f"batch x (seq_len - 3) = {self.global_batch} x {window} tokens (half as many "
                "with bidirectional=True)."
            ),
        )
        with tf.control_dependencies([check]):
            return streams, tf.identity(num_batches)

    def _layout(self, streams, epoch, step):
        """Batch `step` of an epoch's `streams`: `memory A <sep> B <sep> <cls>` from the next
        `seq_len - 3` tokens of each stream, A and B split at a uniformly chosen boundary
        between words (each gets at least one token; between any two tokens when the text
        after the memory is a single word). Also its position, `stream_start` and its key."""
        reuse_len, seq_len, rows = self.reuse_len, self.seq_len, self.global_batch
        begin = step * reuse_len
        text = streams[:, begin : begin + seq_len - NUM_SPECIAL_TOKENS]  # [B, seq_len - 3]
        key = key_of(window_key(self.seed, epoch, 0), "batch", step)
        # Candidate k in [1, pair_len - 1]: A keeps k tokens after the memory part. It falls
        # between words unless the token after the cut continues a word (reading forward),
        # or the token before it does (reading backward: "##" pieces come first).
        pair = text[:, reuse_len:]  # [B, pair_len]
        continuation = tf.gather(self.continuation, pair)
        inside_word = continuation[:, 1:]
        if self.bidirectional:
            inside_word = tf.where(self.backward[:, None], continuation[:, :-1], inside_word)
        draw = tf.random.stateless_uniform(
            tf.shape(inside_word), key_of(key, "split"), 1.0, 2.0, alg="philox"
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
        offsets = step * rows + tf.range(rows, dtype=tf.int64)
        return {
            TOKEN_IDS: token_ids,
            SEGMENT_IDS: tf.broadcast_to(segment_ids, tf.shape(token_ids)),
            PADDING_MASK: tf.ones_like(token_ids),
            STREAM_START: tf.fill([rows], tf.cast(step == 0, tf.int32)),
            STREAM_POSITION: tf.stack(
                [tf.fill([rows], epoch), tf.zeros([rows], tf.int64), offsets], axis=1
            ),
            _BATCH_KEY: key,
        }
