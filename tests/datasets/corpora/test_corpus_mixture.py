"""CorpusMixture: sources and weights checked where they enter, normalized weights, a split
into two mixtures of the same weights, and every source's documents for vocabulary learning."""

import pytest

from lmpipe.datasets import CorpusMixture, TextCorpus


def _corpus(name, documents):
    return TextCorpus.from_documents(
        [[f"{name} {i} sentence {j}." for j in range(2)] for i in range(documents)]
    )


def test_weights_are_normalized_and_the_sources_kept():
    a, b = _corpus("a", 10), _corpus("b", 4)
    mixture = CorpusMixture([(a, 7), (b, 3)], names=["a.txt", "b/*.txt"])
    assert mixture.weights == pytest.approx((0.7, 0.3), abs=1e-15)
    assert mixture.sources == (a, b)
    assert len(mixture) == 14
    assert mixture.names == ("a.txt", "b/*.txt")
    assert not mixture.tokenized
    assert mixture.num_sentences == 28


@pytest.mark.parametrize(
    "weight, message",
    [
        (-1, r"`sources\[1\] weight` must be a positive finite number, got .*=-1\."),
        (0, r"`sources\[1\] weight` must be a positive finite number, got .*=0\."),
        (float("nan"), r"`sources\[1\] weight`"),
        ("abc", r"`sources\[1\] weight`"),
    ],
)
def test_a_bad_weight_is_named(weight, message):
    with pytest.raises(ValueError, match=message):
        CorpusMixture([(_corpus("a", 3), 1.0), (_corpus("b", 3), weight)])


def test_bad_sources_are_named():
    a = _corpus("a", 3)
    with pytest.raises(ValueError, match=r"1 to 8 \(corpus, weight\) pairs, got 9"):
        CorpusMixture([(a, 1.0)] * 9)
    with pytest.raises(ValueError, match=r"1 to 8 \(corpus, weight\) pairs, got 0"):
        CorpusMixture([])
    with pytest.raises(ValueError, match=r"`sources\[1\]` must be a \(corpus, weight\) pair"):
        CorpusMixture([(a, 1.0), a])
    with pytest.raises(ValueError, match=r"`sources\[0\]`'s corpus must be a TextCorpus"):
        CorpusMixture([(["some text"], 1.0)])
    with pytest.raises(ValueError, match=r"`sources\[0\]`'s corpus must be a TextCorpus"):
        CorpusMixture([(CorpusMixture([(a, 1.0)]), 1.0)])
    with pytest.raises(ValueError, match=r"`chunk_size` must be"):
        CorpusMixture([(a, 1.0)], chunk_size=0)
    with pytest.raises(ValueError, match=r"`names` must name the 1 sources, got 2"):
        CorpusMixture([(a, 1.0)], names=["a", "b"])


def test_describe_and_repr_show_sources_and_weights():
    mixture = CorpusMixture([(_corpus("a", 3), 0.7), (_corpus("b", 2), 0.3)], names=["x", "y"])
    lines = mixture.describe().splitlines()
    assert lines[0] == "CorpusMixture of 2 sources, 5 documents, chunks of 32 examples:"
    assert lines[1].startswith("  70.0% x: TextCorpus (")
    assert lines[2].startswith("  30.0% y: TextCorpus (")
    assert repr(mixture).startswith("CorpusMixture([(TextCorpus(")
    assert ", 0.700), (TextCorpus(" in repr(mixture)


def test_split_splits_each_source_and_keeps_the_weights():
    a, b = _corpus("a", 20), _corpus("b", 10)
    mixture = CorpusMixture([(a, 0.6), (b, 0.4)], chunk_size=8, names=["a", "b"])
    rest, held = mixture.split(0.2, seed=3)
    assert [len(c) for c in rest.sources] == [16, 8]
    assert [len(c) for c in held.sources] == [4, 2]
    assert rest.weights == held.weights == mixture.weights
    assert rest.chunk_size == held.chunk_size == 8
    assert rest.names == ("a", "b")
    # The same documents as splitting each source alone.
    assert list(held.sources[0].iter_documents()) == list(a.split(0.2, seed=3)[1].iter_documents())
    with pytest.raises(ValueError, match=r"`sources\[1\]`: .*held_out"):
        mixture.split(15, seed=3)


def test_iter_documents_reads_every_source_for_vocabulary_learning():
    a, b = _corpus("a", 2), _corpus("b", 1)
    documents = list(CorpusMixture([(a, 0.5), (b, 0.5)]).iter_documents())
    assert documents == [*a.iter_documents(), *b.iter_documents()]


def test_a_mixture_of_file_corpora_has_a_fingerprint(tmp_path):
    for name in ("a.txt", "b.txt"):
        (tmp_path / name).write_text(f"{name} one .\n{name} two .\n")
    a = TextCorpus.from_files(str(tmp_path / "a.txt"))
    b = TextCorpus.from_files(str(tmp_path / "b.txt"))
    fingerprint = CorpusMixture([(a, 1), (b, 3)], chunk_size=8).fingerprint()
    assert fingerprint == {
        "sources": [a.fingerprint(), b.fingerprint()],
        "shares": [0.25, 0.75],
        "chunk_size": 8,
    }
    # In memory (no fingerprint) in one source: none for the mixture.
    assert CorpusMixture([(a, 1), (_corpus("c", 2), 1)]).fingerprint() is None
