import json
import re
import tracemalloc

import pytest
import tensorflow as tf

from lmpipe.datasets import TextCorpus, TokenizedCorpus
from lmpipe.datasets.corpora import corpus as corpus_module
from lmpipe.datasets.corpora import corpus_validation
from lmpipe.datasets.corpora.sentences import split_sentences

PARAGRAPH = (
    "Mr. Smith went to Washington. He arrived at 5 p.m. on Monday! Did he?\n"
    '"Yes," said Dr. Jones. J. R. Tolkien wrote it, e.g. The Hobbit, etc. and more.\n'
    "So do I. (The U.S. Army came.) 1990 was a year? no, it was a decade."
)
PARAGRAPH_SENTENCES = [
    "Mr. Smith went to Washington.",
    "He arrived at 5 p.m. on Monday!",
    "Did he?",
    '"Yes," said Dr. Jones.',
    "J. R. Tolkien wrote it, e.g. The Hobbit, etc. and more.",
    "So do I.",
    "(The U.S. Army came.)",
    "1990 was a year? no, it was a decade.",
]


def write(path, content):
    data = content.encode("utf-8") if isinstance(content, str) else content
    path.write_bytes(data)
    return str(path)


def tf_documents(dataset):
    return [[s.decode("utf-8") for s in d] for d in dataset.as_numpy_iterator()]


def sentences_of(documents):
    return [s for d in documents for s in d]


# Splitter -------------------------------------------------------------------------------------


def test_splitter_keeps_abbreviations_initials_and_lowercase_continuations():
    got = split_sentences(PARAGRAPH).numpy().tolist()
    assert [s.decode() for s in got] == PARAGRAPH_SENTENCES


def test_splitter_breaks_at_blank_lines_and_runs_in_a_tf_function():
    split = tf.function(split_sentences, input_signature=[tf.TensorSpec([None], tf.string)])
    got = split(tf.constant(["Title without a stop\n\nBody one. Body two", "", "x\x1ey"]))
    assert got.to_list() == [[b"Title without a stop", b"Body one.", b"Body two"], [], [b"x y"]]


# BERT format ----------------------------------------------------------------------------------


def test_bert_format_splits_documents_at_runs_of_blank_lines(tmp_path):
    path = write(tmp_path / "a.txt", "\n\ufeffOne.\n  Two.  \n\n\n \t\nThree.\n\n\n\nFour.\nFive.")
    corpus = TextCorpus.from_files(path)
    expected = [["One.", "Two."], ["Three."], ["Four.", "Five."]]
    assert corpus.format == "bert"
    assert tf_documents(corpus.documents()) == expected
    assert list(corpus.iter_documents()) == expected
    assert (len(corpus), corpus.num_documents, corpus.num_sentences) == (3, 3, 5)
    assert corpus.file_stats[0].num_documents == 3
    assert corpus.documents().element_spec == tf.TensorSpec([None], tf.string)


def test_documents_spanning_many_blocks_are_carried_over(tmp_path, monkeypatch):
    # The reader's blocks and the validator's.
    monkeypatch.setattr(corpus_module, "LINES_PER_BLOCK", 3)
    monkeypatch.setattr(corpus_validation, "LINES_PER_BLOCK", 3)
    expected = [[f"s{i}" for i in range(7)], ["a"], ["b", "c"], ["d"]]
    text = "\n".join(expected[0]) + "\n\n\n\n\n\na\n\nb\nc\n\n\nd\n"
    corpus = TextCorpus.from_files(write(tmp_path / "a.txt", text))
    assert tf_documents(corpus.documents()) == expected
    assert (corpus.num_documents, corpus.num_sentences) == (4, 11)


