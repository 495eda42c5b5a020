"""The corpus manifest: a start after the first reads only the files that changed, with the
same counts and the same errors as a full validation."""

import json
import logging
import os

import pytest
import tensorflow as tf

from lmpipe.datasets import TextCorpus
from lmpipe.datasets.corpora import corpus_manifest
from lmpipe.datasets.corpora.corpus_manifest import MANIFEST_FILE

TEXT = "To be, or not to be.\nThat is the question.\n\nWhether 'tis nobler.\nIn the mind.\n"


@pytest.fixture
def folder(tmp_path):
    for name in ("a.txt", "b.txt"):
        (tmp_path / name).write_text(TEXT)
    return tmp_path


@pytest.fixture
def scans(monkeypatch):
    """The files validation reads, in order."""
    read = []
    real = corpus_manifest.scan_file

    def scan_file(path, *arguments):
        read.append(os.path.basename(path))
        return real(path, *arguments)

    monkeypatch.setattr(corpus_manifest, "scan_file", scan_file)
    return read


def test_the_second_start_reads_no_file_and_counts_the_same(folder, scans):
    first = TextCorpus.from_files(str(folder / "*"))
    assert scans == ["a.txt", "b.txt"]
    manifest = json.loads((folder / MANIFEST_FILE).read_text())
    assert manifest["files"]["a.txt"]["stats"]["num_documents"] == 2
    second = TextCorpus.from_files(str(folder / "*"))  # the manifest is not a corpus file
    assert scans == ["a.txt", "b.txt"]
    assert second.file_stats == first.file_stats
    assert second.files == first.files and len(second.files) == 2
    assert [d.numpy().tolist() for d in second.documents()] == [
        d.numpy().tolist() for d in first.documents()
    ]


def test_a_changed_file_or_other_settings_are_validated_again(folder, scans):
    TextCorpus.from_files(str(folder / "*.txt"))
    with open(folder / "b.txt", "a") as file:
        file.write("\nA third document.\n")
    corpus = TextCorpus.from_files(str(folder / "*.txt"))
    assert scans == ["a.txt", "b.txt", "b.txt"]
    assert [stats.num_documents for stats in corpus.file_stats] == [2, 3]
    TextCorpus.from_files(str(folder / "*.txt"), format="prose")
    assert scans[3:] == ["a.txt", "b.txt"]
    TextCorpus.from_files(str(folder / "*.txt"), manifest=False)
    assert scans[5:] == ["a.txt", "b.txt"]


def test_a_recorded_line_over_max_line_bytes_is_the_full_passs_error(folder, scans):
    TextCorpus.from_files(str(folder / "a.txt"))
    with pytest.raises(ValueError) as full_pass:
        TextCorpus.from_files(str(folder / "a.txt"), max_line_bytes=10, manifest=False)
    with pytest.raises(ValueError) as recorded:
        TextCorpus.from_files(str(folder / "a.txt"), max_line_bytes=10)
    assert str(recorded.value) == str(full_pass.value)
    assert "a.txt, line 1: 20 bytes, more than max_line_bytes=10" in str(recorded.value)
    TextCorpus.from_files(str(folder / "a.txt"), max_line_bytes=21)  # the longest line fits
    assert scans == ["a.txt"] * 3  # read again only for the error


def test_a_damaged_manifest_is_ignored_and_rewritten(folder, scans, caplog):
    TextCorpus.from_files(str(folder / "*.txt"))
    (folder / MANIFEST_FILE).write_text('{"version": 2, "files": [')
    with caplog.at_level(logging.WARNING):
        corpus = TextCorpus.from_files(str(folder / "*.txt"))
    assert "cannot be read" in caplog.text and MANIFEST_FILE in caplog.text
    assert corpus.num_documents == 4
    assert (
        json.loads((folder / MANIFEST_FILE).read_text())["version"]
        == corpus_manifest.MANIFEST_VERSION
    )
    TextCorpus.from_files(str(folder / "*.txt"))
    assert scans == ["a.txt", "b.txt"] * 2


def test_a_folder_that_cannot_be_written_keeps_no_manifest(folder, monkeypatch):
    def refuse(*arguments, **keywords):
        raise tf.errors.PermissionDeniedError(None, None, "read-only file system")

    monkeypatch.setattr(corpus_manifest.tf.io.gfile, "rename", refuse)
    corpus = TextCorpus.from_files(str(folder / "*.txt"))
    assert corpus.num_documents == 4
    assert sorted(os.listdir(folder)) == ["a.txt", "b.txt"]


