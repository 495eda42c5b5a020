"""Words to pieces with labels on first pieces: values, truncation, parity with the tokenizer."""

import numpy as np
import pytest
import tensorflow as tf

from lmpipe.datasets import WordPieceTokenizer, pack_words, split_text_words
from lmpipe.datasets.labelled.word_pieces import IGNORED

VOCABULARY = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "to", "be", "un", "##aff", "##able"]
VOCABULARY += [".", "u", "s", "or", "iago", "'"]


@pytest.fixture(scope="module")
def tokenizer():
    return WordPieceTokenizer(VOCABULARY)


def test_a_words_label_goes_on_its_first_piece_and_the_rest_is_ignored(tokenizer):
    words = tf.ragged.constant([["To", "unaffable", "U.S.", "\u200b", "be"], ["or"]])
    labels = tf.ragged.constant([[1, 2, 3, 4, 5], [6]])
    packed = {k: v.numpy().tolist() for k, v in pack_words(tokenizer, words, 12, labels).items()}
    # [CLS] to un ##aff ##able u . s . [UNK] be [SEP]: "U.S." is 4 pieces, the zero-width
    # space gives none and becomes [UNK]
    assert packed["token_ids"] == [[2, 5, 7, 8, 9, 11, 10, 12, 10, 1, 6, 3], [2, 13, 3] + [0] * 9]
    assert packed["labels"][0] == [IGNORED, 1, 2, IGNORED, IGNORED, 3] + [IGNORED] * 3 + [4, 5, -1]
    assert packed["labels"][1] == [IGNORED, 6] + [IGNORED] * 10
    assert packed["first_piece"][0] == [0, 1, 1, 0, 0, 1, 0, 0, 0, 1, 1, 0]
    assert packed["word_index"][0] == [-1, 0, 1, 1, 1, 2, 2, 2, 2, 3, 4, -1]
    assert packed["padding_mask"][1] == [1, 1, 1] + [0] * 9
    assert packed["segment_ids"] == [[0] * 12] * 2
    assert packed["word_count"] == [5, 1] and packed["tagged_words"] == [5, 1]


def test_words_cut_by_seq_len_are_counted_and_get_no_label(tokenizer):
    words = tf.ragged.constant([["To", "unaffable", "be", "or"]])
    labels = tf.ragged.constant([[1, 2, 3, 4]])
    packed = pack_words(tokenizer, words, 6, labels)  # room for 4 pieces: to un ##aff ##able
    assert packed["token_ids"].numpy().tolist() == [[2, 5, 7, 8, 9, 3]]
    assert packed["labels"].numpy().tolist() == [[-1, 1, 2, -1, -1, -1]]
    assert packed["word_count"].numpy().tolist() == [4]
    assert packed["tagged_words"].numpy().tolist() == [2]
    # A word whose first piece fits keeps its label, even when its other pieces are cut.
    packed = pack_words(tokenizer, words, 4, labels)
    assert packed["labels"].numpy().tolist() == [[-1, 1, 2, -1]]
    assert packed["tagged_words"].numpy().tolist() == [2]


def test_pieces_of_the_split_words_are_the_pieces_of_the_text(bert_tokenizer):
    texts = [
        'Iago\'s wife, Emilia, said: "O, the Moor!" (Act V)',
        "Café naïve\tRÉSUMÉ — 1996-08-22, U.S.A.\u200b漢字 ok",
        "",
    ]
    words = split_text_words(texts)
    assert words.to_list()[0][:5] == [b"Iago", b"'", b"s", b"wife", b","]
    packed = pack_words(bert_tokenizer, words, 64)
    whole = bert_tokenizer.tokenize(texts)
    for row, expected in enumerate(whole.to_list()):
        mask = packed["padding_mask"][row].numpy().astype(bool)
        np.testing.assert_array_equal(packed["token_ids"][row].numpy()[mask][1:-1], expected)
