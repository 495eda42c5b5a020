"""Packing token segments into model inputs, padded, in graph ops.

Three layouts: BERT's `[CLS] A [SEP] (B [SEP])`, XLNet's `A <sep> (B <sep>) <cls>`, where the
tokenizer's `[SEP]` and `[CLS]` play `<sep>` and `<cls>`, and `<cls>` has segment id 2, and the
causal language models' `[SEP] A [SEP]` (their documents end with `[SEP]`, so a text reads as
a document after another).
Shared by the pretraining examples, the fine-tuning pipeline and the serving signatures, so
that a text is packed the same way in training and in serving.
"""

import tensorflow as tf

from lmpipe.arguments import check_number
from lmpipe.contract import MASK_POSITIONS, PADDING_MASK, SEGMENT_IDS, TOKEN_IDS, min_seq_len

LAYOUTS = ("bert", "xlnet", "causal")


def min_sequence_length(segments):
    """The shortest packed sequence of `segments` segments: a `[SEP]` per segment and one
    `[CLS]` (in either layout) plus one token of each segment (the contract's rule)."""
    return min_seq_len("classification", pairs=segments == 2)


def check_sequence_length(seq_len, segments=1, max_length=None, limit="the model's positions"):
    """Raise a ValueError naming `seq_len` unless it is an integer that holds the special
    tokens and one token of each of `segments` segments, and is at most `max_length`.

    Training examples and serving signatures are packed the same way, so training and export
    check their lengths with this one rule.

    Args:
        seq_len: the length of the packed sequences, special tokens included.
        segments: 1 (a text) or 2 (a pair).
        max_length: the longest length the model takes (its position table), or None.
        limit: what sets `max_length`, for the message.
    """
    minimum = min_sequence_length(segments)
    check_number("seq_len", seq_len, integer=True)
    if seq_len < minimum:
        what = "a text" if segments == 1 else "a pair"
        raise ValueError(
            f"`seq_len` must be at least {minimum} for {what} (an integer: {segments + 1} "
            f"special tokens and one token per segment), got seq_len={seq_len!r}."
        )
    if max_length is not None and seq_len > max_length:
        raise ValueError(
            f"`seq_len` must be at most {max_length} ({limit}), got seq_len={seq_len!r}."
        )


def pack_segments(tokenizer, segments, seq_len, layout="bert"):
    """Pack ragged `[B, (pieces)]` segments that already fit, padded with `[PAD]` to `seq_len`.

    Layout "bert": `[CLS] A [SEP]` or `[CLS] A [SEP] B [SEP]`; segment ids 0 up to the first
    `[SEP]` and 1 after it. Layout "xlnet": `A [SEP] [CLS]` or `A [SEP] B [SEP] [CLS]`; segment
    ids 0 for A and its `[SEP]`, 1 for B and its `[SEP]`, 2 for `[CLS]`, 0 on padding. Layout
    "causal": as "bert" with `[SEP]` in place of `[CLS]`.

    Returns:
        `{"token_ids", "segment_ids", "padding_mask"}`, int32 `[B, seq_len]`, padding mask 1
        on real tokens.
    """
    if layout not in LAYOUTS:
        raise ValueError(f"`layout` must be one of {LAYOUTS}, got layout={layout!r}.")
    parts = []  # (segment id, a token id or a ragged segment), in order
    if layout != "xlnet":
        parts.append((0, tokenizer.sep_id if layout == "causal" else tokenizer.cls_id))
    for index, segment in enumerate(segments):
        parts += [(index, segment), (index, tokenizer.sep_id)]
    if layout == "xlnet":
        parts.append((2, tokenizer.cls_id))
    # Each output position is read from the part that covers it, in dense [B, seq_len] ops:
    # about 60 ops for a pair where tensorflow-text's combine_segments and pad_model_inputs
    # make 550 (graph building is most of a pipeline's start-up), with the same result.
    position = tf.range(seq_len)[None, :]  # [1, S]
    rows = segments[0].nrows(out_type=tf.int32)
    token_ids = tf.fill(tf.stack([rows, seq_len]), tokenizer.pad_id)
    segment_ids = tf.zeros_like(token_ids)
    start = tf.zeros_like(token_ids[:, :1])  # [B, 1] the first position of the part
    for segment_id, part in parts:
        if isinstance(part, tf.RaggedTensor):
            end = start + tf.cast(part.row_lengths(), tf.int32)[:, None]
            here = (position >= start) & (position < end)
            pieces = tf.cast(part.to_tensor(0, shape=[None, seq_len]), tf.int32)  # [B, S]
            index = tf.clip_by_value(position - start, 0, seq_len - 1)
            token_ids = tf.where(here, tf.gather(pieces, index, batch_dims=1), token_ids)
        else:  # a special token
            here = tf.equal(position, start)
            token_ids = tf.where(here, int(part), token_ids)
            end = start + 1
        if segment_id:
            segment_ids = tf.where(here, segment_id, segment_ids)
        start = end
    return {
        TOKEN_IDS: token_ids,
        SEGMENT_IDS: segment_ids,
        PADDING_MASK: tf.cast(position < start, tf.int32),
    }


