r"""GPT-2's pre-tokenization in the TensorFlow graph: text cut into the words that byte-pair
merges stay within, exactly where GPT-2 cuts it.

GPT-2 (openai's encoder.py with the `regex` module; Hugging Face's `ByteLevel` pre-tokenizer)
takes, left to right, the first alternative of

    's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+

that matches: contractions, a space and letters, a space and digits, a space and other
symbols, and whitespace. TensorFlow's regular expressions (RE2) differ from it in two ways,
handled here:

- RE2's `\s` is ASCII's; `\s` above is Unicode's White_Space (tab to carriage return, space,
  U+0085, no-break space, U+1680, U+2000-U+200A, U+2028, U+2029, U+202F, U+205F, U+3000),
  written out in `WHITESPACE`.
- RE2 has no lookahead. In GPT-2, a whitespace run that ends the text is one piece; a run
  before other text is one piece without its last character, and that character starts the
  next piece if it is a space (" word"), else is a piece of its own ("\n\n" before "B" is
  "\n", "\n"). Here the pattern keeps `\s+$` (a run that ends the text) and leaves the other
  runs unmatched. Everything but whitespace matches, so the text between two matches is a
  whitespace run that stops either where a " word" match takes its last space (GPT-2's cut)
  or at the run's end; in the second case its last character is cut off afterwards.

The cutting is one `regex_replace` that writes a 0xFF byte before and after each match, and
one `tf.strings.split` at those bytes: the parts alternate, text between matches (often
empty) and a match. 0xFF never occurs in UTF-8, so the text is made valid UTF-8 first (bytes
that are not become U+FFFD, as Python's `bytes.decode(errors="replace")` makes them).

Special tokens: as Hugging Face does for its added tokens, a text is first cut at every
occurrence of the special token, which becomes a piece of its own, and the text between is
pre-tokenized on its own (so `<|endoftext|>` typed in a text is the end-of-text token).

Letters and digits are Unicode's categories L and N as RE2 knows them (Unicode 15.0): a
character assigned later may be classed differently from a newer `regex` module.
"""

import re

import tensorflow as tf

WHITESPACE = (
    r"\t\n\x{0B}\f\r \x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}"
    r"\x{3000}"
)
r"""The characters of Unicode's White_Space (the `regex` module's `\s`), as an RE2 class body."""

# GPT-2's alternatives in its order, but the whitespace ones: only a run that ends the text.
_PIECE = (
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+"
    rf"| ?[^{WHITESPACE}\p{{L}}\p{{N}}]+|[{WHITESPACE}]+$"
)

_CUT = b"\xff"  # never in UTF-8 text


def split_words(texts, special_token=None, add_prefix_space=False):
    """GPT-2's pre-tokens of `[N]` strings: `(words, special)`, strings `[N, (words)]` and
    bool `[N, (words)]`, True where the word is `special_token`.

    Args:
        texts: string `[N]`.
        special_token: a string cut out of the texts as a word of its own (None: none).
        add_prefix_space: put a space before each stretch of text that does not start with one
            (the whole text, or each part between special tokens), as Hugging Face does.
    """
    texts = tf.strings.unicode_transcode(texts, "UTF-8", "UTF-8", errors="replace")
    if special_token is None:
        parts = tf.RaggedTensor.from_row_lengths(texts, tf.ones_like(texts, tf.int64))
    else:
        parts = _cut_around(texts, re.escape(special_token))  # text, token, text, ...
    special = tf.math.floormod(_position_in_row(parts), 2) == 1  # [parts]
    plain = tf.where(special, "", parts.values)
    if add_prefix_space:
        spaced = tf.logical_and(
            tf.strings.length(plain) > 0, tf.not_equal(tf.strings.substr(plain, 0, 1), " ")
        )
        plain = tf.where(spaced, tf.strings.join([" ", plain]), plain)
    words = _pre_tokenize(plain)  # [parts, (words)]
    # A special part gave no words; it becomes the one word of its row.
    specials = tf.RaggedTensor.from_row_lengths(
        tf.boolean_mask(parts.values, special), tf.cast(special, tf.int64)
    )
    words = tf.concat([words, specials], axis=1)
    flags = tf.gather(special, words.value_rowids())  # a special part has only its token
    return (
        parts.with_values(words).merge_dims(1, 2),
        parts.with_values(words.with_values(flags)).merge_dims(1, 2),
    )


def _cut_around(texts, pattern):
    """`[N, (2 k + 1)]`: each text cut before and after its `k` matches of `pattern`, so the
    parts alternate: text before the first match (maybe empty), a match, text, ..., text."""
    return tf.strings.split(tf.strings.regex_replace(texts, pattern, _CUT + b"\\0" + _CUT), _CUT)


def _position_in_row(ragged):
    """int64 `[values]`: each value's index within its row."""
    position = tf.range(tf.shape(ragged.values, out_type=tf.int64)[0])
    return position - tf.gather(ragged.row_splits, ragged.value_rowids())


def _pre_tokenize(texts):
    """GPT-2's pieces of `[N]` strings, `[N, (pieces)]`, with no special tokens."""
    parts = _cut_around(texts, _PIECE)  # runs between matches (even positions), matches
    values = parts.values
    position = _position_in_row(parts)
    followed = position < tf.gather(parts.row_lengths() - 1, parts.value_rowids())
    # A run of two bytes or more, with a match after it, may need its last character cut off.
    candidate = tf.logical_and(
        tf.math.floormod(position, 2) == 0,
        tf.logical_and(tf.strings.length(values) > 1, followed),
    )
    at = tf.where(candidate)  # [C, 1]
    runs = tf.gather_nd(values, at)
    last = tf.strings.substr(runs, -1, 1, unit="UTF8_CHAR")
    head_length = tf.strings.length(runs) - tf.strings.length(last)
    following = tf.strings.substr(tf.gather_nd(values, at + 1), 0, 1)
    # Unless the match after it took its last space, GPT-2 cuts the run's last character off
    # (a run of one character stays whole).
    cut = tf.logical_and(head_length > 0, tf.not_equal(following, " "))
    heads = tf.strings.substr(runs, tf.zeros_like(head_length), head_length)
    heads = tf.tensor_scatter_nd_update(values, at, tf.where(cut, heads, runs))
    tails = tf.tensor_scatter_nd_update(tf.zeros_like(values), at, tf.where(cut, last, ""))
    both = tf.reshape(tf.stack([heads, tails], axis=1), [-1])  # [2 P]
    kept = tf.strings.length(both) > 0
    counts = tf.math.unsorted_segment_sum(
        tf.cast(kept, tf.int64), tf.repeat(parts.value_rowids(), 2), parts.nrows()
    )
    return tf.RaggedTensor.from_row_lengths(tf.boolean_mask(both, kept), counts)
