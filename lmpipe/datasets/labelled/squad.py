"""Extractive question answering data: SQuAD's JSON (v1.1 and v2.0) and JSON lines.

`read_squad(path)` reads questions about passages (contexts) with the answers as spans of the
context, checks every answer against its context and returns `SpanExamples`, which
`SpanAnswerer.fit` and `evaluate` take.

Answers whose `answer_start` is off: SQuAD's own files hold a few answers whose offset is
off by a character or two, or whose text carries a space the context does not have at that
place. A reader that refused them would refuse SQuAD itself, one that trusted them would
train on wrong spans. The rule here: the answer text (stripped of surrounding whitespace) is
looked for at its `answer_start`, then at the nearest place within `MAX_SHIFT` characters of
it; found there, the offset is corrected (`SpanExamples.repaired` counts them); not found,
the file is refused with an error naming the file and the question id.
"""

import collections
import dataclasses
import json
import os

import numpy as np

from lmpipe.arguments import check_number, check_seed

MAX_SHIFT = 16
"""How far (in characters) from its `answer_start` an answer's text is looked for."""


@dataclasses.dataclass(frozen=True)
class SpanExamples:
    """Questions about contexts, each with its answers as character spans of the context.

    Attributes:
        path: where the examples come from (a file, or a description).
        ids: the question ids, a list of `str`.
        questions: the questions, a list of `str`.
        contexts: the context of each question, a list of `str` (questions about one
            passage repeat it).
        answers: per question, a tuple of `(text, start)` answers, `context[start:start +
            len(text)] == text`; empty for a question without an answer (SQuAD v2.0's
            `is_impossible`). Training uses the first; evaluation the best of all.
        groups: per question, what it is drawn with in `split`: its article's title in SQuAD
            JSON, else its context.
        repaired: the answers whose `answer_start` was corrected (see the module docstring).
    """

    path: str
    ids: list
    questions: list
    contexts: list
    answers: list
    groups: list
    repaired: int = 0

    def __len__(self):
        return len(self.questions)

    @property
    def has_unanswerable(self):
        """Whether some question has no answer (SQuAD v2.0)."""
        return any(not answers for answers in self.answers)

    def answer_texts(self):
        """The gold answer texts of each question, a list of lists of `str`."""
        return [[text for text, _ in answers] for answers in self.answers]

    def split(self, held_out=0.1, seed=0):
        """`(rest, held out)`: whole groups (articles, or contexts) drawn at random until
        `held_out` of the questions (a fraction in (0, 1), or a number) are held out, so
        that no context is in both parts; the same for the same seed. Both keep the order."""
        check_seed(seed)
        if isinstance(held_out, float):
            check_number("held_out", held_out, above=0, below=1)
            wanted = round(held_out * len(self))
        else:
            wanted = check_number("held_out", held_out, minimum=1, integer=True)
        sizes = collections.Counter(self.groups)
        names = list(sizes)
        held, count = set(), 0
        for index in np.random.default_rng(seed).permutation(len(names)):
            if count >= max(wanted, 1):
                break
            held.add(names[index])
            count += sizes[names[index]]
        if not 1 <= count < len(self) or len(held) == len(names):
            raise ValueError(
                f"`held_out`={held_out!r} of {self.path}: its {len(self)} questions in "
                f"{len(names)} contexts (or articles) cannot be split with both parts "
                "keeping a whole context."
            )
        rest = [i for i, group in enumerate(self.groups) if group not in held]
        return self.subset(rest), self.subset([i for i, g in enumerate(self.groups) if g in held])

    def subset(self, indices):
        """The questions at `indices`, in that order."""
        return SpanExamples(
            self.path,
            [self.ids[i] for i in indices],
            [self.questions[i] for i in indices],
            [self.contexts[i] for i in indices],
            [self.answers[i] for i in indices],
            [self.groups[i] for i in indices],
        )


