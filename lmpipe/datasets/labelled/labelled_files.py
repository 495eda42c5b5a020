"""Labelled text from the user's files: CSV, TSV or JSON lines, one example per row.

`read_labelled(path, text=..., label=..., text_pair=None)` reads a file of examples for
`TextClassifier` (single texts or pairs) and checks every row, with errors that name the file
and the line: a column that is missing, an empty text, a row without a label, a line that is
not valid JSON or UTF-8.
"""

import csv
import dataclasses
import decimal
import json
import os
import re

from lmpipe.datasets.corpora.held_out import held_out_indices

FORMATS = ("auto", "csv", "tsv", "jsonl")


@dataclasses.dataclass(frozen=True)
class LabelledFile:
    """The examples of one file, as `TextClassifier.fit` takes them (`examples`).

    Attributes:
        path: the file read.
        texts: the texts, a list of `str`.
        text_pairs: the second texts (a list of `str`), or None for single texts.
        labels: the label of each example as written in the file, a list of `str`.
    """

    path: str
    texts: list
    text_pairs: list
    labels: list

    @property
    def class_names(self):
        """The labels that occur, sorted: the class names of a classifier of this file."""
        return tuple(sorted(set(self.labels)))

    @property
    def examples(self):
        """`(texts, labels)` or `(texts, text_pairs, labels)`, labels by name."""
        if self.text_pairs is None:
            return self.texts, self.labels
        return self.texts, self.text_pairs, self.labels

    def __len__(self):
        return len(self.texts)

    def split(self, held_out=0.1, seed=0):
        """`(rest, held out)`: a random `held_out` share (a fraction in (0, 1)) or number of
        the examples, the same for the same seed; both keep the file's order."""
        of = f"the {len(self)} examples of {self.path}"
        rest, held = held_out_indices(len(self), held_out, seed, of)
        return self.subset(rest), self.subset(held)

    def subset(self, indices):
        """The examples at `indices`, in that order."""
        pick = [self.texts[i] for i in indices]
        pairs = None if self.text_pairs is None else [self.text_pairs[i] for i in indices]
        return LabelledFile(self.path, pick, pairs, [self.labels[i] for i in indices])


def read_labelled(path, text="text", label="label", text_pair=None, format="auto"):
    """Read the labelled examples of a CSV, TSV or JSONL file.

    CSV and TSV files start with a header row naming the columns (RFC 4180 quoting, so a
    text may hold the delimiter or a line break inside quotes); a JSONL file holds one JSON
    object per line, the columns being its keys. Blank lines are skipped. Labels are read as
    strings without the whitespace around them ("spam " is "spam"); a label that is a number
    is written in its shortest form, so that equal numbers are one class ("1", "1.0", "01",
    "1e0" and the JSON number `1` are all "1"; "0.50" is "0.5"). A NaN or infinite label is an
    error.

    Args:
        path: the file.
        text: the column of the texts.
        label: the column of the labels.
        text_pair: the column of the second texts, for pairs; None for single texts.
        format: "csv", "tsv", "jsonl", or "auto": from the file's ending (`.csv`, `.tsv` or
            `.tab`, `.jsonl` or `.json`).

    Returns:
        A `LabelledFile`.

    Raises:
        ValueError: naming the file (and the line): an unknown format, a missing column, an
            empty text or label, a NaN or infinite label, a malformed line; or a file without
            examples.

    Example:

        train = read_labelled("reviews.csv", text="review", label="sentiment")
        pipe = TextClassifier.from_pretraining(pretraining, len(train.class_names),
                                               labels=train.class_names)
        pipe.fit(train.examples, epochs=3)
    """
    path = os.fspath(path)
    if format not in FORMATS:
        raise ValueError(f"`format` must be one of {FORMATS}, got format={format!r}.")
    if format == "auto":
        format = _format_of(path)
    columns = [text, label] + ([] if text_pair is None else [text_pair])
    for name in columns:
        if not isinstance(name, str) or not name:
            raise ValueError(f"Column names must be non-empty strings, got {name!r}.")
    texts, pairs, labels = [], [], []
    rows = _json_rows(path) if format == "jsonl" else _table_rows(path, format)
    for number, row in rows:
        for name in columns:
            if name not in row:
                available = ", ".join(sorted(row)) or "none"
                raise ValueError(
                    f"{path}, line {number}: no column {name!r} (its columns: {available})."
                )
        values = [_cell(row[name], path, number, name) for name in columns]
        texts.append(values[0])
        labels.append(_label(values[1], path, number, label))
        if text_pair is not None:
            pairs.append(values[2])
    if not texts:
        raise ValueError(f"{path} has no examples.")
    return LabelledFile(path, texts, None if text_pair is None else pairs, labels)


