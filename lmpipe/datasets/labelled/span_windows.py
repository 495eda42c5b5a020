"""Question-answering inputs: `[CLS] question [SEP] context window [SEP]`, in graph ops, with
the character offsets of every context piece.

BERT's SQuAD features (google-research/bert `run_squad.py`): the question is cut to
`max_query_len` pieces; a context longer than the room left (`seq_len - 3 - question pieces`)
is split into windows that start every `doc_stride` pieces, the last one reaching the
context's end, so a question gets several windows and every piece is in at least one.

Offsets: the context is split into words with the tokenizer's own word rules (whitespace,
punctuation and CJK characters, `lmpipe.tokenizers.bert_words`), with each word's character
span in the original text; each word is tokenized alone, which gives the pieces of the whole
text (normalization works character by character and never makes a word boundary). A piece's
span is its share of its word (piece lengths, "##" removed, counted along the word) where the
pieces spell the word character for character, else the whole word (an `[UNK]`, or a word that
normalization shortens, e.g. a decomposed accent). So `context[char_start:char_end]` of any
run of pieces is an exact substring of the context.

`span_windows` runs eagerly (the pipeline's training data, made once) and inside the exported
SavedModel, so training and serving cut windows the same way.
"""

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from lmpipe.datasets.examples.packing import pack_segments
from lmpipe.tokenizers.bert_words import KEPT_DELIMITERS, WORD_DELIMITERS

NO_OFFSET = -1
"""`char_start` / `char_end` / `piece_index` of a position outside the context."""


def piece_lengths(tokenizer):
    """int32 `[vocabulary_size]`: the characters each piece spells ("##" not counted); 0 for
    the bracketed special tokens (`[UNK]` spells nothing it can be aligned with)."""
    special = set(tokenizer.special_token_ids)
    lengths = [
        0 if index in special else len(token) - (2 if token.startswith("##") else 0)
        for index, token in enumerate(tokenizer.vocabulary)
    ]
    return np.array(lengths, np.int32)


def context_pieces(tokenizer, contexts, lengths=None):
    """The WordPiece ids of `[B]` contexts with each piece's character span.

    Args:
        tokenizer: a `WordPieceTokenizer`.
        contexts: string `[B]`.
        lengths: `piece_lengths(tokenizer)` (computed when None; pass it in a function traced
            often).

    Returns:
        `(ids, char_start, char_end)`, int32 ragged `[B, (pieces)]` each; the ids equal
        `tokenizer.tokenize(contexts)`.
    """
    contexts = tf.convert_to_tensor(contexts, tf.string)
    lengths = tf.constant(piece_lengths(tokenizer) if lengths is None else lengths)
    words, byte_start, _ = tf_text.regex_split_with_offsets(
        contexts, WORD_DELIMITERS, KEPT_DELIMITERS
    )  # [B, (W)]
    flat_words = words.flat_values  # [W_total]
    # Character offsets of the words: the characters before each word's first byte.
    prefix = tf.strings.substr(
        tf.gather(contexts, words.value_rowids()), tf.zeros_like(byte_start.flat_values),
        byte_start.flat_values,
    )  # fmt: skip
    word_start = tf.strings.length(prefix, unit="UTF8_CHAR")  # [W_total]
    word_length = tf.strings.length(flat_words, unit="UTF8_CHAR")
    pieces = tf.cast(tokenizer.tokenize(flat_words), tf.int32)  # [W_total, (p)]
    spelled = tf.gather(lengths, pieces)  # [W_total, (p)]
    exact = tf.reduce_sum(spelled, axis=1) == word_length  # [W_total]
    within = tf.cumsum(spelled, axis=1, exclusive=True)
    exact_pieces = tf.gather(exact, pieces.value_rowids())  # [P_total]
    first = tf.gather(word_start, pieces.value_rowids())
    last = first + tf.gather(word_length, pieces.value_rowids())
    piece_start = tf.where(exact_pieces, first + within.flat_values, first)
    piece_end = tf.where(exact_pieces, piece_start + spelled.flat_values, last)

    def by_context(values):  # [P_total] -> [B, (pieces)]
        per_word = pieces.with_flat_values(values)
        return tf.RaggedTensor.from_row_splits(per_word, words.row_splits).merge_dims(1, 2)

    return by_context(pieces.flat_values), by_context(piece_start), by_context(piece_end)


