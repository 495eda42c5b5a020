"""read_labelled: the user's CSV, TSV and JSONL files of labelled examples, checked by line."""

import json

import pytest

from lmpipe.datasets.labelled.labelled_files import read_labelled


def test_csv_with_quotes_pairs_and_a_bom(tmp_path):
    path = tmp_path / "pairs.csv"
    path.write_text(
        "\ufeffid,premise,hypothesis,label\n"
        '1,"A man, a plan","A canal",yes\n'
        "\n"
        '2,"Two\nlines",One line,no\n',
        encoding="utf-8",
    )
    read = read_labelled(path, text="premise", text_pair="hypothesis")
    assert read.texts == ["A man, a plan", "Two\nlines"]
    assert read.text_pairs == ["A canal", "One line"]
    assert read.labels == ["yes", "no"] and read.class_names == ("no", "yes")
    assert read.examples == (read.texts, read.text_pairs, read.labels)
    assert read.subset([1]).examples == (["Two\nlines"], ["One line"], ["no"])


def test_tsv_and_jsonl_single_texts(tmp_path):
    (tmp_path / "a.tsv").write_text("label\ttext\nspam\tWin money now\nham\tSee you at 5\n")
    read = read_labelled(tmp_path / "a.tsv")
    assert read.examples == (["Win money now", "See you at 5"], ["spam", "ham"])
    lines = [{"body": "Great film", "stars": 5}, {"body": "Dull", "stars": 1, "extra": None}]
    (tmp_path / "b.jsonl").write_text("\n".join(json.dumps(row) for row in lines) + "\n\n")
    read = read_labelled(tmp_path / "b.jsonl", text="body", label="stars")
    assert read.examples == (["Great film", "Dull"], ["5", "1"])
    assert read.text_pairs is None and len(read) == 2


def test_labels_are_stripped_and_equal_numbers_are_one_class(tmp_path):
    (tmp_path / "a.csv").write_text(
        "text,label\na,spam\nb,spam \nc, ham\nd,1\ne,1.0\nf,01\ng,1e0\nh,0.50\ni,-2\n"
    )
    read = read_labelled(tmp_path / "a.csv")
    assert read.labels == ["spam", "spam", "ham", "1", "1", "1", "1", "0.5", "-2"]
    assert read.class_names == ("-2", "0.5", "1", "ham", "spam")
    rows = [{"text": "a", "label": 1}, {"text": "b", "label": 1.0}, {"text": "c", "label": "1"}]
    (tmp_path / "b.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert read_labelled(tmp_path / "b.jsonl").class_names == ("1",)


@pytest.mark.parametrize(
    "name, content",
    [
        ("a.jsonl", '{"text": "a", "label": 1}\n{"text": "b", "label": NaN}\n'),
        ("a.jsonl", '{"text": "a", "label": 1}\n{"text": "b", "label": -Infinity}\n'),
        ("a.csv", "text,label\nb,nan\na,1\n"),
        ("a.csv", "text,label\nb, inf\na,1\n"),
    ],
)
def test_nan_and_infinite_labels_are_refused_naming_the_line(tmp_path, name, content):
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(ValueError, match=rf"{name}, line 2: column 'label' is '.*', not a class"):
        read_labelled(path)


@pytest.mark.parametrize(
    "name, content, options, message",
    [
        ("a.csv", "text,label\nhello,1\nbye\n", {}, r"a.csv, line 3: 1 fields where the header"),
        ("a.csv", "text,label\nhello,1\n", {"label": "class"}, r"line 2: no column 'class'"),
        ("a.csv", "text,label\n  ,1\n", {}, r"a.csv, line 2: column 'text' is empty"),
        ("a.csv", "", {}, r"a.csv is empty: it needs a header row"),
        ("a.csv", "text,label\n", {}, r"a.csv has no examples"),
        ("a.jsonl", '{"text": "a", "label": 1}\n{"text": "b",\n', {}, r"line 2: not JSON"),
        ("a.jsonl", '["a", 1]\n', {}, r"a.jsonl, line 1: a JSON object is needed, got list"),
        ("a.jsonl", '{"text": ["a"], "label": 1}\n', {}, r"column 'text' must be text"),
        ("a.txt", "text,label\n", {}, r"cannot tell the format from the ending '.txt'"),
    ],
)
def test_bad_files_are_refused_naming_the_file_and_line(tmp_path, name, content, options, message):
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(ValueError, match=message):
        read_labelled(path, **options)


def test_invalid_utf8_names_the_line(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_bytes(b'{"text": "ok", "label": "x"}\n{"text": "\xff", "label": "y"}\n')
    with pytest.raises(ValueError, match=r"a.jsonl, line 2: invalid UTF-8 at byte 10"):
        read_labelled(path)
    path = tmp_path / "a.csv"
    path.write_bytes(b"text,label\n\xff,x\n")
    with pytest.raises(ValueError, match=r"a.csv: invalid UTF-8"):
        read_labelled(path)


def test_split_is_random_reproducible_and_keeps_both_parts(tmp_path):
    path = tmp_path / "a.tsv"
    path.write_text("text\tlabel\n" + "".join(f"text {i}\t{i % 3}\n" for i in range(20)))
    read = read_labelled(path)
    rest, held = read.split(0.25, seed=3)
    assert (len(rest), len(held)) == (15, 5)
    assert sorted(rest.texts + held.texts) == sorted(read.texts)
    assert held.texts == sorted(held.texts, key=read.texts.index)  # the file's order
    assert read.split(0.25, seed=3)[1].texts == held.texts
    assert read.split(0.25, seed=4)[1].texts != held.texts
    assert len(read.split(3)[1]) == 3
    with pytest.raises(ValueError, match="both parts must keep at least one"):
        read.split(20)
    with pytest.raises(ValueError, match="`held_out` must be a finite number > 0 and < 1"):
        read.split(1.5)
