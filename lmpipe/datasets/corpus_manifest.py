"""The corpus manifest: what validating a corpus's files found, kept beside them, so that the
next start (a resume, another worker, another run on the same data) does not read them again.

`TextCorpus.from_files` validates each file once, line by line (see
`lmpipe.datasets.corpus_validation`); on a 1 GB corpus that pass takes tens of seconds at
every start and on every worker. The manifest, `.lmpipe-manifest.json` in each folder that
holds corpus files, records per file its size and modification time, the reading settings
(format, JSON field, encoding errors), the counts of `FileStats` and its longest line. A file
whose size, modification time and settings match its record is not read again; any other is
validated and its record replaced. The longest line is checked against the `max_line_bytes`
of each start, with the same error as a full pass. A manifest that cannot be read is ignored
(and rewritten); a folder that cannot be written to (read-only data) just keeps no manifest.

A file changed in place within the file system's timestamp resolution and to the same size
would not be noticed: `manifest=False` validates every file again (and writes no manifest).
"""

import contextlib
import dataclasses
import json
import logging
import os
import uuid

import tensorflow as tf

from lmpipe.datasets.corpus_validation import MANIFEST_FILE, FileStats, scan_file

MANIFEST_VERSION = 1

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class FileIdentity:
    """What says a file is unchanged since its validation: size and modification time."""

    size: int
    mtime_ns: int

    @classmethod
    def of(cls, path):
        if "://" not in path:  # TensorFlow's stat rounds local times to the second
            stat = os.stat(path)
            return cls(size=stat.st_size, mtime_ns=stat.st_mtime_ns)
        stat = tf.io.gfile.stat(path)
        return cls(size=int(stat.length), mtime_ns=int(stat.mtime_nsec))


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

    def lookup(self, path, identity, settings):
        """The record of `path` (a dict: `stats`, `longest_line`) if it matches `identity` and
        `settings`, else None."""
        record = self.records.get(os.path.basename(path))
        if not isinstance(record, dict):
            return None
        if record.get("size") != identity.size or record.get("mtime_ns") != identity.mtime_ns:
            return None
        if record.get("settings") != settings:
            return None
        return record

    def record(self, path, identity, settings, stats, longest_line):
        self.records[os.path.basename(path)] = {
            "size": identity.size,
            "mtime_ns": identity.mtime_ns,
            "settings": settings,
            "stats": stats,
            "longest_line": longest_line,
        }
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
    """Whether a manifest record is of the expected shape and its longest line is within
    `max_line_bytes`."""
    try:
        FileStats(path="", **record["stats"])
        return int(record["longest_line"]["bytes"]) <= max_line_bytes
    except (KeyError, TypeError, ValueError):
        return False  # a record of another shape: the file is validated again


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
        identity = FileIdentity.of(path)
        record = records.lookup(path, identity, settings)
        # A file with a line over `max_line_bytes` is read again, for the error naming its
        # first such line, as a full pass names it.
        if record is not None and record_fits(record, max_line_bytes):
            stats.append(FileStats(path=path, **record["stats"]))
            continue
        found, longest = scan_file(path, file_format, text_field, encoding_errors, max_line_bytes)
        counts = dataclasses.asdict(found)
        del counts["path"]
        records.record(path, identity, settings, counts, longest)
        stats.append(found)
    for records in manifests.values():
        records.write()
    return stats
