"""read_tagged: CoNLL and JSONL files of tagged words, checked line by line."""

import json
import os

import pytest

from lmpipe.datasets import TaggedSentences, read_tagged

FIXTURE = os.path.join(os.path.dirname(__file__), "fixtures", "tagged.conll")


def test_conll_reads_the_last_column_skips_docstart_and_splits_at_blank_lines():
    data = read_tagged(FIXTURE)
    assert data.sentences == [
        ["EU", "rejects", "German", "call", "."],
        ["Peter", "Blackburn"],
        ["BRUSSELS", "1996-08-22"],  # a -DOCSTART- line ends nothing; the file ends a sentence
    ]
    assert data.tags == [
        ["B-ORG", "O", "B-MISC", "O", "O"],
        ["B-PER", "I-PER"],
        ["B-LOC", "O"],
    ]
    assert data.tag_names == ("B-LOC", "B-MISC", "B-ORG", "B-PER", "I-PER", "O")
    assert len(data) == 3 and data.num_words == 9
    assert data.examples == (data.sentences, data.tags)


def test_jsonl_reads_the_named_fields(tmp_path):
    path = tmp_path / "train.jsonl"
    rows = [
        {"words": ["Iago", "lies"], "ner": ["B-PER", "O"], "id": 1},
        {"words": ["O"], "ner": ["O"]},
    ]
    path.write_text("\n".join(json.dumps(row) for row in rows) + "\n\n")
    data = read_tagged(path, tokens_field="words", tags_field="ner")
    assert data.sentences == [["Iago", "lies"], ["O"]] and data.tags == [["B-PER", "O"], ["O"]]
    # format="conll" forces the reader whatever the ending
    conll = tmp_path / "x.jsonl"
    conll.write_text("Iago B-PER\n")
    assert read_tagged(conll, format="conll").tags == [["B-PER"]]


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("one.conll", "Iago B-PER\nlies\n", r"one.conll, line 2: one column \('lies'\)"),
        ("bad.conll", b"Iago B-PER\n\xff O\n", r"bad.conll, line 2: invalid UTF-8"),
        ("empty.conll", "\n-DOCSTART- O\n\n", r"empty.conll has no sentences"),
        (
            "lengths.jsonl",
            '{"tokens": ["a"], "tags": ["O"]}\n{"tokens": ["a", "b"], "tags": ["O"]}\n',
            r"lengths.jsonl, line 2: 2 'tokens' but 1 'tags'",
        ),
        (
            "empty_word.jsonl",
            '{"tokens": ["a", " "], "tags": ["O", "O"]}\n',
            r"empty_word.jsonl, line 1: 'tokens'\[1\] is \" \"",
        ),
        (
            "field.jsonl",
            '{"words": ["a"], "tags": ["O"]}\n',
            r"field.jsonl, line 1: no field 'tokens'",
        ),
        ("json.jsonl", "{not json\n", r"json.jsonl, line 1: not JSON"),
        (
            "list.jsonl",
            '{"tokens": "a b", "tags": ["O"]}\n',
            r"line 1: 'tokens' must be a non-empty",
        ),
    ],
)
def test_bad_files_are_refused_naming_the_file_and_line(tmp_path, name, content, message):
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    with pytest.raises(ValueError, match=message):
        read_tagged(path)


def test_bad_arguments_are_refused(tmp_path):
    with pytest.raises(ValueError, match="`format` must be one of"):
        read_tagged(FIXTURE, format="csv")
    with pytest.raises(ValueError, match="`tags_field` must be a non-empty string"):
        read_tagged(FIXTURE, tags_field="")
    with pytest.raises(FileNotFoundError):
        read_tagged(tmp_path / "missing.conll")


def test_split_holds_out_sentences_reproducibly_in_file_order():
    data = TaggedSentences("x", [[str(i)] for i in range(10)], [["O"]] * 10)
    rest, held = data.split(0.3, seed=1)
    assert len(rest) == 7 and len(held) == 3
    assert sorted(rest.sentences + held.sentences, key=lambda s: int(s[0])) == data.sentences
    assert [int(s[0]) for s in held.sentences] == sorted(int(s[0]) for s in held.sentences)
    assert data.split(0.3, seed=1)[1].sentences == held.sentences
    assert len(data.split(2)[1]) == 2
    with pytest.raises(ValueError, match="both parts must keep at least one"):
        data.split(10)
