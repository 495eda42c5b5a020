"""The graph functions that read a corpus' lines into documents, shared by the streaming
reader (`TextCorpus.documents`) and the validation pass
(`lmpipe.datasets.corpora.corpus_validation`),
so that both see the same documents."""

import tensorflow as tf

from lmpipe.datasets.corpora.json_lines import json_string_field
from lmpipe.datasets.corpora.sentences import split_sentences
from lmpipe.tokenizers.bert_words import has_words

# Lines per vectorized block: the reader's unit of work, and the validator's.
LINES_PER_BLOCK = 1024

_BOM = "\ufeff"


def as_document(document):
    """Give a document the dataset's documented element spec, a dense `[None]` string tensor."""
    return tf.ensure_shape(tf.convert_to_tensor(document, tf.string), [None])


def clean_lines(lines, replace):
    """Lines `[L]` as the reader sees them: bad UTF-8 replaced (if asked), BOM and ends stripped."""
    if replace:
        lines = tf.strings.unicode_transcode(
            lines, "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD
        )
    lines = tf.strings.regex_replace(lines, "^" + _BOM, "")
    return tf.strings.strip(lines)


def group_lines(open_document, lines):
    """`Dataset.scan` step: add a block of lines to the open document, emit those completed.

    Args:
        open_document: `[C]` lines of the document still open (no blank line after it yet).
        lines: `[L]` stripped lines of the next block.

    Returns:
        The new open document, and the completed documents `[D, (lines)]`, none empty.
    """
    lines = tf.concat([open_document, lines], axis=0)  # [C + L]
    blank = tf.equal(lines, "")
    document_ids = tf.cumsum(tf.cast(blank, tf.int64), exclusive=True)  # [C + L]
    num_closed = tf.reduce_sum(tf.cast(blank, tf.int64))
    still_open = document_ids >= num_closed  # the lines after the last blank one
    closed = tf.logical_and(tf.logical_not(blank), tf.logical_not(still_open))
    documents = tf.RaggedTensor.from_value_rowids(
        tf.boolean_mask(lines, closed), tf.boolean_mask(document_ids, closed), nrows=num_closed
    )  # [num_closed, (lines)]; runs of blank lines leave empty rows
    documents = tf.ragged.boolean_mask(documents, documents.row_lengths() > 0)
    return tf.boolean_mask(lines, still_open), documents


def prose_documents(paragraphs):
    """Paragraphs `[D, (lines)]` -> documents `[D', (sentences)]`; no sentence, no document."""
    texts = tf.strings.reduce_join(paragraphs, axis=1, separator=" ")  # [D]
    return drop_empty(split_sentences(texts))


def jsonl_documents(lines, key):
    """JSON lines `[L]` -> documents `[D, (sentences)]` of the string at top-level `key`."""
    return drop_empty(split_sentences(json_string_field(lines, key)))


def drop_empty(documents):
    return tf.ragged.boolean_mask(documents, documents.row_lengths() > 0)


def count_documents_without_text(documents):
    """The number of documents `[D, (sentences)]` none of whose sentences has a word."""
    with_words = documents.with_flat_values(has_words(documents.flat_values))
    return int(tf.reduce_sum(tf.cast(~tf.reduce_any(with_words, axis=1), tf.int32)))
