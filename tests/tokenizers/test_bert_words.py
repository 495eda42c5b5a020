"""lmpipe.tokenizers.bert_words: BERT's cleaning, normalization and word splitting, which the
WordPiece tokenizer, its learner and the labelled datasets share."""

import tensorflow as tf

from lmpipe.tokenizers.bert_words import clean, has_words, normalize, split_words
from lmpipe.tokenizers.wordpiece import WordPieceTokenizer


def words(texts):
    return [[word.decode() for word in row] for row in texts.to_list()]


def test_uncased_words_are_lower_cased_without_accents_and_split_at_punctuation_and_cjk():
    texts = tf.constant(["Héllo, Wörld!中文 x\u200bY", "\x00 \ufffd"])
    assert words(split_words(normalize(texts, lower_case=True))) == [
        ["hello", ",", "world", "!", "中", "文", "xy"],
        [],
    ]


def test_cased_words_keep_case_and_accents_composed():
    texts = tf.constant(["Cafe\u0301 NAÏVE"])
    assert words(split_words(normalize(texts, lower_case=False))) == [["Café", "NAÏVE"]]


def test_clean_drops_controls_format_characters_and_replacement_characters_only():
    assert clean(tf.constant("a\x00b\u200bc\ufffd d\te")).numpy().decode() == "abc d\te"


def test_has_words_is_false_for_text_of_whitespace_and_dropped_characters():
    flags = has_words(tf.constant(["", " \t", "\u200b\ufffd", "x", "。"]))
    assert flags.numpy().tolist() == [False, False, False, True, True]


def test_the_words_tokenize_to_the_pieces_of_the_whole_text():
    tokenizer = WordPieceTokenizer(
        ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", ",", "world", "!", "##s", "中"]
    )
    text = "Hello, worlds!中"
    pieces_of_words = tokenizer.tokenize(split_words(normalize(tf.constant([text]), True)))
    assert pieces_of_words.merge_dims(1, 2).to_list() == tokenizer.tokenize([text]).to_list()
