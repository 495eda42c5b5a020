"""The corpus manifest: what validating a corpus's files found, kept beside them, so that the
next start (a resume, another worker, another run on the same data) does not read them again.

`TextCorpus.from_files` validates each file once, line by line (see
`lmpipe.datasets.corpora.corpus_validation`); on a 1 GB corpus that pass takes tens of seconds at
every start and on every worker. The manifest, `.lmpipe-manifest.json` in each folder that
holds corpus files, records per file its size, modification time and content hash (a SHA-256
of 16 blocks of 64 KiB spread over the file, all of it up to 1 MiB: `content_digest`), the
reading settings (format, JSON field, encoding errors), the counts of `FileStats` and its
longest line. A file whose size, modification time, hash and settings match its record is not
validated again; any other is validated and its record replaced, so a file rewritten to the
same size and time is noticed too. The hash reads 1 MiB a file at each start: 0.7 ms for the
4.4 MB of Shakespeare's plays (whose validation takes 340 ms, and a hash of all of it 3 ms),
the same for a file of any size. The longest line is checked against the `max_line_bytes` of
each start, with the same error as a full pass.

A record is checked before it is used: its fields, their types and ranges (counts that are
integers >= 0 and fit together and with the file's size, as validation finds them), and a
hash of the record itself, which a record edited or damaged no longer matches. A record that
does not fit is ignored with a one-line warning naming the manifest and the file, and the
file is validated again. A manifest that cannot be read is ignored (and rewritten); a folder
that cannot be written to (read-only data) just keeps no manifest. The reader checks the
counts again as it reads each file (`lmpipe.datasets.corpora.corpus_reading.counted_documents`).
"""

import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import uuid

import tensorflow as tf

from lmpipe.datasets.corpora.corpus_validation import MANIFEST_FILE, FileStats, scan_file

# 2: records hold the file's content hash and their own.
MANIFEST_VERSION = 2

_COUNTS = tuple(field.name for field in dataclasses.fields(FileStats) if field.name != "path")
_RECORD_FIELDS = {"size", "mtime_ns", "sha256", "settings", "stats", "longest_line", "check"}

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class FileIdentity:
    """A file's size and modification time: with its content hash (`content_digest`), what
    says it is unchanged since its validation."""

    size: int
    mtime_ns: int

    @classmethod
    def of(cls, path):
        if "://" not in path:  # TensorFlow's stat rounds local times to the second
            stat = os.stat(path)
            return cls(size=stat.st_size, mtime_ns=stat.st_mtime_ns)
        stat = tf.io.gfile.stat(path)
        return cls(size=int(stat.length), mtime_ns=int(stat.mtime_nsec))


# The content hash reads this many blocks of this size, spread over the file from its first
# byte to its last (the whole file up to 1 MiB): a restart reads 1 MiB a file, not the corpus.
DIGEST_BLOCKS = 16
DIGEST_BLOCK_BYTES = 1 << 16


def content_digest(path, size):
    """The SHA-256, in hex, of the file's `size` and of `DIGEST_BLOCKS` blocks of
    `DIGEST_BLOCK_BYTES` spread evenly over it, the first and the last included (the whole
    file when it is no larger than them): what notices a file rewritten to the same size and
    modification time without reading all of it at every start."""
    digest = hashlib.sha256(str(size).encode("ascii"))
    opener = tf.io.gfile.GFile if "://" in path else open
    with opener(path, "rb") as stream:
        if size <= DIGEST_BLOCKS * DIGEST_BLOCK_BYTES:
            digest.update(stream.read())
            return digest.hexdigest()
        last = size - DIGEST_BLOCK_BYTES
        for block in range(DIGEST_BLOCKS):
            stream.seek(last * block // (DIGEST_BLOCKS - 1))
            digest.update(stream.read(DIGEST_BLOCK_BYTES))
    return digest.hexdigest()


def _record_check(record):
    """The hash of a record's fields but `check`, which the record keeps in `check`."""
    fields = {name: value for name, value in record.items() if name != "check"}
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode("utf-8")).hexdigest()


