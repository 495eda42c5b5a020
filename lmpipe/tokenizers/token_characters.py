"""Each token of a vocabulary spelled as bilm-tf's character ids, for ELMo's character CNN.

bilm-tf (the published ELMo's code) spells a word as `[begin of word, its UTF-8 bytes, end of
word]`, padded with a padding character to `max_characters_per_token` (50), and a sentence
boundary as `[begin of word, begin/end of sentence, end of word]`. At inference it adds 1 to
every id, so that 0 is free for "no character" (the rows of padding tokens): the 262 ids
here are those. lmpipe's tokens are subword pieces, so the pieces that continue a word (a
WordPiece `##ing`, a SentencePiece or byte-level BPE piece without the word-start marker)
have no begin-of-word character: "ing" inside a word and "ing" as a word spell differently.
"""

import numpy as np

from lmpipe.arguments import check_positive_int

NO_CHARACTER = 0
"""The id of no character: every character of a padding token."""
BEGIN_OF_SENTENCE = 257
END_OF_SENTENCE = 258
BEGIN_OF_WORD = 259
END_OF_WORD = 260
PADDING_CHARACTER = 261
"""What fills a spelling after its end of word."""
NUM_CHARACTERS = 262
"""Character ids are in `[0, 262)`: a UTF-8 byte `b` is `b + 1`."""
MAX_CHARACTERS_PER_TOKEN = 50
"""bilm-tf's `max_characters_per_token`."""


def token_characters(tokenizer, max_characters=MAX_CHARACTERS_PER_TOKEN):
    """The character ids of every token of `tokenizer`: int32 `[vocabulary_size, max_characters]`.

    A piece that starts a word is `[BEGIN_OF_WORD, bytes + 1, END_OF_WORD]`, one that
    continues a word `[bytes + 1, END_OF_WORD]` (its text without the tokenizer's marker:
    WordPiece's "##", SentencePiece's "▁", byte-level BPE's "Ġ"), then `PADDING_CHARACTER`s;
    bytes past `max_characters` less the markers are cut. The separator (`[SEP]`, GPT-2's
    end of text: where a document ends and the next begins) is spelled as bilm-tf spells
    `</S>`, the classification token as `<S>`, the padding token (when it is not the
    separator) with `NO_CHARACTER`s; other special tokens (`[UNK]`, `[MASK]`, ...) are
    words of their own text.

    Example:

    >>> from lmpipe.tokenizers.wordpiece import WordPieceTokenizer
    >>> tokenizer = WordPieceTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hi", "##s"])
    >>> table = token_characters(tokenizer, max_characters=5)
    >>> table[[0, 3, 5]].tolist()  # [PAD], [SEP], "hi"
    [[0, 0, 0, 0, 0], [259, 258, 260, 261, 261], [259, 105, 106, 260, 261]]
    >>> table[6].tolist()  # "##s", within a word
    [116, 260, 261, 261, 261]
    """
    check_positive_int("max_characters", max_characters)
    if max_characters < 3:
        raise ValueError(
            "`max_characters` must be at least 3 (begin of word, a character, end of word), "
            f"got max_characters={max_characters}."
        )
    roles = tokenizer.roles
    sentence_marks = {}
    if "cls" in roles:
        sentence_marks[tokenizer.cls_id] = BEGIN_OF_SENTENCE
    if "sep" in roles:
        sentence_marks[tokenizer.sep_id] = END_OF_SENTENCE  # after cls: GPT-2's both at once
    special = set(tokenizer.special_token_ids)
    continues = tokenizer.continuation_mask
    table = np.full((tokenizer.vocabulary_size, max_characters), PADDING_CHARACTER, np.int32)
    for token_id, token in enumerate(tokenizer.vocabulary):
        if token_id in sentence_marks:
            spelling = [BEGIN_OF_WORD, sentence_marks[token_id], END_OF_WORD]
        elif token_id == tokenizer.pad_id:
            table[token_id] = NO_CHARACTER
            continue
        else:
            starts = token_id in special or not continues[token_id]
            text = token if token_id in special else tokenizer.piece_text(token, starts)
            characters = [byte + 1 for byte in text.encode("utf-8")]
            head = [BEGIN_OF_WORD] if starts else []
            spelling = head + characters[: max_characters - len(head) - 1] + [END_OF_WORD]
        table[token_id, : len(spelling)] = spelling
    return table
