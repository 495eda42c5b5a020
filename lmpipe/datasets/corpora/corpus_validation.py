"""The validation pass of `TextCorpus.from_files`: every file read once in Python, line by line
in binary, before any training, to report bad input by file and line (a missing file, invalid
UTF-8, bad JSON, a line too long, a file without text) and to count its documents
(`FileStats`). It mirrors the graph reader through the functions of
`lmpipe.datasets.corpora.corpus_reading`."""

import dataclasses
import io
import json
import os
import re

import tensorflow as tf

from lmpipe.datasets.corpora.corpus_reading import (
    LINES_PER_BLOCK,
    clean_lines,
    count_documents_without_text,
    drop_empty,
    prose_documents,
)
from lmpipe.datasets.corpora.json_lines import json_string_field
from lmpipe.datasets.corpora.sentences import split_sentences
from lmpipe.tokenizers.bert_words import has_words

FORMATS = ("auto", "bert", "prose", "jsonl")
ENCODING_ERRORS = ("strict", "replace")

DEFAULT_MAX_LINE_BYTES = 10 * 2**20
"""The longest line `TextCorpus.from_files` accepts by default (10 MiB): tokenizing a line
takes up to about 100 times its size in memory, and a single-line file of 50 MB can abort the
process."""

_JSONL_EXTENSIONS = (".jsonl", ".json")

MANIFEST_FILE = ".lmpipe-manifest.json"
"""The corpus manifest's name (see `lmpipe.datasets.corpora.corpus_manifest`), in each corpus
folder."""


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


def expand_patterns(patterns):
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
        # Not the corpus manifests (nor their temporary files) a wide pattern also matches.
        matches = [
            match
            for match in tf.io.gfile.glob(pattern)
            if not os.path.basename(match).startswith(MANIFEST_FILE)
        ]
        if not matches:
            raise ValueError(f"No file matches the pattern {pattern!r}.")
        for match in matches:
            if tf.io.gfile.isdir(match):
                raise ValueError(
                    f"{match} (matched by {pattern!r}) is a directory; the corpus needs files."
                )
            files.add(match)
    return sorted(files)


def resolve_format(file_format, files):
    if file_format != "auto":
        return file_format
    formats = {"jsonl" if f.lower().endswith(_JSONL_EXTENSIONS) else "bert" for f in files}
    if len(formats) > 1:
        raise ValueError(
            "format='auto' found both JSON lines files (.jsonl, .json) and text files among "
            f"{files}; make one corpus per format or pass `format` explicitly."
        )
    return formats.pop()


# A line of BERT's format holds one sentence, so a sentence break inside a line ("... end.
# Next ...", as `split_sentences` finds them) is rare there; in prose (a paragraph a line, or
# text wrapped at a width) it is common. Counted over the first `PROSE_SNIFF_BYTES` of a file.
PROSE_BREAKS_PER_LINE = 0.5
PROSE_SNIFF_BYTES = 1 << 16


def prose_note(path):
    """A sentence saying why a text file looks like prose rather than BERT's one sentence a
    line, with the numbers; None if it does not."""
    with _open_binary(path) as stream:
        head = stream.read(PROSE_SNIFF_BYTES)
    lines = head.decode("utf-8", errors="replace").splitlines()
    if len(head) == PROSE_SNIFF_BYTES:
        lines = lines[:-1]  # cut by the sniff
    lines = [line for line in lines if line.strip()]
    if not lines:
        return None
    sentences = split_sentences(tf.constant(lines, tf.string)).row_lengths().numpy()
    breaks = float((sentences - 1).clip(min=0).mean())
    if breaks < PROSE_BREAKS_PER_LINE:
        return None
    return (
        f"{path} looks like prose: {breaks:.1f} sentence breaks inside a line on average over "
        f"its first {len(lines):,} lines, where BERT's format has one sentence a line; "
        "format='auto' reads it as that format (each line a sentence): pass format='prose' "
        "to split its paragraphs into sentences"
    )


def _open_binary(path):
    if "://" in path:
        return io.BufferedReader(_RawFile(tf.io.gfile.GFile(path, "rb")), READ_BYTES)
    return open(path, "rb")


