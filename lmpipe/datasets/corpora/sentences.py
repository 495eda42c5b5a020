"""A small rule-based sentence splitter that runs in the TensorFlow graph."""

import tensorflow as tf

# Words that end with a period without ending the sentence. Kept short on purpose: "No." and
# "I." end sentences in dialogue far more often than they abbreviate "number" or an initial.
ABBREVIATIONS = (
    "Mr",
    "Mrs",
    "Ms",
    "Dr",
    "Prof",
    "Sr",
    "Jr",
    "St",
    "Mt",
    "Rev",
    "Gen",
    "Col",
    "Capt",
    "Lt",
    "Sgt",
    "vs",
    "etc",
    "cf",
    "Inc",
    "Ltd",
    "Co",
)

# Two control characters that never occur in text: one marks a sentence boundary, the other
# stands in for a period that must not end a sentence while the boundaries are inserted.
# Any occurrence in the input is turned into a space first.
_BOUNDARY = "\x1e"
_KEPT_PERIOD = "\x1f"

_ABBREVIATION = r"\b(" + "|".join(ABBREVIATIONS) + r")\."
_DOTTED = r"\b(\pL)\.(\pL)\."  # e.g. i.e. p.m. U.S.
_INITIAL = r"\b([A-HJ-Z])\."  # J. Smith; not "I.", which ends "So do I."
# Sentence-final punctuation, closing quotes or brackets, whitespace, then an optional opening
# quote or bracket and a letter that is not lowercase (uppercase, or of a script without case)
# or a digit.
_END = r"([.!?]+['\"’”)\]]*)\s+(['\"‘“(\[]*[\p{Lu}\p{Lt}\p{Lo}\p{N}])"


def split_sentences(texts):
    """Split text into sentences with a few rules, in the TensorFlow graph.

    The rules, applied in order:

    1. a blank line (two newlines with only whitespace between them) always ends a sentence;
       any other run of whitespace becomes a single space;
    2. a sentence ends after `.`, `!` or `?` (a run of them, optionally followed by closing
       quotes or brackets) when whitespace and then an uppercase letter, a letter of a script
       without case (such as CJK) or a digit follow, possibly behind an opening quote or
       bracket: `He left. "Why?" she asked.` is two
       sentences, `Looks it not like the king? mark it.` is one;
    3. except after a word of `ABBREVIATIONS` (`Mr.`, `Dr.`, `St.`, `etc.`, ...), after letters
       joined by periods (`e.g.`, `i.e.`, `p.m.`, `U.S.`) and after a single uppercase
       initial other than `I` (`J. Smith`).

    Sentences are stripped and empty ones dropped. The characters U+001E and U+001F, which the
    splitter uses as markers, are replaced by spaces. The splitter is vectorized: it runs as a
    handful of regex ops on the whole input, inside `tf.data` and `tf.function` as well as
    eagerly.

    Args:
        texts: a string, or a 1-D list or tensor of strings (UTF-8).

    Returns:
        For a scalar input, a 1-D `tf.string` tensor `[num_sentences]`; for a 1-D input of `n`
        texts, a `tf.RaggedTensor` `[n, (num_sentences)]`.

    Example:

    >>> text = "Mr. Smith went to Washington. He arrived at 5 p.m. on Monday! Did he?"
    >>> split_sentences(text).numpy().tolist()
    [b'Mr. Smith went to Washington.', b'He arrived at 5 p.m. on Monday!', b'Did he?']
    """
    texts = tf.convert_to_tensor(texts, dtype=tf.string)
    if texts.shape.rank not in (0, 1):
        raise ValueError(
            f"`texts` must be a string or a 1-D batch of strings, got shape {texts.shape}."
        )
    texts = tf.strings.regex_replace(texts, f"[{_BOUNDARY}{_KEPT_PERIOD}]", " ")
    texts = tf.strings.regex_replace(texts, r"\n[ \t\r\f\v]*\n\s*", _BOUNDARY)
    texts = tf.strings.regex_replace(texts, r"\s+", " ")
    texts = tf.strings.regex_replace(texts, _ABBREVIATION, r"\1" + _KEPT_PERIOD)
    texts = tf.strings.regex_replace(texts, _DOTTED, r"\1" + _KEPT_PERIOD + r"\2" + _KEPT_PERIOD)
    texts = tf.strings.regex_replace(texts, _INITIAL, r"\1" + _KEPT_PERIOD)
    texts = tf.strings.regex_replace(texts, _END, r"\1" + _BOUNDARY + r"\2")
    texts = tf.strings.regex_replace(texts, _KEPT_PERIOD, ".")
    sentences = tf.strings.strip(tf.strings.split(texts, _BOUNDARY))  # [(n,) (sentences)]
    non_empty = tf.strings.length(sentences) > 0
    if texts.shape.rank == 0:
        return tf.boolean_mask(sentences, non_empty)
    return tf.ragged.boolean_mask(sentences, non_empty)