@pytest.mark.parametrize(
    "name, content", [("a.txt", "One.\n\nTwo.\n"), ("a.jsonl", '{"text": "A."}')]
)
def test_file_reader_is_pure_graph_code(tmp_path, name, content):
    corpus = TextCorpus.from_files(write(tmp_path / name, content))
    dataset = corpus.documents(shuffle_files=True)
    graph = tf.raw_ops.DatasetToGraphV2(input_dataset=dataset._variant_tensor).numpy()
    assert b"TextLineDataset" in graph
    assert b"PyFunc" not in graph


# Prose and JSON lines -------------------------------------------------------------------------


def test_prose_splits_paragraphs_into_sentences(tmp_path):
    path = write(tmp_path / "p.txt", PARAGRAPH + "\n\n\nA second paragraph.\nStill it.\n")
    corpus = TextCorpus.from_files(path, format="prose")
    expected = [PARAGRAPH_SENTENCES, ["A second paragraph.", "Still it."]]
    assert tf_documents(corpus.documents()) == expected
    assert list(corpus.iter_documents()) == expected
    assert (corpus.num_documents, corpus.num_sentences) == (2, 10)


def test_jsonl_gives_the_same_sentences_as_prose(tmp_path):
    records = [
        {"id": 1, "text": PARAGRAPH},
        {"id": 2, "meta": {"text": "nested, ignored"}, "text": "Top level. Wins here."},
        {"text": ""},
        {"text": 'Caf\u00e9 \u00fcber \U0001f600 "quoted" back\\slash/. Tab\there.'},
    ]
    lines = [json.dumps(r) for r in records]
    lines.insert(2, "")
    lines.append('{"title": "\\"text\\": \\"fake\\"", "text": "dropped", "text": "Last wins."}')
    lines.append(json.dumps({"text": "Non-ASCII kept. \u65e5\u672c."}, ensure_ascii=False))
    corpus = TextCorpus.from_files(write(tmp_path / "d.jsonl", "\n".join(lines) + "\n"))
    expected = [
        PARAGRAPH_SENTENCES,
        ["Top level.", "Wins here."],
        ['Caf\u00e9 \u00fcber \U0001f600 "quoted" back\\slash/.', "Tab here."],
        ["Last wins."],
        ["Non-ASCII kept.", "\u65e5\u672c."],
    ]
    assert corpus.format == "jsonl"
    assert tf_documents(corpus.documents()) == expected
    assert list(corpus.iter_documents()) == expected
    assert corpus.file_stats[0].num_empty_records == 1
    assert corpus.num_sentences == sum(len(d) for d in expected)


def test_jsonl_text_field_is_configurable(tmp_path):
    path = write(tmp_path / "d.jsonl", json.dumps({"body": "One. Two.", "text": 3}) + "\n")
    corpus = TextCorpus.from_files(path, text_field="body")
    assert list(corpus.iter_documents()) == [["One.", "Two."]]


def test_auto_format_refuses_a_mix_of_text_and_jsonl(tmp_path):
    write(tmp_path / "a.txt", "One.\n")
    write(tmp_path / "b.jsonl", json.dumps({"text": "Two."}) + "\n")
    with pytest.raises(ValueError, match="both JSON lines"):
        TextCorpus.from_files(str(tmp_path / "*"))


# Bad input -------------------------------------------------------------------------------------


def test_a_pattern_without_match_is_named(tmp_path):
    pattern = str(tmp_path / "missing-*.txt")
    with pytest.raises(ValueError, match=f"No file matches the pattern '{re.escape(pattern)}'"):
        TextCorpus.from_files([write(tmp_path / "a.txt", "One.\n"), pattern])


@pytest.mark.parametrize("content", ["", "\n  \n\t\n"])
def test_a_file_without_text_is_named(tmp_path, content):
    path = write(tmp_path / "empty.txt", content)
    with pytest.raises(ValueError, match=re.escape(path)):
        TextCorpus.from_files(path)


def test_invalid_utf8_is_reported_with_file_and_line(tmp_path):
    path = write(tmp_path / "bad.txt", b"One.\nTwo.\nbad \xff\xfe bytes\nFour.\n")
    with pytest.raises(ValueError, match=re.escape(path) + ", line 3: invalid UTF-8"):
        TextCorpus.from_files(path)


