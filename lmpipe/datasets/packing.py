"""Packing token segments into BERT's inputs: `[CLS] A [SEP] (B [SEP])`, padded, in graph ops.

Shared by the pretraining examples, the fine-tuning pipeline and the serving signatures, so
that a text is packed the same way in training and in serving.
"""

import tensorflow as tf
import tensorflow_text as tf_text


def pack_segments(tokenizer, segments, seq_len):
    """`[CLS] A [SEP]` (or `[CLS] A [SEP] B [SEP]`) from ragged `[B, (pieces)]` segments that
    already fit, padded with `[PAD]` to `seq_len`.

    Returns:
        `{"token_ids", "segment_ids", "padding_mask"}`, int32 `[B, seq_len]`: segment ids 0 up
        to the first `[SEP]` and 1 after it, padding mask 1 on real tokens.
    """
    token_ids, segment_ids = tf_text.combine_segments(
        segments, start_of_sequence_id=tokenizer.cls_id, end_of_segment_id=tokenizer.sep_id
    )
    token_ids, padding_mask = tf_text.pad_model_inputs(token_ids, seq_len, tokenizer.pad_id)
    segment_ids, _ = tf_text.pad_model_inputs(segment_ids, seq_len, 0)
    return {
        "token_ids": tf.cast(token_ids, tf.int32),
        "segment_ids": tf.cast(segment_ids, tf.int32),
        "padding_mask": tf.cast(padding_mask, tf.int32),
    }


def pack_texts(tokenizer, texts, seq_len, text_pairs=None):
    """BERT inputs for texts (or text pairs), in graph ops: int32 `[B, seq_len]` each.

    `[CLS] text [SEP]`, or `[CLS] text [SEP] text_pair [SEP]`, then `[PAD]`s; `segment_ids`
    are 0 up to the first `[SEP]` and 1 after it; `padding_mask` is 1 on real tokens. An empty
    text gives no piece (`[CLS] [SEP]`).

    Texts too long are cut from the end: a single text to `seq_len - 2` pieces; a pair to
    `seq_len - 3` pieces in all, always cutting the longer side (the second one on a tie), as
    BERT's `truncate_seq_pair` does but deterministically.

    Args:
        tokenizer: a `WordPieceTokenizer`.
        texts: string `[B]`.
        seq_len: the length of the packed sequences.
        text_pairs: optional string `[B]`, the second segment of each example.

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
    return pack_segments(tokenizer, segments, seq_len)


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