def _format_of(path):
    ending = os.path.splitext(path)[1].lower()
    formats = {".csv": "csv", ".tsv": "tsv", ".tab": "tsv", ".jsonl": "jsonl", ".json": "jsonl"}
    if ending not in formats:
        raise ValueError(
            f"{path}: cannot tell the format from the ending {ending or '(none)'!r}; name it "
            "(format 'csv', 'tsv' or 'jsonl')."
        )
    return formats[ending]


def _table_rows(path, format):
    """`(line number, {column: value})` of each data row of a CSV or TSV file."""
    delimiter = "," if format == "csv" else "\t"
    with open(path, encoding="utf-8", newline="") as file:
        try:
            reader = csv.reader(file, delimiter=delimiter, strict=True)
            header = next(reader, None)
            if header is None:
                raise ValueError(f"{path} is empty: it needs a header row naming the columns.")
            header = [name.removeprefix("\ufeff").strip() for name in header]
            for row in reader:
                number = reader.line_num
                if not row or all(not cell.strip() for cell in row):
                    continue
                if len(row) != len(header):
                    raise ValueError(
                        f"{path}, line {number}: {len(row)} fields where the header has "
                        f"{len(header)} ({', '.join(header)})."
                    )
                yield number, dict(zip(header, row, strict=True))
        except UnicodeDecodeError as error:
            raise ValueError(f"{path}: invalid UTF-8 ({error.reason}).") from None
        except csv.Error as error:
            raise ValueError(f"{path}, line {reader.line_num}: {error}.") from None


def _json_rows(path):
    """`(line number, object)` of each non-blank line of a JSONL file."""
    with open(path, "rb") as file:
        for number, raw in enumerate(file, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                raise ValueError(
                    f"{path}, line {number}: invalid UTF-8 at byte {error.start} of the line."
                ) from None
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as error:
                raise ValueError(f"{path}, line {number}: not JSON ({error.msg}).") from None
            if not isinstance(row, dict):
                raise ValueError(
                    f"{path}, line {number}: a JSON object is needed, got {type(row).__name__}."
                )
            yield number, row


# A number as people write labels: digits, an optional point and exponent, or NaN and infinity
# (which Python, JSON and pandas write in these ways).
_NUMBER = re.compile(r"[+-]?((\d+\.?\d*|\.\d+)(e[+-]?\d+)?|nan|inf|infinity)", re.IGNORECASE)


def _label(value, path, number, name):
    """A label cell (`_cell`'s string) as its class name: stripped; a number in its shortest
    form (equal numbers, one class); ValueError for NaN and infinities."""
    value = value.strip()
    if not _NUMBER.fullmatch(value):
        return value
    number_value = decimal.Decimal(value)
    if not number_value.is_finite():
        raise ValueError(
            f"{path}, line {number}: column {name!r} is {value!r}, not a class (a missing "
            "value?); give every example a label."
        )
    if number_value == number_value.to_integral_value():
        return str(int(number_value))
    return format(number_value.normalize(), "f")


def _cell(value, path, number, name):
    """A cell as a non-empty string (a JSON number or bool as written in JSON)."""
    if isinstance(value, (int, float)):  # bool is an int
        value = json.dumps(value)
    if not isinstance(value, str):
        raise ValueError(
            f"{path}, line {number}: column {name!r} must be text, got {type(value).__name__}."
        )
    if not value.strip():
        raise ValueError(f"{path}, line {number}: column {name!r} is empty.")
    return value
