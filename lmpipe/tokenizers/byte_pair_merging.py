"""Byte-pair merging in the TensorFlow graph: the pieces GPT-2's `merges.txt` makes of a word.

A word (one pre-token, see `byte_pair_split`) starts as its UTF-8 bytes, each the vocabulary's
token for that byte; then, as in openai's encoder.py, each step finds the adjacent pair of the
lowest rank in `merges.txt` and joins every occurrence of that pair, left to right and without
overlap ("a a a" with "a a" gives "aa a"), until no adjacent pair has a rank.

The steps run on ids, vectorized over all the distinct words of a batch at once in one
`tf.while_loop`: a pair of ids is one int64 key, looked up in a static hash table that gives
its rank and the id of the merged token, and a word leaves the loop when it has no pair left
to merge, so the loop runs as many times as the batch's longest chain of merges.
"""

import numpy as np
import tensorflow as tf

# The printable byte values GPT-2 writes as themselves ("!".."~", "¡".."¬", "®".."ÿ"); the
# other 68 bytes (controls, space, no-break space, soft hyphen) are written as U+0100 onwards.
_PRINTABLE_BYTES = (*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100))

# A pair's table value is rank * 2**32 + merged id, so that the smallest value of a word is
# its pair of lowest rank; pairs without a rule get this (larger than any rank's value).
_NO_MERGE = np.iinfo(np.int64).max


def byte_characters():
    """GPT-2's byte-level alphabet: the character (a str) that stands for each byte 0-255.

    Printable bytes stand for themselves; the others, in byte order, for U+0100, U+0101, ...
    (the space, byte 0x20, is "Ġ"; the newline, 0x0A, is "Ċ").
    """
    printable = set(_PRINTABLE_BYTES)
    characters, shifted = [], 0
    for byte in range(256):
        if byte in printable:
            characters.append(chr(byte))
        else:
            characters.append(chr(256 + shifted))
            shifted += 1
    return characters


def token_bytes(token):
    """The bytes a vocabulary token stands for: its characters read back through the byte
    alphabet; a token with a character outside the alphabet stands for its own UTF-8 text (as
    Hugging Face's byte-level decoder reads it)."""
    if all(character in _BYTE_OF for character in token):
        return bytes(_BYTE_OF[character] for character in token)
    return token.encode("utf-8")


_BYTE_OF = {character: byte for byte, character in enumerate(byte_characters())}


