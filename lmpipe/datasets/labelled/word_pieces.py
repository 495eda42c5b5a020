"""Words to WordPiece model inputs with a label on each word's first piece, in graph ops.

Token classification (BERT section 5.3) labels words, and the encoder reads pieces: each word
is tokenized alone by the `WordPieceTokenizer` (its normalization, punctuation split and
WordPiece, so a CoNLL word "U.S." gives the pieces of "u . s ."), the word's label goes on its
first piece, and every other piece, `[CLS]`, `[SEP]` and padding get `IGNORED` (left out of
the loss and the metrics). A word whose text gives no piece (only characters the tokenizer
drops) is one `[UNK]` piece, so that every word has a first piece.

Sequences longer than `seq_len` lose their last pieces; a word whose first piece is cut has
no prediction (`word_count - tagged_words` counts them per sentence).
"""

import tensorflow as tf

from lmpipe.contract import LABELS
from lmpipe.datasets.examples.packing import pack_segments
from lmpipe.tokenizers.bert_words import clean, split_words

IGNORED = -1
"""The label of the positions that are not a word's first piece."""


def split_text_words(texts):
    """The words of raw `texts` (string `[N]`) as the tokenizer's first split finds them,
    as written (not lower-cased): string `[N, (words)]`.

    Whitespace separates words, and every punctuation character and CJK ideograph is a word of
    its own; characters the tokenizer drops (controls, format characters, U+FFFD) are removed
    first. Tokenizing these words one by one gives the pieces of tokenizing the text.
    """
    return split_words(clean(tf.convert_to_tensor(texts, tf.string)))


def word_pieces(tokenizer, words):
    """The pieces of each word of ragged string `[B, (words)]`: int32 `[B, (words), (pieces)]`,
    at least one piece a word (`[UNK]` for a word that gives none)."""
    pieces = tokenizer.tokenize(words)  # [B, (W), (P)]
    per_word = pieces.values  # [W_total, (P)]
    unk = tf.fill([per_word.nrows(), 1], tf.constant(tokenizer.unk_id, per_word.dtype))
    padded = tf.concat(
        [per_word, tf.RaggedTensor.from_tensor(unk, row_splits_dtype=per_word.row_splits.dtype)],
        axis=1,
    )  # [W_total, (P + 1)]
    keep = tf.maximum(per_word.row_lengths(), 1)
    positions = tf.ragged.range(padded.row_lengths(), dtype=keep.dtype)
    fixed = tf.ragged.boolean_mask(padded, positions < keep[:, None])
    return pieces.with_values(fixed)


def pack_words(tokenizer, words, seq_len, labels=None):
    """Model inputs for sentences of words, with labels on first pieces.

    Args:
        tokenizer: a `WordPieceTokenizer`.
        words: string ragged `[B, (words)]`.
        seq_len: the length of the packed sequences, `[CLS]` and `[SEP]` included.
        labels: optional int ragged `[B, (words)]`, one label per word.

    Returns:
        A dict of int32 tensors: `token_ids`, `segment_ids`, `padding_mask` `[B, seq_len]`
        (`[CLS] pieces [SEP]`, cut to `seq_len - 2` pieces, then `[PAD]`); `first_piece`
        `[B, seq_len]`, 1 on the first piece of each word; `word_index` `[B, seq_len]`, the
        index of the word of each piece, -1 on `[CLS]`, `[SEP]` and padding; `word_count`
        `[B]`, the words of each sentence, and `tagged_words` `[B]`, those whose first piece
        fits; and with `labels`, `labels` `[B, seq_len]`: each word's label on its first
        piece, `IGNORED` elsewhere.
    """
    pieces = word_pieces(tokenizer, words)  # [B, (W), (P)]
    per_word = pieces.values  # [W_total, (P)]
    first = tf.ragged.range(per_word.row_lengths()) == 0  # [W_total, (P)]
    # The index of each word within its sentence, on each of its pieces.
    index_in_sentence = tf.ragged.range(pieces.row_lengths()).flat_values  # [W_total]
    word_index = tf.gather(index_in_sentence, per_word.value_rowids())  # [P_total]
    limit = seq_len - 2

    def by_sentence(flat_values):  # [P_total] -> [B, (pieces)], cut to seq_len - 2
        return pieces.with_values(per_word.with_flat_values(flat_values)).merge_dims(1, 2)[
            :, :limit
        ]

    ids = by_sentence(per_word.flat_values)
    packed = pack_segments(tokenizer, [ids], seq_len)
    first_piece = by_sentence(tf.cast(first.flat_values, tf.int32))
    result = dict(packed)
    result["first_piece"] = _pad_around(first_piece, 0, seq_len)
    result["word_index"] = _pad_around(by_sentence(tf.cast(word_index, tf.int32)), -1, seq_len)
    result["word_count"] = tf.cast(words.row_lengths(), tf.int32)
    result["tagged_words"] = tf.reduce_sum(first_piece, axis=1)
    if labels is not None:
        word_labels = tf.gather(tf.cast(labels.flat_values, tf.int32), per_word.value_rowids())
        piece_labels = tf.where(first.flat_values, word_labels, IGNORED)
        result[LABELS] = _pad_around(by_sentence(piece_labels), IGNORED, seq_len)
    return result


def _pad_around(values, fill, seq_len):
    """Ragged int32 `[B, (n)]` (n <= seq_len - 2) to dense `[B, seq_len]`: `fill` at `[CLS]`,
    the values, then `fill` (at `[SEP]` and padding)."""
    column = tf.fill([values.nrows(), 1], tf.constant(fill, tf.int32))
    column = tf.RaggedTensor.from_tensor(column, row_splits_dtype=values.row_splits.dtype)
    return tf.concat([column, values], axis=1).to_tensor(fill, shape=[None, seq_len])
