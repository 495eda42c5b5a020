"""Token spellings for ELMo's character CNN: bilm-tf's character ids, from each tokenizer."""

import pathlib

import numpy as np
import pytest

from lmpipe.datasets import BytePairTokenizer, SentencePieceTokenizer
from lmpipe.tokenizers.token_characters import token_characters

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
BOW, EOW, PAD = 259, 260, 261


def word(text, starts=True, width=50):
    """bilm-tf's spelling of `text` (a word; a continuation piece without `starts`)."""
    ids = ([BOW] if starts else []) + [b + 1 for b in text.encode("utf-8")] + [EOW]
    return ids + [PAD] * (width - len(ids))


def assert_spellings_distinct(table):
    assert len(np.unique(table, axis=0)) == len(table)


def test_wordpiece_tokens_are_spelled_as_bilm_tf_spells_words(bert_tokenizer):
    table = token_characters(bert_tokenizer)
    assert table.shape == (30522, 50) and table.dtype == np.int32
    row = {token: table[bert_tokenizer.token_id(token)].tolist() for token in (
        "[PAD]", "[CLS]", "[SEP]", "[MASK]", "the", "##ing", "ing", "##ß")}  # fmt: skip
    assert row["[PAD]"] == [0] * 50
    assert row["[CLS]"] == [BOW, 257, EOW] + [PAD] * 47  # bilm-tf's <S>
    assert row["[SEP]"] == [BOW, 258, EOW] + [PAD] * 47  # bilm-tf's </S>
    assert row["[MASK]"] == word("[MASK]")
    assert row["the"] == [BOW, 117, 105, 102, EOW] + [PAD] * 45
    assert row["ing"] == word("ing") and row["##ing"] == word("ing", starts=False)
    assert row["##ß"][:3] == [0xC3 + 1, 0x9F + 1, EOW]  # UTF-8 bytes + 1
    assert_spellings_distinct(table)  # the spelling of a token says which token it is


def test_byte_pair_and_sentence_piece_markers_become_the_begin_of_word_character():
    gpt2 = BytePairTokenizer.from_pretrained(FIXTURES / "byte_pair_gpt2")
    table = token_characters(gpt2, max_characters=8)
    assert table[gpt2.token_id("Ġthe")].tolist() == word("the", width=8)
    assert table[gpt2.token_id("Ġhe")].tolist() == word("he", width=8)
    assert table[gpt2.token_id("he")].tolist() == word("he", starts=False, width=8)
    # <|endoftext|> pads and separates documents: spelled as the end of a sentence.
    assert table[gpt2.pad_id].tolist() == [BOW, 258, EOW] + [PAD] * 5
    assert_spellings_distinct(token_characters(gpt2))  # 8 characters cut "Ġheaven(s)"

    albert = SentencePieceTokenizer.from_model_file(
        FIXTURES / "sentence_piece_albert.model", lower_case=True
    )
    table = token_characters(albert, max_characters=8)
    assert table[albert.token_id("▁the")].tolist() == word("the", width=8)
    assert table[albert.token_id("s")].tolist() == word("s", starts=False, width=8)


def test_long_tokens_are_cut_before_the_end_of_word(bert_tokenizer):
    table = token_characters(bert_tokenizer, max_characters=4)
    assert table[bert_tokenizer.token_id("the")].tolist() == [BOW, 117, 105, EOW]
    assert table[bert_tokenizer.token_id("##ing")].tolist() == [106, 111, 104, EOW]
    with pytest.raises(ValueError, match="max_characters"):
        token_characters(bert_tokenizer, max_characters=2)