def test_replace_policy_reads_invalid_bytes_as_replacement_characters(tmp_path):
    path = write(tmp_path / "bad.txt", b"One.\nTwo.\nbad \xff\xfe bytes\n\nFour.\n")
    corpus = TextCorpus.from_files(path, encoding_errors="replace")
    expected = [["One.", "Two.", "bad \ufffd\ufffd bytes"], ["Four."]]
    assert tf_documents(corpus.documents()) == expected
    assert list(corpus.iter_documents()) == expected


@pytest.mark.parametrize(
    "line, message",
    [
        ('{"text": "unterminated}', "line 2: not valid JSON"),
        ('["text"]', "line 2: a JSON object is expected"),
        ('{"body": "x"}', "line 2: the object has no field 'text'"),
        ('{"text": 3}', "line 2: field 'text' is a int, not a string"),
        ('{"te\\u0078t": "escaped key"}', "line 2: the streaming reader could not find"),
    ],
)
def test_bad_jsonl_lines_are_reported_with_file_and_line(tmp_path, line, message):
    path = write(tmp_path / "d.jsonl", json.dumps({"text": "Fine."}) + "\n" + line + "\n")
    with pytest.raises(ValueError, match=re.escape(path) + ", " + re.escape(message)):
        TextCorpus.from_files(path)


@pytest.mark.parametrize(
    "file_format, long_line",
    [
        ("bert", "x" * 101),
        ("prose", "A sentence. " * 8 + "Its end."),  # 104 bytes
        ("jsonl", json.dumps({"text": "y" * 95})),  # 105 bytes
    ],
)
def test_a_line_over_max_line_bytes_is_named_with_file_line_and_limit(
    tmp_path, file_format, long_line
):
    short = json.dumps({"text": "Fine."}) if file_format == "jsonl" else "Fine."
    name = "d.jsonl" if file_format == "jsonl" else "d.txt"
    path = write(tmp_path / name, f"{short}\n{short}\n{long_line}\n")
    message = re.escape(path) + rf", line 3: {len(long_line)} bytes, more than max_line_bytes=100\."
    with pytest.raises(ValueError, match=message):
        TextCorpus.from_files(path, format=file_format, max_line_bytes=100)
    # The limit is the parameter's: a line of exactly that many bytes passes.
    corpus = TextCorpus.from_files(path, format=file_format, max_line_bytes=len(long_line))
    assert corpus.num_documents >= 1