def rewrite_record(folder, name, check=True, **changes):
    """Change fields of `name`'s record in the manifest (`stats`: a dict of counts to change),
    with its `check` recomputed (a record that is sound but for the change) unless not asked."""
    path = folder / MANIFEST_FILE
    manifest = json.loads(path.read_text())
    record = manifest["files"][name]
    for field, value in changes.items():
        if field == "stats":
            record["stats"] = {**record["stats"], **value}
        else:
            record[field] = value
    if check:
        record["check"] = corpus_manifest._record_check(record)
    path.write_text(json.dumps(manifest))


def assert_validated_again_with_a_warning(folder, scans, caplog, reason):
    """A start after the damage warns once, in one line naming the manifest, the file and
    `reason`, reads b.txt again, counts what the files hold, and writes a sound record."""
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        corpus = TextCorpus.from_files(str(folder / "*.txt"))
    (message,) = [record.getMessage() for record in caplog.records]
    assert "\n" not in message and str(folder / MANIFEST_FILE) in message
    assert "b.txt" in message and reason in message and "validated again" in message
    assert scans == ["a.txt", "b.txt", "b.txt"]
    assert [stats.num_documents for stats in corpus.file_stats] == [2, 2]
    assert len(corpus.split(held_out=0.5)[0]) == 2  # every document read, none dropped
    record = json.loads((folder / MANIFEST_FILE).read_text())["files"]["b.txt"]
    assert corpus_manifest.record_problem(record) is None


@pytest.mark.parametrize(
    "changes, reason",
    [
        ({"stats": {"num_documents": "2"}}, "num_documents='2', not an integer >= 0"),
        ({"stats": {"num_sentences": 4.0}}, "num_sentences=4.0, not an integer >= 0"),
        ({"stats": {"num_documents": True}}, "num_documents=True, not an integer >= 0"),
        ({"stats": {"num_empty_records": -1}}, "num_empty_records=-1, not an integer >= 0"),
        # More documents than sentences, or sentences than bytes: not what validation finds.
        ({"stats": {"num_documents": 5}}, "num_documents=5 and num_sentences=4"),
        ({"stats": {"num_sentences": 10**6}}, "num_sentences=1000000"),
        ({"stats": {"num_documents_without_text": 2}}, "do not fit together"),
        ({"stats": {"num_documents": 0}}, "num_documents=0 and num_sentences=4"),
        ({"size": "78"}, "size='78', not a positive integer"),
        ({"mtime_ns": 1.5}, "mtime_ns=1.5, not an integer"),
        ({"sha256": "abc"}, "sha256='abc', not a SHA-256 in hex"),
        ({"settings": None}, "settings=None, not an object"),
        ({"longest_line": {"bytes": 999, "line": 1}}, "beyond the file's size=78"),
        ({"longest_line": {"bytes": 20}}, "not {'bytes': ..., 'line': ...}"),
        ({"extra": 1}, "has the fields"),
    ],
)
def test_a_record_of_the_wrong_types_or_ranges_is_ignored_with_a_warning(
    folder, scans, caplog, changes, reason
):
    TextCorpus.from_files(str(folder / "*.txt"))
    rewrite_record(folder, "b.txt", **changes)
    assert_validated_again_with_a_warning(folder, scans, caplog, reason)


def test_a_record_changed_after_it_was_written_is_ignored_with_a_warning(folder, scans, caplog):
    """A count that fits every range but is not the one validation wrote: the record's own
    hash no longer matches (before, `split` failed with an IndexError)."""
    TextCorpus.from_files(str(folder / "*.txt"))
    rewrite_record(folder, "b.txt", check=False, stats={"num_documents": 3})
    assert_validated_again_with_a_warning(folder, scans, caplog, "does not match its own hash")


def test_a_record_that_is_not_an_object_is_ignored_with_a_warning(folder, scans, caplog):
    TextCorpus.from_files(str(folder / "*.txt"))
    manifest = json.loads((folder / MANIFEST_FILE).read_text())
    manifest["files"]["b.txt"] = [78, 2]
    (folder / MANIFEST_FILE).write_text(json.dumps(manifest))
    assert_validated_again_with_a_warning(folder, scans, caplog, "is a list, not an object")


