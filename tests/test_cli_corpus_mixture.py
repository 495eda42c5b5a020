"""`lmpipe pretrain --corpus PATTERN[:WEIGHT]`, repeatable: a mixture of corpora in the
weights given; a bad weight, or several corpora without a weight each, is a one-line error
naming the value before any work (TensorFlow not even imported)."""

import json
import subprocess
import sys

import pytest

from lmpipe.cli.corpus_flags import CorpusSource, corpus_source
from lmpipe.cli.runs import _corpus_source, print_shares, read_corpus
from lmpipe.datasets import CorpusMixture, TextCorpus

SCRIPT = """
import json, sys
from lmpipe.cli.main import main
sys.argv = ["lmpipe", *json.loads(sys.argv[1])]
try:
    main()
except SystemExit as exit:
    print("exit", exit.code)
print("tensorflow imported:", "tensorflow" in sys.modules)
"""


@pytest.fixture
def corpora(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name, documents in (("wiki.txt", 6), ("books_a.txt", 3), ("books_b.txt", 2)):
        text = "".join(f"{name} document {i} .\nits second line .\n\n" for i in range(documents))
        (tmp_path / name).write_text(text)
    (tmp_path / "dir:with colon").mkdir()
    (tmp_path / "dir:with colon" / "c.txt").write_text("a line .\n")
    return tmp_path


def _run(argv, cwd):
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, json.dumps(argv)],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
    )
    return done.stdout, done.stderr


def test_a_value_splits_into_pattern_and_weight(corpora):
    assert corpus_source("wiki.txt:0.7") == CorpusSource("wiki.txt", 0.7)
    assert corpus_source("books_*.txt:3") == CorpusSource("books_*.txt", 3.0)
    assert corpus_source("wiki.txt") == CorpusSource("wiki.txt", None)
    # A path that holds ':' is itself when no number follows its last ':'.
    assert corpus_source("dir:with colon/c.txt") == CorpusSource("dir:with colon/c.txt", None)
    assert corpus_source("dir:with colon/c.txt:0.5") == CorpusSource("dir:with colon/c.txt", 0.5)
    assert corpus_source("gs://bucket/a.txt") == CorpusSource("gs://bucket/a.txt", None)


@pytest.mark.parametrize(
    "argv, error",
    [
        (
            ["--corpus", "wiki.txt:-1"],
            "error: argument --corpus: 'wiki.txt:-1': the weight must be a positive number, got -1",
        ),
        (
            ["--corpus", "wiki.txt:0"],
            "error: argument --corpus: 'wiki.txt:0': the weight must be a positive number, got 0",
        ),
        (
            ["--corpus", "wiki.txt:nan"],
            "error: argument --corpus: 'wiki.txt:nan': the weight must be a positive number, "
            "got nan",
        ),
        (
            ["--corpus", "wiki.txt:abc"],
            "error: argument --corpus: 'wiki.txt:abc': the weight 'abc' is not a number (give "
            "PATTERN:WEIGHT, a positive number such as 0.3)",
        ),
        (
            ["--corpus", "wiki.txt:0.7", "--corpus", "books_*.txt"],
            "error: --corpus books_*.txt: give each of the 2 corpora a weight (--corpus "
            "PATTERN:WEIGHT)",
        ),
        (
            ["--corpus", "wiki.txt:0.7", "--corpus", "missing*.txt:0.3"],
            "error: --corpus 'missing*.txt': no file matches it",
        ),
        (
            [arg for _ in range(9) for arg in ("--corpus", "wiki.txt:1")],
            "error: --corpus is given 9 times; a mixture takes at most 8 corpora",
        ),
    ],
)
def test_a_bad_corpus_flag_is_named_before_any_work(corpora, argv, error):
    stdout, stderr = _run(["pretrain", "gpt", *argv, "--out", "out"], corpora)
    assert error in stderr or f"exit {error}" in stdout
    assert "tensorflow imported: False" in stdout
    assert not (corpora / "out").exists()


def test_word2vec_refuses_several_corpora(corpora):
    stdout, _ = _run(
        ["pretrain", "word2vec", "--corpus", "wiki.txt:1", "--corpus", "books_a.txt:1"]
        + ["--out", "out"],
        corpora,
    )
    assert (
        "exit error: --corpus is given several times; word2vec reads one corpus (mixtures are "
        "for the pretraining streams)"
    ) in stdout


def test_several_corpora_read_as_a_mixture_and_print_their_shares(corpora, capsys):
    sources = [corpus_source("wiki.txt:0.7"), corpus_source("books_*.txt:0.3")]
    mixture = read_corpus(sources, "auto")
    assert isinstance(mixture, CorpusMixture)
    assert mixture.names == ("wiki.txt", "books_*.txt")
    assert mixture.weights == pytest.approx((0.7, 0.3), abs=1e-15)
    assert [len(corpus) for corpus in mixture.sources] == [6, 5]
    print_shares(mixture, 0, 10_000, "the first 10,000 examples")
    assert capsys.readouterr().out.splitlines() == [
        "The mixture's sources in the first 10,000 examples:",
        "  wiki.txt 69.9% (weight 70.0%)",
        "  books_*.txt 30.1% (weight 30.0%)",
    ]


def test_one_corpus_reads_and_records_as_before(corpora, capsys):
    corpus = read_corpus([corpus_source("wiki.txt")], "auto")
    assert isinstance(corpus, TextCorpus) and len(corpus) == 6
    assert isinstance(read_corpus("wiki.txt", "auto"), TextCorpus)  # `evaluate --corpus`
    print_shares(corpus, 0, 10_000, "the first 10,000 examples")
    assert capsys.readouterr().out == ""
    assert _corpus_source([corpus_source("wiki.txt")]) == str(corpora / "wiki.txt")
    assert _corpus_source(None) == "shakespeare"
    assert _corpus_source([corpus_source("wiki.txt:2"), corpus_source("books_a.txt:1")]) == [
        [str(corpora / "wiki.txt"), 2.0],
        [str(corpora / "books_a.txt"), 1.0],
    ]