def span_examples(questions, contexts, answers, ids=None, groups=None, source="the examples"):
    """`SpanExamples` from lists, every answer checked (and repaired) as the reader does.

    Args:
        questions, contexts: lists of `str` of equal length.
        answers: per question a list of `(text, start)` pairs or `{"text", "answer_start"}`
            dicts (empty: no answer).
        ids: the question ids (default "0", "1", ...).
        groups: what `split` keeps together (default: the context).
        source: how errors name the examples.
    """
    lengths = {"questions": len(questions), "contexts": len(contexts), "answers": len(answers)}
    if len(set(lengths.values())) != 1:
        listed = ", ".join(f"{count} {name}" for name, count in lengths.items())
        raise ValueError(f"{source}: {listed}; they must be of equal length.")
    ids = [str(i) for i in range(len(questions))] if ids is None else [str(i) for i in ids]
    reader = _Reader(source)
    for index, (question, context, given) in enumerate(
        zip(questions, contexts, answers, strict=True)
    ):
        where = f"question {ids[index]!r}"
        reader.add(ids[index], question, context, _answer_list(given, where, source), where)
    return reader.result(groups)


def read_squad(path):
    """Read SQuAD-format questions: JSON (`{"data": [{"title", "paragraphs": [{"context",
    "qas": [{"id", "question", "answers": [{"text", "answer_start"}], "is_impossible"}]}]}]}`,
    SQuAD v1.1 and v2.0) or JSON lines (`.jsonl`: one `{"id", "question", "context",
    "answers"}` object a line; `answers` as in SQuAD, or `[]` for no answer).

    Every answer is checked against its context (and repaired where SQuAD's offsets are off,
    see the module docstring). Questions of SQuAD v2.0 marked `is_impossible` get no answer.

    Returns:
        `SpanExamples`, grouped by article title (JSON) or by context (JSON lines).

    Raises:
        ValueError: naming the file and the question id (or line): not JSON, a missing or
            empty field, an answer not found in its context; or a file without questions.

    Example:

        train, test = read_squad("train-v1.1.json").split(held_out=0.1)
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ValueError(f"{path}: no such file.")
    if path.lower().endswith(".jsonl"):
        return _read_json_lines(path)
    try:
        with open(path, encoding="utf-8-sig") as file:
            document = json.load(file)
    except UnicodeDecodeError as error:
        raise ValueError(f"{path}: invalid UTF-8 ({error.reason}).") from None
    except json.JSONDecodeError as error:
        raise ValueError(
            f"{path}, line {error.lineno}: not JSON ({error.msg}); SQuAD files are one JSON "
            "document (use a .jsonl ending for one question a line)."
        ) from None
    if not isinstance(document, dict) or not isinstance(document.get("data"), list):
        raise ValueError(f'{path}: a SQuAD file is a JSON object with a "data" list of articles.')
    reader = _Reader(path)
    groups = []
    for number, article in enumerate(document["data"]):
        where = f"article {number}"
        if not isinstance(article, dict) or not isinstance(article.get("paragraphs"), list):
            raise ValueError(f'{path}, {where}: an article needs a "paragraphs" list.')
        title = article.get("title", f"article {number}")
        for paragraph in article["paragraphs"]:
            if not isinstance(paragraph, dict) or not isinstance(paragraph.get("qas"), list):
                raise ValueError(
                    f'{path}, {where} ({title!r}): a paragraph needs "context" and a "qas" list.'
                )
            context = paragraph.get("context")
            for qa in paragraph["qas"]:
                if not isinstance(qa, dict):
                    raise ValueError(f"{path}, {where}: a question must be a JSON object.")
                qid = _question_id(qa, path, where)
                place = f"question id {qid!r}"
                answers = [] if qa.get("is_impossible") else qa.get("answers")
                reader.add(
                    qid, qa.get("question"), context, _answer_list(answers, place, path), place
                )
                groups.append(str(title))
    return reader.result(groups)


def _read_json_lines(path):
    reader = _Reader(path)
    with open(path, "rb") as file:
        for number, raw in enumerate(file, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise ValueError(f"{path}, line {number}: invalid UTF-8.") from None
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as error:
                raise ValueError(f"{path}, line {number}: not JSON ({error.msg}).") from None
            if not isinstance(row, dict):
                raise ValueError(f"{path}, line {number}: a JSON object is needed.")
            where = f"line {number}"
            qid = _question_id(row, path, where)
            place = f"line {number} (question id {qid!r})"
            answers = [] if row.get("is_impossible") else row.get("answers")
            answers = _answer_list(answers, place, path)
            reader.add(qid, row.get("question"), row.get("context"), answers, place)
    return reader.result(None)


def _question_id(qa, path, where):
    qid = qa.get("id")
    if isinstance(qid, int) and not isinstance(qid, bool):
        qid = str(qid)
    if not isinstance(qid, str) or not qid:
        raise ValueError(f'{path}, {where}: a question needs an "id" (a non-empty string).')
    return qid


def _answer_list(answers, where, source):
    """`[(text, start)]` of `answers` given as dicts or pairs."""
    if answers is None:
        raise ValueError(f'{source}, {where}: no "answers" (use [] for a question without one).')
    if not isinstance(answers, (list, tuple)):
        raise ValueError(f'{source}, {where}: "answers" must be a list.')
    result = []
    for answer in answers:
        if isinstance(answer, dict):
            text, start = answer.get("text"), answer.get("answer_start")
        elif isinstance(answer, (list, tuple)) and len(answer) == 2:
            text, start = answer
        else:
            raise ValueError(
                f'{source}, {where}: an answer is {{"text", "answer_start"}}, got {answer!r}.'
            )
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"{source}, {where}: an answer's text is empty or not a string.")
        if isinstance(start, bool) or not isinstance(start, int) or start < 0:
            raise ValueError(
                f"{source}, {where}: answer_start must be a non-negative integer, got {start!r}."
            )
        result.append((text, start))
    return result


class _Reader:
    """Collects checked questions; `result` makes the `SpanExamples`."""

    def __init__(self, path):
        self.path = path
        self.columns = ([], [], [], [])  # ids, questions, contexts, answers
        self.repaired = 0
        self.seen = set()

    def add(self, qid, question, context, answers, where):
        for name, value in (("question", question), ("context", context)):
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"{self.path}, {where}: the {name} is missing or empty.")
        if qid in self.seen:
            raise ValueError(f"{self.path}, {where}: the id is repeated.")
        self.seen.add(qid)
        checked = []
        for text, start in answers:
            found = _locate(context, text, start)
            if found is None:
                shown = context[start : start + len(text)]
                raise ValueError(
                    f"{self.path}, {where}: the answer {text!r} is not in the context at "
                    f"answer_start={start} (the context has {shown!r} there) nor within "
                    f"{MAX_SHIFT} characters of it."
                )
            if found != (text, start):
                self.repaired += 1
            checked.append(found)
        for column, value in zip(
            self.columns, (qid, question, context, tuple(checked)), strict=True
        ):
            column.append(value)

    def result(self, groups):
        ids, questions, contexts, answers = self.columns
        if not ids:
            raise ValueError(f"{self.path} has no questions.")
        groups = list(contexts) if groups is None else list(groups)
        return SpanExamples(self.path, ids, questions, contexts, answers, groups, self.repaired)


def _locate(context, text, start):
    """`(text, start)` with the answer found in `context` at `start` or nearest to it (text
    stripped of surrounding whitespace), or None."""
    if context[start : start + len(text)] == text:
        return text, start
    core = text.strip()
    start += len(text) - len(text.lstrip())
    for shift in range(MAX_SHIFT + 1):
        for position in (start - shift, start + shift):
            if position >= 0 and context[position : position + len(core)] == core:
                return core, position
    return None
