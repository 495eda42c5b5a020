"""Words tagged one by one, from the user's files: CoNLL columns or JSON lines.

`read_tagged(path)` reads sentences of words with a tag per word, for `TokenTagger`, and
checks every line, with errors that name the file and the line: a line with one column, a
sentence whose words and tags differ in number, an empty word or tag, a line that is not
valid JSON or UTF-8.

- CoNLL (CoNLL-2003 and its kin): one word a line, `word<whitespace>...<whitespace>tag`, the
  word in the first column and the tag in the last (the columns between, such as part of
  speech and chunk, are ignored); a blank line ends a sentence; `-DOCSTART-` lines are skipped.
- JSONL: one sentence a line, `{"tokens": ["EU", "rejects", ...], "tags": ["B-ORG", "O", ...]}`
  (the field names are arguments).
"""

import dataclasses
import json
import os

from lmpipe.datasets.corpora.held_out import held_out_indices

FORMATS = ("auto", "conll", "jsonl")
DOCSTART = "-DOCSTART-"


@dataclasses.dataclass(frozen=True)
class TaggedSentences:
    """Sentences of words with one tag per word, as `TokenTagger.fit` takes them.

    Attributes:
        path: the file read (or a description of where the sentences come from).
        sentences: the words of each sentence, a list of lists of `str`.
        tags: the tag of each word, a list of lists of `str`, shaped as `sentences`.
    """

    path: str
    sentences: list
    tags: list

    @property
    def tag_names(self):
        """The tags that occur, sorted: the tags of a tagger of these sentences."""
        return tuple(sorted({tag for tags in self.tags for tag in tags}))

    @property
    def examples(self):
        """`(sentences, tags)`, the data `TokenTagger.fit` and `evaluate` take."""
        return self.sentences, self.tags

    @property
    def num_words(self):
        """The number of words of all sentences."""
        return sum(len(words) for words in self.sentences)

    def __len__(self):
        return len(self.sentences)

    def split(self, held_out=0.1, seed=0):
        """`(rest, held out)`: a random `held_out` share (a fraction in (0, 1)) or number of
        the sentences, the same for the same seed; both keep the file's order."""
        of = f"the {len(self)} sentences of {self.path}"
        rest, held = held_out_indices(len(self), held_out, seed, of)
        return self.subset(rest), self.subset(held)

    def subset(self, indices):
        """The sentences at `indices`, in that order."""
        return TaggedSentences(
            self.path, [self.sentences[i] for i in indices], [self.tags[i] for i in indices]
        )


def read_tagged(path, format="auto", tokens_field="tokens", tags_field="tags"):
    """Read the tagged sentences of a CoNLL or JSONL file.

    Args:
        path: the file.
        format: "conll", "jsonl", or "auto": "jsonl" for files ending in `.jsonl` or `.json`,
            "conll" for any other.
        tokens_field: JSONL: the field of each line's words (a list of strings).
        tags_field: JSONL: the field of each line's tags (a list of strings, one per word).

    Returns:
        A `TaggedSentences`.

    Raises:
        ValueError: naming the file and the line: an unknown format, a line with one column,
            a missing field, words and tags of different lengths, an empty word or tag, a
            malformed line; or a file without sentences.

    Example:

        train = read_tagged("eng.train")          # CoNLL-2003
        pipe = TokenTagger.from_pretrained("bert-base-cased", tags=train.tag_names)
        pipe.fit(train.examples, epochs=3)
    """
    path = os.fspath(path)
    if format not in FORMATS:
        raise ValueError(f"`format` must be one of {FORMATS}, got format={format!r}.")
    for name, value in (("tokens_field", tokens_field), ("tags_field", tags_field)):
        if not isinstance(value, str) or not value:
            raise ValueError(f"`{name}` must be a non-empty string, got {value!r}.")
    if format == "auto":
        format = "jsonl" if os.path.splitext(path)[1].lower() in (".jsonl", ".json") else "conll"
    if format == "jsonl":
        sentences, tags = _read_jsonl(path, tokens_field, tags_field)
    else:
        sentences, tags = _read_conll(path)
    if not sentences:
        raise ValueError(f"{path} has no sentences.")
    return TaggedSentences(path, sentences, tags)


def _lines(path):
    """`(line number, text)` of each line of a UTF-8 file, line ends removed."""
    with open(path, "rb") as file:
        for number, raw in enumerate(file, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                raise ValueError(
                    f"{path}, line {number}: invalid UTF-8 at byte {error.start} of the line."
                ) from None
            if number == 1:
                line = line.removeprefix("\ufeff")
            yield number, line.rstrip("\r\n")


def _read_conll(path):
    sentences, tags = [], []
    words, labels = [], []
    for number, line in _lines(path):
        columns = line.split()
        if not columns:
            if words:
                sentences.append(words)
                tags.append(labels)
                words, labels = [], []
            continue
        if columns[0] == DOCSTART:
            continue
        if len(columns) < 2:
            raise ValueError(
                f"{path}, line {number}: one column ({columns[0]!r}); a CoNLL line is "
                "`word ... tag`, the tag in the last column."
            )
        words.append(columns[0])
        labels.append(columns[-1])
    if words:
        sentences.append(words)
        tags.append(labels)
    return sentences, tags


def _read_jsonl(path, tokens_field, tags_field):
    sentences, tags = [], []
    for number, line in _lines(path):
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
        values = []
        for field in (tokens_field, tags_field):
            if field not in row:
                available = ", ".join(sorted(row)) or "none"
                raise ValueError(
                    f"{path}, line {number}: no field {field!r} (its fields: {available})."
                )
            value = row[field]
            if not isinstance(value, list) or not value:
                raise ValueError(
                    f"{path}, line {number}: {field!r} must be a non-empty list of strings, got "
                    f"{json.dumps(value)[:60]}."
                )
            for index, item in enumerate(value):
                if not isinstance(item, str) or not item.strip():
                    raise ValueError(
                        f"{path}, line {number}: {field!r}[{index}] is {json.dumps(item)}; "
                        "words and tags must be non-empty strings."
                    )
            values.append(value)
        words, labels = values
        if len(words) != len(labels):
            raise ValueError(
                f"{path}, line {number}: {len(words)} {tokens_field!r} but {len(labels)} "
                f"{tags_field!r}; every word needs one tag."
            )
        sentences.append(words)
        tags.append(labels)
    return sentences, tags