def test_a_50_megabyte_line_is_refused_when_the_corpus_is_made(tmp_path):
    # Once validated, such a line aborted the process at the first batch (std::bad_alloc).
    path = tmp_path / "one-line.txt"
    with open(path, "wb") as file:
        file.write(b"First sentence.\n\n")
        file.write(b"words without end " * (50_000_000 // 18) + b"\n")
    with pytest.raises(ValueError, match=r"one-line.txt, line 3: 49,999,986 bytes, more than "):
        TextCorpus.from_files(str(path))
    assert corpus_module.DEFAULT_MAX_LINE_BYTES == 10 * 2**20


def test_a_file_without_line_breaks_is_refused_in_bounded_memory(tmp_path, monkeypatch):
    # Like a copy of /dev/zero: reading it line by line once held the whole file.
    path = tmp_path / "zeros.txt"
    path.write_bytes(b"First.\n" + bytes(16_000_000))
    tracemalloc.start()
    try:
        with pytest.raises(ValueError) as raised:
            corpus_validation.scan_file(str(path), "bert", "text", "strict", 1000)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert str(raised.value).startswith(
        f"{path}, line 2: 16,000,000 bytes, more than max_line_bytes=1,000. In the 'bert' format"
    )
    assert peak < 4_000_000, peak  # the 16 MB line is measured, never held
    # Beyond what it measures, it says "over"; a remote file is read the same way.
    monkeypatch.setattr(corpus_validation, "MEASURED_BYTES", 2_000_000)
    with pytest.raises(
        ValueError, match=r"zeros.txt, line 2: over 2,\d{3},\d{3} bytes, more than "
    ):
        TextCorpus.from_files(f"file://{path}", max_line_bytes=1000, manifest=False)


@pytest.mark.parametrize(
    "file_format, content",
    [
        ("bert", "One.\nTwo.\n\n\u200b\u200b\n\x01\x02\n\n\u2060\n\nThree.\n\u200b\n"),
        ("prose", "One. Two.\n\n\u200b\u200b \x01\x02\n\n\u2060\n\nThree. \u200b\n"),
        (
            "jsonl",
            "".join(
                json.dumps({"text": text}) + "\n"
                for text in ["One. Two.", "\u200b\u200b \x01", "\u2060", "Three. \u200b"]
            ),
        ),
    ],
)
def test_documents_without_text_are_counted_and_described(tmp_path, file_format, content):
    name = "d.jsonl" if file_format == "jsonl" else "d.txt"
    path = write(tmp_path / name, content)
    corpus = TextCorpus.from_files(path, format=file_format)
    assert corpus.num_documents == 4 and corpus.num_documents_without_text == 2
    assert corpus.file_stats[0].num_documents_without_text == 2
    assert "2 documents without text" in corpus.describe()
    # They are still read (pretraining skips them, as they have no token).
    assert len(list(corpus.iter_documents())) == 4


def test_documents_without_text_in_memory_are_counted():
    corpus = TextCorpus.from_documents([["One."], ["\u200b\u200b", "\x07"], ["\ufffd"]])
    assert corpus.num_documents_without_text == 2
    assert "2 documents without text" in corpus.describe()
    assert TextCorpus.from_documents([["One."]]).num_documents_without_text == 0
    assert "without text" not in TextCorpus.from_documents([["One."]]).describe()


def test_a_corpus_or_file_of_documents_without_text_is_an_error(tmp_path):
    path = write(tmp_path / "junk.txt", "\u200b\u200b\n\n\x01\x02\n")
    with pytest.raises(ValueError, match=re.escape(path) + " has no text: its 2 document"):
        TextCorpus.from_files(path)
    with pytest.raises(ValueError, match="`documents` has no text"):
        TextCorpus.from_documents([["\u200b"], ["\x01\x02"]])


def test_bad_arguments_name_the_parameter(tmp_path):
    path = write(tmp_path / "a.txt", "One.\n")
    for value in (0, 1.5, None, True):
        with pytest.raises(ValueError, match="`max_line_bytes` must be a positive integer"):
            TextCorpus.from_files(path, max_line_bytes=value)
    with pytest.raises(ValueError, match="`format` must be one of"):
        TextCorpus.from_files(path, format="csv")
    with pytest.raises(ValueError, match="`encoding_errors` must be one of"):
        TextCorpus.from_files(path, encoding_errors="ignore")
    with pytest.raises(ValueError, match="is a directory"):
        TextCorpus.from_files(str(tmp_path))
    with pytest.raises(ValueError, match="`input_context`"):
        TextCorpus.from_files(path).documents(input_context=object())


def test_from_documents_rejects_malformed_documents():
    with pytest.raises(ValueError, match="Document 0 is a str"):
        TextCorpus.from_documents(["One sentence.", "Another."])
    with pytest.raises(ValueError, match="Document 1 is empty"):
        TextCorpus.from_documents([["One."], []])
    with pytest.raises(ValueError, match="Sentence 1 of document 0 is blank"):
        TextCorpus.from_documents([["One.", "  "]])
    with pytest.raises(ValueError, match="`metadata` has 1 entries for 2 documents"):
        TextCorpus.from_documents([["One."], ["Two."]], metadata=[{}])


def test_auto_says_when_a_text_file_looks_like_prose(tmp_path, caplog):
    import textwrap

    prose = write(tmp_path / "novel.txt", textwrap.fill(PARAGRAPH.replace("\n", " "), 60) + "\n")
    one_a_line = write(tmp_path / "bert.txt", "\n".join(PARAGRAPH_SENTENCES) + "\n\nOne more.\n")
    with caplog.at_level("WARNING", logger="lmpipe.datasets.corpora.corpus"):
        corpus = TextCorpus.from_files(prose)
    assert corpus.format == "bert"  # what auto assumed, and says so with the numbers
    note = re.search(
        r"note: .*novel.txt looks like prose: (\d\.\d) sentence breaks", corpus.describe()
    )
    assert note and float(note.group(1)) >= 0.5
    assert "format='prose'" in caplog.text
    assert "note:" not in TextCorpus.from_files(one_a_line).describe()
    assert "note:" not in TextCorpus.from_files(prose, format="bert").describe()
    assert TextCorpus.from_files(prose, format="prose").num_sentences == len(PARAGRAPH_SENTENCES)


def test_split_holds_out_whole_documents_with_their_metadata():
    from lmpipe.datasets import TextCorpus

    documents = [[f"Document {i} sentence {j}." for j in range(i % 3 + 1)] for i in range(20)]
    metadata = [{"index": i} for i in range(20)]
    corpus = TextCorpus.from_documents(documents, metadata)
    rest, held = corpus.split(0.25, seed=3)
    assert (len(rest), len(held)) == (15, 5)
    kept = [m["index"] for m in rest.document_metadata()]
    drawn = [m["index"] for m in held.document_metadata()]
    assert sorted(kept + drawn) == list(range(20)) and kept == sorted(kept)
    for part, indices in ((rest, kept), (held, drawn)):
        assert list(part.iter_documents()) == [documents[i] for i in indices]
    assert held.num_sentences == sum(len(documents[i]) for i in drawn)
    assert corpus.split(0.25, seed=3)[1].document_metadata() == held.document_metadata()
    assert corpus.split(0.25, seed=4)[1].document_metadata() != held.document_metadata()
    assert len(corpus.split(2)[1]) == 2  # a number of documents
    for bad in (0.0, 1.0, 0, 20, -1):
        with pytest.raises(ValueError, match="held_out"):
            corpus.split(bad)


def test_epoch_documents_shuffles_an_in_memory_corpus_per_epoch_from_one_dataset():
    from lmpipe.datasets.corpora.shuffling import epoch_documents

    corpus = TextCorpus.from_documents([[f"document {i}."] for i in range(12)])

    def texts(dataset):
        return [document.numpy()[0].decode() for document in dataset]

    key = tf.constant([5, 0], tf.int64)
    documents = epoch_documents(corpus, None, seed=5, shuffle_key=key)
    first, second = texts(documents(tf.constant(0, tf.int64))), texts(documents(1))
    assert sorted(first) == sorted(second) == sorted(f"document {i}." for i in range(12))
    assert first != second  # each epoch its own order...
    assert texts(documents(0)) == first  # ...the same for the same epoch
    unshuffled = epoch_documents(corpus, None, seed=5)
    assert texts(unshuffled(3)) == [f"document {i}." for i in range(12)]


def test_tokenized_corpus_refuses_files_outside_its_folder(tmp_path):
    (tmp_path / "elsewhere.tfrecord").write_bytes(b"")
    folder = tmp_path / "tokens"
    folder.mkdir()
    for name in ("../elsewhere.tfrecord", str(tmp_path / "elsewhere.tfrecord")):
        (folder / "corpus.json").write_text(json.dumps({"format_version": 1, "files": [name]}))
        with pytest.raises(ValueError) as raised:
            TokenizedCorpus(str(folder))
        assert str(raised.value).startswith(
            f"{folder / 'corpus.json'}: `files` names {name!r}, which is outside"
        )