def _is_count(value):
    return type(value) is int and value >= 0  # not a bool, not a float


def record_problem(record):
    """What is wrong with a manifest record, as the end of a sentence ("has no field 'size'"),
    or None: its fields, their types and ranges as validation finds them, and its `check`."""
    if not isinstance(record, dict):
        return f"is a {type(record).__name__}, not an object"
    if set(record) != _RECORD_FIELDS:
        return f"has the fields {sorted(record)}, not {sorted(_RECORD_FIELDS)}"
    size, stats, longest = record["size"], record["stats"], record["longest_line"]
    if not _is_count(size) or size == 0:
        return f"has size={size!r}, not a positive integer"
    if type(record["mtime_ns"]) is not int:
        return f"has mtime_ns={record['mtime_ns']!r}, not an integer"
    digest = record["sha256"]
    if not (
        isinstance(digest, str) and len(digest) == 64 and set(digest) <= set("0123456789abcdef")
    ):
        return f"has sha256={digest!r}, not a SHA-256 in hex"
    if not isinstance(record["settings"], dict):
        return f"has settings={record['settings']!r}, not an object"
    if not isinstance(stats, dict) or set(stats) != set(_COUNTS):
        return f"has stats={stats!r}, not the counts {list(_COUNTS)}"
    for name in _COUNTS:
        if not _is_count(stats[name]):
            return f"has {name}={stats[name]!r}, not an integer >= 0"
    documents, sentences = stats["num_documents"], stats["num_sentences"]
    # Validation finds a document at least, one with text, a sentence (of a byte at least)
    # in each document, and a byte at least for each empty record.
    if not 1 <= documents <= sentences <= size:
        return (
            f"has num_documents={documents} and num_sentences={sentences}, where "
            f"1 <= num_documents <= num_sentences <= size={size}"
        )
    if stats["num_documents_without_text"] >= documents or stats["num_empty_records"] > size:
        return f"has counts that do not fit together or with size={size}: {stats}"
    if not isinstance(longest, dict) or set(longest) != {"bytes", "line"}:
        return f"has longest_line={longest!r}, not {{'bytes': ..., 'line': ...}}"
    if not (_is_count(longest["bytes"]) and _is_count(longest["line"])):
        return f"has longest_line={longest!r}, not integers >= 0"
    if longest["bytes"] > size or not 1 <= longest["line"] <= size:
        return f"has longest_line={longest!r}, beyond the file's size={size}"
    if record["check"] != _record_check(record):
        return "does not match its own hash (`check`): it was changed after it was written"
    return None


