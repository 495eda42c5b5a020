"""SQuAD v1.1's answer metrics, exact match and F1, as its official evaluation script defines
them (`evaluate-v1.1.py`), and the v2.0 rule for questions without an answer.

Both compare normalized strings: lower-cased, punctuation removed (`string.punctuation`),
the articles "a", "an", "the" removed as whole words, whitespace collapsed. F1 is over the
bags of normalized words. A question's score is its best over its gold answers; a question
without gold answers (SQuAD v2.0) scores 1 exactly when the prediction is empty.
"""

import collections
import re
import string

_PUNCTUATION = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(text):
    """SQuAD's normalization: lower case, no punctuation, no articles, single spaces.

    >>> normalize_answer("The  Prince of Denmark!")
    'prince of denmark'
    """
    text = "".join(character for character in text.lower() if character not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction, gold):
    """1.0 if the normalized strings are equal, else 0.0."""
    return float(normalize_answer(prediction) == normalize_answer(gold))


def f1_score(prediction, gold):
    """The F1 of the normalized words of `prediction` against those of `gold` (counted with
    multiplicity); 0.0 when they share none.

    >>> round(f1_score("the king of Denmark", "Denmark's king"), 4)
    0.4
    """
    predicted, expected = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if not predicted or not expected:
        # SQuAD v2.0's script: two empty answers agree; v1.1's gives 0, never met there.
        return float(predicted == expected)
    common = sum((collections.Counter(predicted) & collections.Counter(expected)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(predicted), common / len(expected)
    return 2 * precision * recall / (precision + recall)


def squad_scores(predictions, gold_answers):
    """`{"exact_match", "f1"}`: the means over the questions, in [0, 1] (the official script
    prints them times 100).

    Args:
        predictions: one predicted answer text per question ("" for no answer).
        gold_answers: per question the list of its gold answer texts (empty: no answer).
    """
    if len(predictions) != len(gold_answers):
        raise ValueError(
            f"{len(predictions)} predictions for {len(gold_answers)} questions; give one each."
        )
    if not predictions:
        raise ValueError("No questions to score.")
    matches, f1s = [], []
    for prediction, golds in zip(predictions, gold_answers, strict=True):
        golds = list(golds) or [""]
        matches.append(max(exact_match(prediction, gold) for gold in golds))
        f1s.append(max(f1_score(prediction, gold) for gold in golds))
    return {"exact_match": sum(matches) / len(matches), "f1": sum(f1s) / len(f1s)}