def test_a_file_rewritten_to_the_same_size_and_time_is_validated_again(folder, scans, caplog):
    TextCorpus.from_files(str(folder / "*.txt"))
    stat = os.stat(folder / "b.txt")
    # Other text of the same size (two documents still), its time set back as it was.
    (folder / "b.txt").write_text(TEXT.replace("To be", "So be").replace("mind", "Mind"))
    os.utime(folder / "b.txt", ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert os.stat(folder / "b.txt").st_size == stat.st_size
    assert_validated_again_with_a_warning(folder, scans, caplog, "SHA-256 differs")
    # Bytes that are not UTF-8: the file's error, by line, when the corpus is made (before,
    # the manifest let it through to a UnicodeDecodeError when it was read).
    (folder / "b.txt").write_bytes(TEXT.replace("To", "T\xff").encode("latin-1"))
    os.utime(folder / "b.txt", ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert os.stat(folder / "b.txt").st_size == stat.st_size
    with pytest.raises(ValueError, match=r"b.txt, line 1: invalid UTF-8"):
        TextCorpus.from_files(str(folder / "*.txt"))


@pytest.mark.parametrize(
    "documents, found", [(3, "2 documents, not the 3"), (1, "more documents than the 1")]
)
def test_documents_are_counted_against_the_record_as_they_are_read(folder, documents, found):
    """A sound record (its hash recomputed) whose count is not the file's: reading the file
    says so, by name, where a larger count failed `split` with an IndexError and a smaller
    one left documents out of it."""
    TextCorpus.from_files(str(folder / "*.txt"))
    rewrite_record(folder, "a.txt", stats={"num_documents": documents, "num_sentences": 4})
    corpus = TextCorpus.from_files(str(folder / "*.txt"))
    assert corpus.num_documents == 2 + documents
    message = f"a.txt holds {found} counted when the corpus was made"
    with pytest.raises(ValueError, match=message):
        corpus.split(held_out=0.5)
    with pytest.raises(ValueError, match=message):
        list(corpus.iter_documents())


def test_a_file_changed_after_the_corpus_was_made_stops_the_reader_by_name(folder):
    corpus = TextCorpus.from_files(str(folder / "*.txt"))
    (folder / "a.txt").write_text("One document.\n")
    with pytest.raises(ValueError, match="a.txt holds 1 documents, not the 2 counted"):
        list(corpus.iter_documents())
    (folder / "a.txt").write_text(TEXT + "\nA third.\n")
    with pytest.raises(ValueError, match="a.txt holds more documents than the 2 counted"):
        list(corpus.iter_documents())


def test_a_version_1_manifest_is_read_again_and_rewritten(folder, scans, caplog):
    TextCorpus.from_files(str(folder / "*.txt"))
    manifest = json.loads((folder / MANIFEST_FILE).read_text())
    (folder / MANIFEST_FILE).write_text(json.dumps({**manifest, "version": 1}))
    with caplog.at_level(logging.WARNING):
        TextCorpus.from_files(str(folder / "*.txt"))
    assert "not a version 2 manifest" in caplog.text
    assert scans == ["a.txt", "b.txt"] * 2
    assert json.loads((folder / MANIFEST_FILE).read_text())["version"] == 2


def test_the_content_hash_samples_a_large_file_from_its_first_byte_to_its_last(tmp_path):
    """Over 1 MiB the hash reads 16 blocks spread over the file: a change of its first or
    last byte, or of one inside a sampled block, is another hash."""
    size = 3 * 2**20 + 5
    content = bytearray(b"x" * size)
    path = tmp_path / "large.txt"
    path.write_bytes(content)
    digest = corpus_manifest.content_digest(str(path), size)
    block = corpus_manifest.DIGEST_BLOCK_BYTES
    seventh = (size - block) * 7 // (corpus_manifest.DIGEST_BLOCKS - 1) + 10
    for offset in (0, size - 1, seventh):
        changed = bytearray(content)
        changed[offset] = ord("y")
        path.write_bytes(changed)
        assert corpus_manifest.content_digest(str(path), size) != digest, offset
    path.write_bytes(content)
    assert corpus_manifest.content_digest(str(path), size) == digest