def pack_texts(tokenizer, texts, seq_len, text_pairs=None, layout="bert"):
    """Model inputs for texts (or text pairs), in graph ops: int32 `[B, seq_len]` each.

    `[CLS] text [SEP]`, or `[CLS] text [SEP] text_pair [SEP]`, then `[PAD]`s; `segment_ids`
    are 0 up to the first `[SEP]` and 1 after it; `padding_mask` is 1 on real tokens. An empty
    text gives no piece (`[CLS] [SEP]`). With `layout="xlnet"`, `text [SEP] [CLS]` or
    `text [SEP] text_pair [SEP] [CLS]` (see `pack_segments`).

    Texts too long are cut from the end: a single text to `seq_len - 2` pieces; a pair to
    `seq_len - 3` pieces in all, always cutting the longer side (the second one on a tie), as
    BERT's `truncate_seq_pair` does but deterministically.

    Args:
        tokenizer: a `WordPieceTokenizer`.
        texts: string `[B]`.
        seq_len: the length of the packed sequences.
        text_pairs: optional string `[B]`, the second segment of each example.
        layout: "bert", "xlnet" or "causal" (see `pack_segments`).

    Returns:
        `{"token_ids", "segment_ids", "padding_mask"}`, int32 `[B, seq_len]`.
    """
    if text_pairs is None:
        segments = [tokenizer.tokenize(texts)[:, : seq_len - 2]]  # [B, (pieces)]
    else:
        # One tokenizer call for both sides: half the graph, and one op launch per request.
        batch_size = tf.size(texts)
        pieces = tokenizer.tokenize(tf.concat([texts, text_pairs], axis=0))  # [2B, (pieces)]
        segments = truncate_longest_first(pieces[:batch_size], pieces[batch_size:], seq_len - 3)
    return pack_segments(tokenizer, segments, seq_len, layout)