class BytePairMerger(tf.Module):
    """Words to the ids of their byte-pair pieces, in graph ops.

    Args:
        vocabulary: `{token: id}`, with a token for each of the 256 bytes and for what every
            merge rule makes.
        merges: "a b" rules in rank order (already checked to join tokens into a token); a
            rule given twice keeps its last rank, as openai's encoder and Hugging Face do.
        name: name of the `tf.Module`.
    """

    def __init__(self, vocabulary, merges, name=None):
        super().__init__(name=name)
        self._byte_ids = tf.constant(
            [vocabulary[character] for character in byte_characters()], tf.int32
        )
        # Pair keys left * size + right fit int64 for any vocabulary up to 3e9 tokens.
        self._size = max(vocabulary.values()) + 1
        ranks = {}
        for rank, merge in enumerate(merges):
            left, right = merge.split(" ")
            key = vocabulary[left] * self._size + vocabulary[right]
            ranks[key] = (rank << 32) | vocabulary[left + right]
        keys = np.fromiter(ranks.keys(), np.int64, len(ranks))
        values = np.fromiter(ranks.values(), np.int64, len(ranks))
        if not len(keys):  # a table cannot be empty: one key no pair of ids can make
            keys, values = np.array([-1], np.int64), np.array([_NO_MERGE], np.int64)
        self._pairs = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(keys, values), default_value=_NO_MERGE
        )

    def merge(self, words):
        """int32 ids `[W, (pieces)]` of `[W]` non-empty strings (each word's bytes merged)."""
        distinct, index = tf.unique(words)  # each distinct word merged once
        lengths = tf.strings.length(distinct)
        raw = tf.io.decode_raw(tf.strings.reduce_join(distinct), tf.uint8)
        ids = tf.gather(self._byte_ids, tf.cast(raw, tf.int32))  # [bytes]
        merged = self._merge_all(ids, lengths)  # [distinct words, (pieces)]
        return tf.gather(merged, index)

    def _merge_all(self, ids, lengths):
        """Ragged `[U, (pieces)]` from the flat byte ids `[B]` of `U` words of `lengths`."""
        words = tf.shape(lengths)[0]
        empty = tf.zeros([0], tf.int32)
        state = (ids, lengths, tf.range(words), empty, empty, empty)

        def step(ids, lengths, word_index, done_ids, done_lengths, done_index):
            ids, lengths, active = self._merge_step(ids, lengths)
            symbol_active = tf.repeat(active, lengths)
            finished = tf.logical_not(active)
            return (
                tf.boolean_mask(ids, symbol_active),
                tf.boolean_mask(lengths, active),
                tf.boolean_mask(word_index, active),
                tf.concat([done_ids, tf.boolean_mask(ids, tf.logical_not(symbol_active))], 0),
                tf.concat([done_lengths, tf.boolean_mask(lengths, finished)], 0),
                tf.concat([done_index, tf.boolean_mask(word_index, finished)], 0),
            )

        unknown = tf.TensorShape([None])
        *_, done_ids, done_lengths, done_index = tf.while_loop(
            lambda ids, lengths, *_: tf.size(lengths) > 0,
            step,
            state,
            shape_invariants=(unknown,) * 6,
        )
        pieces = tf.RaggedTensor.from_row_lengths(done_ids, tf.cast(done_lengths, tf.int64))
        # Words finish in any order: row `done_index[k]` of the answer is row k here.
        return tf.gather(pieces, tf.math.invert_permutation(done_index))

    def _merge_step(self, ids, lengths):
        """One step for every word: `(ids, lengths, merged)`, `merged` [U] True for the words
        where a pair was joined (the others are finished, their ids unchanged)."""
        words = tf.shape(lengths)[0]
        word_of = tf.repeat(tf.range(words), lengths)  # [S]
        ends = tf.cumsum(lengths)
        is_last = tf.range(tf.shape(ids)[0]) == tf.gather(ends, word_of) - 1
        right = tf.concat([ids[1:], [0]], 0)
        keys = tf.cast(ids, tf.int64) * self._size + tf.cast(right, tf.int64)
        values = tf.where(is_last, _NO_MERGE, self._pairs.lookup(keys))  # [S]
        best = tf.math.unsorted_segment_min(values, word_of, words)  # [U]
        merged = best != _NO_MERGE
        chosen = tf.logical_and(values == tf.gather(best, word_of), values != _NO_MERGE)
        # Occurrences of a pair overlap only in a run of one token ("a a a"): left to right,
        # the 1st, 3rd, ... of each run of chosen positions are joined.
        count = tf.cumsum(tf.cast(chosen, tf.int32))
        previous = tf.concat([[False], chosen[:-1]], 0)
        run_start = tf.logical_and(chosen, tf.logical_not(previous))
        run_of = tf.maximum(tf.cumsum(tf.cast(run_start, tf.int32)) - 1, 0)
        run_counts = tf.concat([tf.boolean_mask(count, run_start), [0]], 0)  # never empty
        first_count = tf.gather(run_counts, run_of)
        joined = tf.logical_and(chosen, (count - first_count) % 2 == 0)
        ids = tf.where(joined, tf.cast(values & 0xFFFFFFFF, tf.int32), ids)
        absorbed = tf.concat([[False], joined[:-1]], 0)  # the right token of a joined pair
        removed = tf.math.unsorted_segment_sum(tf.cast(joined, tf.int32), word_of, words)
        return tf.boolean_mask(ids, tf.logical_not(absorbed)), lengths - removed, merged