class Manifest:
    """The records of one folder's manifest.

    Args:
        folder: the folder holding corpus files (and the manifest).
    """

    def __init__(self, folder):
        self.folder = folder
        self.path = os.path.join(folder, MANIFEST_FILE) if folder else MANIFEST_FILE
        self.records = self._read()
        self.changed = False

    def _read(self):
        try:
            if not tf.io.gfile.exists(self.path):
                return {}
            with tf.io.gfile.GFile(self.path, "rb") as file:
                content = json.loads(file.read().decode("utf-8"))
            if content.get("version") != MANIFEST_VERSION or not isinstance(
                content.get("files"), dict
            ):
                raise ValueError(f"not a version {MANIFEST_VERSION} manifest")
            return content["files"]
        except (OSError, ValueError, AttributeError, tf.errors.OpError) as error:
            logger.warning(
                "The corpus manifest %s cannot be read (%s); its files are validated again "
                "and it is rewritten.",
                self.path,
                error,
            )
            return {}

    def lookup(self, path, identity, digest, settings):
        """The record of `path` (a dict: `stats`, `longest_line`, ...) if it is sound (see
        `record_problem`) and matches `identity`, the content `digest` and `settings`, else
        None; a record that is not sound, or whose file changed without a change of size and
        time, is reported by a one-line warning."""
        name = os.path.basename(path)
        record = self.records.get(name)
        if record is None:
            return None
        problem = record_problem(record)
        if problem is not None:
            logger.warning(
                "The corpus manifest %s: the record of %s %s; it is ignored and the file is "
                "validated again.",
                self.path,
                name,
                problem,
            )
            return None
        if record["size"] != identity.size or record["mtime_ns"] != identity.mtime_ns:
            return None  # the file changed, as files do: validated again
        if record["settings"] != settings:
            return None
        if record["sha256"] != digest:
            logger.warning(
                "The corpus manifest %s: %s changed without a change of size or modification "
                "time (its SHA-256 differs from the record's); the file is validated again.",
                self.path,
                name,
            )
            return None
        return record

    def record(self, path, identity, digest, settings, stats, longest_line):
        record = {
            "size": identity.size,
            "mtime_ns": identity.mtime_ns,
            "sha256": digest,
            "settings": settings,
            "stats": stats,
            "longest_line": longest_line,
        }
        record["check"] = _record_check(record)
        self.records[os.path.basename(path)] = record
        self.changed = True

    def write(self):
        """Write the records if they changed: to a temporary file, renamed over the manifest
        (a reader sees the old or the new one; several workers may write the same records)."""
        if not self.changed:
            return
        content = json.dumps({"version": MANIFEST_VERSION, "files": self.records}, indent=1)
        temporary = f"{self.path}.{uuid.uuid4().hex}.tmp"
        try:
            with tf.io.gfile.GFile(temporary, "wb") as file:
                file.write(content.encode("utf-8"))
            tf.io.gfile.rename(temporary, self.path, overwrite=True)
        except (OSError, tf.errors.OpError) as error:
            logger.info("No corpus manifest written to %s (%s).", self.path, error)
            with contextlib.suppress(OSError, tf.errors.OpError):
                tf.io.gfile.remove(temporary)
        self.changed = False


def record_fits(record, max_line_bytes):
    """Whether a (sound) manifest record's longest line is within `max_line_bytes`."""
    return record["longest_line"]["bytes"] <= max_line_bytes


def validated_file_stats(
    files, file_format, text_field, encoding_errors, max_line_bytes, manifest=True
):
    """`[FileStats]` of `files`: from their manifest records where the files are unchanged,
    else by validating them (and recording what was found). `manifest=False` validates every
    file and neither reads nor writes a manifest.

    Raises:
        ValueError: as `scan_file` (a file whose recorded longest line is over
            `max_line_bytes` is read again for the error).
    """
    settings = {"format": file_format, "text_field": text_field, "errors": encoding_errors}
    manifests = {}
    stats = []
    for path in files:
        if not manifest:
            stats.append(
                scan_file(path, file_format, text_field, encoding_errors, max_line_bytes)[0]
            )
            continue
        folder = os.path.dirname(path)
        if folder not in manifests:
            manifests[folder] = Manifest(folder)
        records = manifests[folder]
        # Taken before the file is read: a change while it is validated leaves a record that
        # the next start does not trust.
        identity = FileIdentity.of(path)
        digest = content_digest(path, identity.size)
        record = records.lookup(path, identity, digest, settings)
        # A file with a line over `max_line_bytes` is read again, for the error naming its
        # first such line, as a full pass names it.
        if record is not None and record_fits(record, max_line_bytes):
            stats.append(FileStats(path=path, **record["stats"]))
            continue
        found, longest = scan_file(path, file_format, text_field, encoding_errors, max_line_bytes)
        counts = dataclasses.asdict(found)
        del counts["path"]
        records.record(path, identity, digest, settings, counts, longest)
        stats.append(found)
    for records in manifests.values():
        records.write()
    return stats