class _RawFile(io.RawIOBase):
    """A `tf.io.gfile.GFile` as a raw stream, so that a buffered reader over it reads lines of
    a bounded length (`readline(size)`), as Python's files do."""

    def __init__(self, file):
        super().__init__()
        self._file = file

    def readable(self):
        return True

    def readinto(self, buffer):
        data = self._file.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def close(self):
        self._file.close()
        super().close()


READ_BYTES = 1 << 20
"""The most bytes validation holds of a line longer than `max_line_bytes` at once while it
measures it."""

MEASURED_BYTES = 1 << 30
"""How far validation reads on into a line longer than `max_line_bytes` to tell its size
(beyond, the error says "over"): a file without line breaks may be huge."""


def _lines(stream, path, file_format, max_line_bytes):
    """`stream`'s lines (each with its line break), never holding more than `max_line_bytes`
    and its break of one: a longer line is an error, raised once it is measured in bounded
    reads, without holding it whole."""
    first = 1
    while True:
        line = stream.readline(max_line_bytes + 1)
        if not line:
            return
        if len(line) > max_line_bytes and not line.endswith(b"\n"):
            size, complete = len(line), False
            while size <= max_line_bytes + MEASURED_BYTES:
                rest = stream.readline(READ_BYTES)
                size += len(rest.rstrip(b"\n"))
                if not rest or rest.endswith(b"\n"):
                    complete = True
                    break
            check_line_length(path, file_format, first, size, max_line_bytes, complete)
        first += 1
        yield line


def scan_file(path, file_format, text_field, encoding_errors, max_line_bytes):
    """Read a file once, line by line, in binary; raise on bad input; count what it holds.

    Returns:
        `(FileStats, longest_line)`: the counts, and `{"bytes": size, "line": number}` of the
        longest line (its size without the line break; the first of the longest).
    """
    counter = FileCounter(path, file_format, text_field, encoding_errors)
    block, first_line = [], 1
    longest_raw, longest, longest_number = 0, -1, 0  # raw: with its line break
    with _open_binary(path) as stream:
        for line in _lines(stream, path, file_format, max_line_bytes):
            if len(line) >= longest_raw:  # only such a line can be the longest
                longest_raw, size = len(line), len(line.rstrip(b"\n"))
                number = first_line + len(block)
                check_line_length(path, file_format, number, size, max_line_bytes)
                if size > longest:
                    longest, longest_number = size, number
            block.append(line)
            if len(block) == LINES_PER_BLOCK:
                counter.add_block(block, first_line)
                first_line += len(block)
                block = []
        counter.add_block(block, first_line)
        if first_line == 1 and not block:
            raise ValueError(f"{path} is empty.")
    return counter.finish(), {"bytes": max(longest, 0), "line": longest_number}


_LINE_IS = {
    "bert": "a sentence, so this is likely a text without line breaks (format='prose' splits "
    "such text into sentences)",
    "prose": "part of a paragraph, split into sentences when read",
    "jsonl": "one document, split into sentences when read",
}


def check_line_length(path, file_format, number, size, max_line_bytes, complete=True):
    """Raise if line `number` of `path`, `size` bytes without its line break (at least, when
    not `complete`: it was not read to its end), is longer than `max_line_bytes`."""
    if size > max_line_bytes:
        raise ValueError(
            f"{path}, line {number}: {'' if complete else 'over '}{size:,} bytes, more than "
            "max_line_bytes="
            f"{max_line_bytes:,}. In the {file_format!r} format a line is "
            f"{_LINE_IS[file_format]}. Pass max_line_bytes={size} (or more) to "
            "TextCorpus.from_files to read it; tokenizing a line takes up to about 100 times "
            "its size in memory."
        )


class FileCounter:
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
            for line in clean_lines(tf.constant(raw_lines), self.replace).numpy()
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
            documents = prose_documents(tf.ragged.constant(self.paragraphs, tf.string))
            self.num_documents += int(documents.nrows())
            self.num_sentences += int(tf.size(documents.flat_values))
            self.num_documents_without_text += count_documents_without_text(documents)
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
        found = json_string_field(tf.constant(kept), self.key)
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
        self.num_documents_without_text += count_documents_without_text(drop_empty(documents))

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
