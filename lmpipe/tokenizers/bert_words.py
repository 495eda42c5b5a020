"""BERT's words: the cleaning, normalization and word splitting of BERT's basic tokenizer, in
graph ops (steps 1-3 of `lmpipe.tokenizers.wordpiece`).

`WordPieceTokenizer` runs these steps before its pieces; its vocabulary learner counts the
words they give, and the labelled datasets cut raw text where the tokenizer would. They all
take them from here, so that one set of rules decides what a word is.
"""

import tensorflow as tf
import tensorflow_text as text

DROPPED = r"[^\p{L}\p{M}\p{N}\p{P}\p{S}\p{Z}\t\n\r]|\x{FFFD}"
"""The characters step 1 drops: category C but tab, newline and carriage return, and U+FFFD,
written as "in no other category" so that unassigned code points go too (Python's
`unicodedata` reports them as "Cn")."""

_DROPPED_OR_ACCENT = DROPPED + r"|\p{Mn}"

_WHITESPACE = r"[\t\n\r\p{Z}]+"
_PUNCTUATION = r"[!-/:-@\[-`{-~\p{P}]"
_CJK = (
    r"[\x{4E00}-\x{9FFF}\x{3400}-\x{4DBF}\x{20000}-\x{2A6DF}\x{2A700}-\x{2B73F}"
    r"\x{2B740}-\x{2B81F}\x{2B820}-\x{2CEAF}\x{F900}-\x{FAFF}\x{2F800}-\x{2FA1F}]"
)

WORD_DELIMITERS = f"{_WHITESPACE}|{_PUNCTUATION}|{_CJK}"
"""Where words end (step 3): whitespace runs, every punctuation character (Unicode P and all
ASCII symbols) and every CJK ideograph, exactly the classes of the WordPiece op's own split."""

KEPT_DELIMITERS = f"{_PUNCTUATION}|{_CJK}"
"""The delimiters that are words of their own (punctuation and CJK ideographs)."""


def clean(texts):
    """`texts` without the characters step 1 drops (string tensor, any shape)."""
    return tf.strings.regex_replace(texts, DROPPED, "")


def normalize(texts, lower_case):
    """Steps 1-2 on `[N]` strings: clean; with `lower_case` lower-case, decompose (NFD) and drop
    the accents (category Mn), else compose (NFC) and keep case and accents."""
    if lower_case:
        # Decompose first, then drop control characters and accents in one pass, then
        # lower-case: per code point this equals BERT's lower, NFD, strip order, and the
        # UTF-8 lower-casing op must not see a NUL (it stops there).
        texts = text.normalize_utf8(texts, "NFD")
        texts = tf.strings.regex_replace(texts, _DROPPED_OR_ACCENT, "")
        return tf.strings.lower(texts, encoding="utf-8")
    return text.normalize_utf8(clean(texts), "NFC")


def split_words(texts):
    """Step 3 on `[N]` strings as they are (normalize or clean them first): their words,
    string `[N, (words)]`."""
    return text.regex_split(texts, WORD_DELIMITERS, KEPT_DELIMITERS)


def has_words(texts):
    """Bool, per string of `texts`: whether the tokenizer finds a word in it, in graph ops.

    A text has words when it holds a character that is neither whitespace nor dropped by
    step 1 (control, format such as the zero-width space, private use, unassigned, U+FFFD).
    A text without one (empty, or only such characters) tokenizes to no piece with any
    vocabulary. (Text of combining accents alone has words here, and none for an uncased
    tokenizer, which drops accents.)
    """
    texts = tf.strings.regex_replace(texts, r"\x{FFFD}", "")
    return tf.strings.regex_full_match(texts, r"(?s).*[\p{L}\p{M}\p{N}\p{P}\p{S}].*")