def pack_masked_texts(tokenizer, texts, seq_len, max_masks):
    """Masked-LM inputs for texts that mark the tokens to predict with `[MASK]`, in graph ops.

    Each text is split at its `[MASK]` marks (the tokenizer's mask token, written as it is),
    the parts are tokenized as usual and joined with the mask id between them, then packed as
    `[CLS] text [SEP]` (cut to `seq_len - 2` pieces) and padded to `seq_len`.

    Args:
        tokenizer: a `WordPieceTokenizer`.
        texts: string `[B]`.
        seq_len: the length of the packed sequences.
        max_masks: the mask positions returned per text (the masked-LM head's predictions);
            later masks are not.

    Returns:
        `{"token_ids", "segment_ids", "padding_mask", "mask_positions"}` (int32 `[B, seq_len]`
        and `[B, max_masks]`, positions 0 past a text's masks), `"mask_count"` (int32 `[B]`,
        the masks returned) and `"token_count"` (int32 `[B]`, the tokens of `[CLS] text [SEP]`
        before any cut).

    Example:

    >>> from lmpipe.tokenizers.wordpiece import WordPieceTokenizer
    >>> tokenizer = WordPieceTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "to", "be"])
    >>> packed = pack_masked_texts(tokenizer, ["to [MASK] or"], seq_len=6, max_masks=2)
    >>> packed["token_ids"].numpy().tolist(), packed["mask_positions"].numpy().tolist()
    ([[2, 5, 4, 1, 3, 0]], [[2, 0]])
    """
    texts = tf.convert_to_tensor(texts, tf.string)
    mask_token = tokenizer.id_to_token(tokenizer.mask_id)
    parts = tf.strings.split(texts, sep=mask_token)  # [B, (parts)]
    pieces = tokenizer.tokenize(parts.flat_values)  # [P, (pieces)]
    count = tf.shape(parts.flat_values, out_type=tf.int64)[0]
    mask = tf.RaggedTensor.from_row_lengths(
        tf.fill([count], tf.constant(tokenizer.mask_id, pieces.dtype)), tf.ones([count], tf.int64)
    )
    # Every part followed by a mask, then the text's last mask (after its last part) dropped.
    joined = tf.concat([pieces, mask], axis=1)  # [P, (pieces + 1)]
    ids = tf.RaggedTensor.from_row_splits(joined, parts.row_splits).merge_dims(1, 2)
    ids = ids[:, :-1]  # [B, (tokens)]
    packed = pack_segments(tokenizer, [ids[:, : seq_len - 2]], seq_len)
    token_ids = packed[TOKEN_IDS]
    positions = tf.ragged.boolean_mask(
        tf.broadcast_to(tf.range(seq_len, dtype=tf.int32), tf.shape(token_ids)),
        token_ids == tokenizer.mask_id,
    )[:, :max_masks]
    return {
        **packed,
        MASK_POSITIONS: positions.to_tensor(0, shape=[None, max_masks]),
        "mask_count": tf.cast(positions.row_lengths(), tf.int32),
        "token_count": tf.cast(ids.row_lengths(), tf.int32) + 2,
    }


def truncate_longest_first(first, second, max_tokens):
    """Cut ragged `[B, (pieces)]` pairs to at most `max_tokens` pieces per pair, from the end.

    The result of BERT's `truncate_seq_pair` (remove the last piece of the longer segment,
    of the second one on a tie, until the pair fits), computed in closed form per row.
    """
    a = first.row_lengths()  # [B]
    b = second.row_lengths()
    fits = a + b <= max_tokens
    a_is_short = (a < b) & (2 * a <= max_tokens)  # only the longer second segment is cut
    b_is_short = (b < a) & (2 * b <= max_tokens)
    # Otherwise both end up cut to halves, the first segment keeping the odd piece.
    half = tf.constant(max_tokens // 2, a.dtype)
    keep_a = tf.where(fits | a_is_short, a, tf.where(b_is_short, max_tokens - b, max_tokens - half))
    keep_b = tf.where(fits | b_is_short, b, tf.where(a_is_short, max_tokens - a, half))
    return [_keep_first(first, keep_a), _keep_first(second, keep_b)]


def _keep_first(ragged, lengths):
    """The first `lengths[i]` values of each row `i` of a ragged `[B, (n)]` tensor."""
    positions = tf.ragged.range(ragged.row_lengths())  # [B, (n)]
    return tf.ragged.boolean_mask(ragged, positions < tf.expand_dims(lengths, 1))


def cut_to_longest(features):
    """Right-padded packed `features` (`{name: [B, S]}`, with `padding_mask`) cut to the
    longest sequence among them (at least one position): a model run on them costs what the
    batch's texts need, not `seq_len`.

    >>> cut = cut_to_longest({"token_ids": tf.constant([[2, 7, 3, 0], [2, 3, 0, 0]]),
    ...                       "padding_mask": tf.constant([[1, 1, 1, 0], [1, 1, 0, 0]])})
    >>> cut["token_ids"].numpy().tolist()
    [[2, 7, 3], [2, 3, 0]]
    """
    longest = tf.maximum(tf.reduce_max(tf.reduce_sum(features[PADDING_MASK], axis=1)), 1)
    return {name: value[:, :longest] for name, value in features.items()}
