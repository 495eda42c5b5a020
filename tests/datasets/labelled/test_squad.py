"""The SQuAD reader: answers checked against their contexts, repaired offsets, errors that
name the file and the question, and splits that keep a context on one side."""

import json
import os

import pytest

from lmpipe.datasets import read_squad, shakespeare_speakers, span_examples

FIXTURE = os.path.join(os.path.dirname(__file__), "fixtures", "squad_tiny.json")


def write_squad(path, qas, context="HAMLET. To be, or not to be."):
    document = {"data": [{"title": "t", "paragraphs": [{"context": context, "qas": qas}]}]}
    path.write_text(json.dumps(document))
    return str(path)


def test_squad_json_reads_every_question_with_its_checked_answers():
    examples = read_squad(FIXTURE)
    assert examples.ids == ["hamlet-1", "hamlet-2", "hamlet-3", "hamlet-4", "cafe-1", "cafe-2"] + [
        "cafe-3"
    ]
    assert examples.groups == ["Hamlet"] * 4 + ["Cafés"] * 3
    assert examples.answers[1] == (("OPHELIA", 51), ("OPHELIA.", 51))
    assert examples.answers[3] == ()  # is_impossible: no answer
    assert examples.has_unanswerable
    for context, answers in zip(examples.contexts, examples.answers, strict=True):
        for text, start in answers:
            assert context[start : start + len(text)] == text
    # "1887" is given at 27 and "Paris" at 38: found one and two characters away.
    assert examples.repaired == 2
    assert examples.answers[4] == (("1887", 28),)
    assert examples.answers[6] == (("Paris", 36),)
    # An exact answer keeps its surrounding space.
    assert examples.answers[2] == ((" To be, or not to be", 7),)
    assert examples.answer_texts()[1] == ["OPHELIA", "OPHELIA."]


def test_json_lines_read_one_question_a_line_grouped_by_context(tmp_path):
    rows = [
        {"id": "a", "question": "Who?", "context": "HAMLET. Hi.", "answers": [
            {"text": "HAMLET", "answer_start": 0}]},
        {"id": 7, "question": "What?", "context": "HAMLET. Hi.", "answers": [["Hi", 8]]},
        {"id": "c", "question": "Who?", "context": "LEAR. No.", "answers": []},
    ]  # fmt: skip
    path = tmp_path / "questions.jsonl"
    path.write_text("\n".join(json.dumps(row) for row in rows) + "\n\n")
    examples = read_squad(path)
    assert examples.ids == ["a", "7", "c"]
    assert examples.answers == [(("HAMLET", 0),), (("Hi", 8),), ()]
    assert examples.groups == ["HAMLET. Hi.", "HAMLET. Hi.", "LEAR. No."]


@pytest.mark.parametrize(
    "qas, message",
    [
        (
            [{"id": "q1", "question": "Who?", "answers": [{"text": "OPHELIA", "answer_start": 0}]}],
            r"question id 'q1': the answer 'OPHELIA' is not in the context at answer_start=0 "
            r"\(the context has 'HAMLET\.' there\)",
        ),
        ([{"id": "q2", "question": " ", "answers": []}], "question id 'q2': the question is"),
        ([{"question": "Who?", "answers": []}], 'a question needs an "id"'),
        ([{"id": "q3", "question": "Who?"}], r"question id 'q3': no \"answers\""),
        (
            [{"id": "q4", "question": "Who?", "answers": [{"text": "HAMLET", "answer_start": -1}]}],
            "question id 'q4': answer_start must be a non-negative integer",
        ),
        (
            [
                {"id": "q5", "question": "Who?", "answers": []},
                {"id": "q5", "question": "Who?", "answers": []},
            ],
            "question id 'q5': the id is repeated",
        ),
    ],
)
def test_bad_questions_are_refused_naming_the_file_and_the_question(tmp_path, qas, message):
    path = write_squad(tmp_path / "bad.json", qas)
    with pytest.raises(ValueError, match=message) as error:
        read_squad(path)
    assert str(error.value).startswith(path)


def test_bad_files_are_refused_naming_the_file_and_line(tmp_path):
    (tmp_path / "broken.json").write_text('{"data": [\n{"title": }')
    with pytest.raises(ValueError, match=r"broken\.json, line 2: not JSON"):
        read_squad(tmp_path / "broken.json")
    (tmp_path / "list.json").write_text("[]")
    with pytest.raises(
        ValueError, match=r'list\.json: a SQuAD file is a JSON object with a "data"'
    ):
        read_squad(tmp_path / "list.json")
    (tmp_path / "lines.jsonl").write_text('{"id": "a", "question": "Who?"}\nnot json\n')
    with pytest.raises(
        ValueError, match=r"lines\.jsonl, line 1 \(question id 'a'\): no \"answers\""
    ):
        read_squad(tmp_path / "lines.jsonl")
    (tmp_path / "empty.json").write_text('{"data": []}')
    with pytest.raises(ValueError, match=r"empty\.json has no questions"):
        read_squad(tmp_path / "empty.json")
    with pytest.raises(ValueError, match=r"missing\.json: no such file"):
        read_squad(tmp_path / "missing.json")


def test_split_holds_out_whole_articles_and_is_seeded():
    examples = read_squad(FIXTURE)
    rest, held = examples.split(held_out=0.3, seed=0)
    assert len(rest) + len(held) == len(examples)
    assert not set(rest.groups) & set(held.groups)
    assert not set(rest.contexts) & set(held.contexts)
    again, _ = examples.split(held_out=0.3, seed=0)
    assert again.ids == rest.ids
    with pytest.raises(ValueError, match="held_out"):
        examples.split(held_out=1.5)
    with pytest.raises(ValueError, match="cannot be split"):
        examples.split(held_out=0.99)


def test_span_examples_from_lists_check_their_answers():
    examples = span_examples(["Who?"], ["LEAR. No."], [[("LEAR", 0)]])
    assert examples.answers == [(("LEAR", 0),)] and examples.ids == ["0"]
    with pytest.raises(ValueError, match="1 questions, 1 contexts, 2 answers"):
        span_examples(["Who?"], ["LEAR. No."], [[], []])
    with pytest.raises(ValueError, match="question '0': the answer 'KENT' is not in the context"):
        span_examples(["Who?"], ["LEAR. No."], [[("KENT", 0)]])


def test_shakespeare_speakers_ask_who_says_a_quote_of_the_context():
    examples = shakespeare_speakers(genres=["tragedies"], speeches_per_context=3, seed=0)
    assert len(examples) > 500
    for question, context, answers in zip(
        examples.questions[:200], examples.contexts[:200], examples.answers[:200], strict=True
    ):
        ((speaker, start),) = answers
        quote = question[len('Who says "') : -len('"?')]
        assert context.count(quote) == 1
        # The answer labels the speech that holds the quote: "SPEAKER. ... quote ..."
        line = context[start:].split("\n")[0]
        assert line.startswith(f"{speaker}. ") and quote in line
        assert len({label.split(". ")[0] for label in context.split("\n")}) >= 2
    assert "hamlet" in examples.groups
    rest, held = examples.split(held_out=0.2, seed=1)
    assert not set(rest.groups) & set(held.groups)
