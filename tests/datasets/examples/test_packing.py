"""Packing in graph ops: texts with `[MASK]` marks for the masked LM, beside plain texts."""

import numpy as np

from lmpipe.datasets.examples.packing import pack_masked_texts, pack_texts
from lmpipe.tokenizers.wordpiece import WordPieceTokenizer

VOCABULARY = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "to", "be", "or", "not", "##s"]
CLS, SEP, MASK, TO, BE, OR, NOT = 2, 3, 4, 5, 6, 7, 8


def packed(texts, seq_len=8, max_masks=3):
    tokenizer = WordPieceTokenizer(VOCABULARY)
    return {
        name: value.numpy().tolist()
        for name, value in pack_masked_texts(tokenizer, texts, seq_len, max_masks).items()
    }


def test_masks_stand_where_the_text_marks_them_between_tokenized_parts():
    result = packed(["to [MASK] or not to [MASK]", "[MASK][MASK] be", "Tos[MASK]"])
    assert result["token_ids"] == [
        [CLS, TO, MASK, OR, NOT, TO, MASK, SEP],
        [CLS, MASK, MASK, BE, SEP, 0, 0, 0],
        [CLS, TO, 9, MASK, SEP, 0, 0, 0],  # "tos" is "to ##s"; the mask is its own token
    ]
    assert result["mask_positions"] == [[2, 6, 0], [1, 2, 0], [3, 0, 0]]
    assert result["mask_count"] == [2, 2, 1]
    assert result["token_count"] == [8, 5, 5]
    assert result["padding_mask"][1] == [1, 1, 1, 1, 1, 0, 0, 0]
    assert result["segment_ids"] == [[0] * 8] * 3


def test_texts_are_cut_to_seq_len_and_masks_to_max_masks():
    result = packed(["to be or not to be [MASK] [MASK]", "[MASK] [MASK] [MASK] [MASK]"])
    assert result["token_ids"][0] == [CLS, TO, BE, OR, NOT, TO, BE, SEP]  # the masks were cut
    assert result["mask_count"] == [0, 3] and result["token_count"] == [10, 6]
    assert result["mask_positions"][1] == [1, 2, 3]


def test_without_marks_it_packs_as_pack_texts():
    tokenizer = WordPieceTokenizer(VOCABULARY)
    texts = ["to be or not", "", "nots to be or not to be"]
    masked = pack_masked_texts(tokenizer, texts, 8, 2)
    plain = pack_texts(tokenizer, np.array(texts, dtype=object), 8)
    for name, value in plain.items():
        np.testing.assert_array_equal(masked[name], value)
    assert masked["mask_count"].numpy().tolist() == [0, 0, 0]
    assert masked["mask_positions"].numpy().tolist() == [[0, 0]] * 3