def span_windows(tokenizer, questions, contexts, seq_len, max_query_len, doc_stride, lengths=None):
    """The model inputs of `[B]` questions about `[B]` contexts: `W >= B` windows.

    Args:
        tokenizer: a `WordPieceTokenizer`.
        questions, contexts: string `[B]`.
        seq_len: the length of every window, special tokens included.
        max_query_len: a question keeps its first `max_query_len` pieces.
        doc_stride: pieces between the starts of consecutive windows of a context; at most
            `seq_len - 3 - max_query_len` (the room of a window), so no piece is skipped.
        lengths: `piece_lengths(tokenizer)`, see `context_pieces`.

    Returns:
        A dict of int32 tensors: `token_ids`, `segment_ids` (0 for `[CLS] question [SEP]`, 1
        for `context [SEP]`), `padding_mask` `[W, seq_len]`; `example_index` `[W]` (the
        question of each window, windows in order); `piece_index`, `char_start`, `char_end`
        `[W, seq_len]`: for context positions the piece's index among its context's pieces
        and its character span in the context, `NO_OFFSET` (-1) elsewhere.
    """
    query = tf.cast(tokenizer.tokenize(questions), tf.int32)[:, :max_query_len]  # [B, (q)]
    ids, char_start, char_end = context_pieces(tokenizer, contexts, lengths)  # [B, (P)]
    query_length = query.row_lengths()  # [B] int64
    pieces = ids.row_lengths()
    room = seq_len - 3 - query_length  # context pieces a window holds
    stride = tf.constant(doc_stride, tf.int64)
    windows = 1 + (tf.maximum(pieces - room, 0) + stride - 1) // stride  # [B]
    example = tf.repeat(tf.range(tf.size(windows, out_type=tf.int64)), windows)  # [W]
    first = tf.ragged.range(windows).flat_values * stride  # [W], first piece of each window
    count = tf.minimum(tf.gather(room, example), tf.gather(pieces, example) - first)
    begin = tf.gather(ids.row_splits, example) + first  # [W], in the flat pieces
    flat = tf.ragged.range(begin, begin + count)  # [W, (count)]
    window_ids = tf.gather(ids.flat_values, flat)
    packed = pack_segments(tokenizer, [tf.gather(query, example), window_ids], seq_len)
    before = tf.gather(query_length, example) + 2  # [CLS] question [SEP]

    def at_context_positions(values):  # ragged [W, (count)] -> [W, seq_len], -1 elsewhere
        lead = tf.RaggedTensor.from_row_lengths(tf.fill([tf.reduce_sum(before)], NO_OFFSET), before)
        rows = tf.concat([lead, tf.cast(values, tf.int32)], axis=1)
        return rows.to_tensor(NO_OFFSET, shape=[None, seq_len])

    row_start = tf.gather(ids.row_splits, example)[:, None]
    return {
        **packed,
        "example_index": tf.cast(example, tf.int32),
        "piece_index": at_context_positions(flat - row_start),
        "char_start": at_context_positions(tf.gather(char_start.flat_values, flat)),
        "char_end": at_context_positions(tf.gather(char_end.flat_values, flat)),
    }


def answer_positions(windows, answer_spans):
    """The start and end positions of each window's answer, numpy.

    A window holds the answer when it holds the first and the last piece that overlap the
    answer's characters; it then points at them, else at `[CLS]` (position 0), as does every
    window of a question without an answer.

    Args:
        windows: `span_windows`' result as numpy arrays.
        answer_spans: int `[B, 2]`: per question its answer's `[start, end)` characters, or
            `(-1, -1)` for no answer.

    Returns:
        `(start_positions, end_positions, covered)`: int32 `[W]` each, and bool `[B]`: whether
        some piece overlaps the answer of a question with one (False means the answer's text
        gives no piece, e.g. it is only characters the tokenizer drops).
    """
    answer_spans = np.asarray(answer_spans, np.int64).reshape(-1, 2)
    example = windows["example_index"]
    piece = windows["piece_index"].astype(np.int64)
    start, end = windows["char_start"], windows["char_end"]
    first_char = answer_spans[example, 0][:, None]  # [W, 1]
    last_char = answer_spans[example, 1][:, None]
    overlaps = (piece >= 0) & (end > first_char) & (start < last_char) & (first_char >= 0)
    big = np.iinfo(np.int64).max
    first_piece = np.full(len(answer_spans), big)
    last_piece = np.full(len(answer_spans), -1)
    np.minimum.at(first_piece, example, np.where(overlaps, piece, big).min(axis=1))
    np.maximum.at(last_piece, example, np.where(overlaps, piece, -1).max(axis=1))
    has_start = (piece == first_piece[example][:, None]) & overlaps
    has_end = (piece == last_piece[example][:, None]) & overlaps
    inside = has_start.any(axis=1) & has_end.any(axis=1)
    start_positions = np.where(inside, has_start.argmax(axis=1), 0).astype(np.int32)
    end_positions = np.where(inside, has_end.argmax(axis=1), 0).astype(np.int32)
    covered = (last_piece >= 0) | (answer_spans[:, 0] < 0)
    return start_positions, end_positions, covered
