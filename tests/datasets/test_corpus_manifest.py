"""The corpus manifest: a start after the first reads only the files that changed, with the
same counts and the same errors as a full validation."""

import json
import logging
import os

import pytest
import tensorflow as tf

from lmpipe.datasets import TextCorpus, corpus_manifest
from lmpipe.datasets.corpus_manifest import MANIFEST_FILE

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
    (folder / MANIFEST_FILE).write_text('{"version": 1, "files": [')
    with caplog.at_level(logging.WARNING):
        corpus = TextCorpus.from_files(str(folder / "*.txt"))
    assert "cannot be read" in caplog.text and MANIFEST_FILE in caplog.text
    assert corpus.num_documents == 4
    assert json.loads((folder / MANIFEST_FILE).read_text())["version"] == 1
    TextCorpus.from_files(str(folder / "*.txt"))
    assert scans == ["a.txt", "b.txt"] * 2


def test_a_folder_that_cannot_be_written_keeps_no_manifest(folder, monkeypatch):
    def refuse(*arguments, **keywords):
        raise tf.errors.PermissionDeniedError(None, None, "read-only file system")

    monkeypatch.setattr(corpus_manifest.tf.io.gfile, "rename", refuse)
    corpus = TextCorpus.from_files(str(folder / "*.txt"))
    assert corpus.num_documents == 4
    assert sorted(os.listdir(folder)) == ["a.txt", "b.txt"]
