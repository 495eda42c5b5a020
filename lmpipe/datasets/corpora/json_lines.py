"""Reading one string field of JSON object lines in the TensorFlow graph, for corpora of
JSON lines streamed by `tf.data` (no Python per line). `lmpipe.datasets.corpora.corpus_validation`
checks every line with Python's `json` once, and that this reader finds the same text."""

import tensorflow as tf
import tensorflow_text as tf_text

# A JSON string literal, or one structural character.
_JSON_TOKEN = r'"(?:[^"\\]|\\.)*"|[{}\[\]:,]'
# An escape sequence inside a JSON string literal.
_JSON_ESCAPE = r"\\u[0-9a-fA-F]{4}|\\."
_JSON_SIMPLE_ESCAPES = {
    '\\"': '"',
    "\\\\": "\\",
    "\\/": "/",
    "\\b": "\b",
    "\\f": "\f",
    "\\n": "\n",
    "\\r": "\r",
    "\\t": "\t",
}


def json_string_field(lines, key):
    """The string under the top-level `key` of each JSON object line, decoded, in the graph.

    Each line is cut into JSON string literals and structural characters (`{}[]:,`); the
    nesting depth before each token tells top-level keys from nested ones. A key is a string
    token equal to `key` (a JSON literal, quotes included) at depth 1, after `{` or `,` and
    before `:`; its value is the token after the `:`. If the key occurs twice the last one
    wins, as in Python's `json`. Lines without it (blank lines) give "".

    Args:
        lines: `[L]` UTF-8 lines.
        key: the key as a JSON string literal, for instance `'"text"'`.

    Returns:
        `[L]` decoded strings.
    """
    tokens = tf_text.regex_split(lines, _JSON_TOKEN, _JSON_TOKEN)  # [L, (tokens)]
    tokens = tf.ragged.boolean_mask(tokens, tf.strings.length(tf.strings.strip(tokens)) > 0)
    values, rows = tokens.flat_values, tokens.value_rowids()  # [T], [T]
    opens = tf.logical_or(tf.equal(values, "{"), tf.equal(values, "["))
    closes = tf.logical_or(tf.equal(values, "}"), tf.equal(values, "]"))
    depth = tf.cumsum(tf.cast(opens, tf.int64) - tf.cast(closes, tf.int64), exclusive=True)
    # restart the count at each line: subtract the depth before the line's first token
    depth -= tf.gather(tf.concat([depth, [0]], 0), tf.gather(tokens.row_starts(), rows))

    def shifted(tensor, offset, fill):  # tensor[i + offset], `fill` outside
        pad = tf.fill([abs(offset)], fill)
        if offset > 0:
            return tf.concat([tensor[offset:], pad], 0)
        return tf.concat([pad, tensor[:offset]], 0)

    no_row = tf.constant(-1, tf.int64)
    is_key = (
        tf.equal(values, key)
        & tf.equal(depth, 1)
        & (tf.equal(shifted(values, -1, ""), "{") | tf.equal(shifted(values, -1, ""), ","))
        & tf.equal(shifted(values, 1, ""), ":")
        & tf.strings.regex_full_match(shifted(values, 2, ""), '".*')
        & tf.equal(shifted(rows, -1, no_row), rows)
        & tf.equal(shifted(rows, 2, no_row), rows)
    )
    positions = tf.range(tf.size(values, out_type=tf.int64))
    value_index = tf.math.unsorted_segment_max(
        tf.where(is_key, positions + 2, -1), rows, tokens.nrows()
    )  # [L]; -1 where the line has no such key (empty lines give the dtype's minimum)
    literal = tf.where(
        value_index >= 0, tf.gather(values, tf.maximum(value_index, 0)), tf.constant('""')
    )
    return unescape_json(tf.strings.regex_replace(literal, r'^"|"$', ""))


def unescape_json(strings):
    """Decode the escapes of JSON string contents `[N]` (quotes removed), in the graph.

    `\\uXXXX` escapes become the character, surrogate pairs one character; a lone surrogate
    becomes U+FFFD (Python's `json` keeps it, but it cannot be written as UTF-8).
    """
    pieces = tf_text.regex_split(strings, _JSON_ESCAPE, _JSON_ESCAPE)  # [N, (pieces)]
    values, rows = pieces.flat_values, pieces.value_rowids()  # [P], [P]
    is_unicode = tf.strings.regex_full_match(values, r"\\u[0-9a-fA-F]{4}")
    hex_digits = tf.strings.unicode_decode(
        tf.strings.substr(tf.where(is_unicode, values, r"\u0000"), 2, 4), "UTF-8"
    ).to_tensor(shape=[None, 4])  # [P, 4] code points of the hex digits
    digits = tf.where(
        hex_digits <= ord("9"), hex_digits - ord("0"), (hex_digits | 0x20) - ord("a") + 10
    )
    code = tf.where(is_unicode, tf.reduce_sum(digits * [4096, 256, 16, 1], axis=1), -1)  # [P]
    high = (code >= 0xD800) & (code <= 0xDBFF)
    low = (code >= 0xDC00) & (code <= 0xDFFF)
    same_row_next = tf.concat([tf.equal(rows[1:], rows[:-1]), [False]], 0)
    pair = high & tf.concat([low[1:], [False]], 0) & same_row_next  # high surrogate + low
    second = tf.concat([[False], pair[:-1]], 0)  # the low half of a pair
    next_code = tf.concat([code[1:], [0]], 0)
    code = tf.where(pair, 0x10000 + (code - 0xD800) * 0x400 + (next_code - 0xDC00), code)
    code = tf.where((high & ~pair) | (low & ~second), 0xFFFD, code)
    characters = tf.strings.unicode_encode(
        tf.RaggedTensor.from_tensor(tf.expand_dims(tf.maximum(code, 0), 1)), "UTF-8"
    )  # [P]
    for escape, character in _JSON_SIMPLE_ESCAPES.items():
        values = tf.where(tf.equal(values, escape), character, values)
    values = tf.where(is_unicode, characters, values)
    values = tf.where(second, "", values)
    return tf.strings.unsorted_segment_join(values, rows, pieces.nrows())  # [N]
