"""SQuAD v1.1's exact match and F1 on hand-worked cases (the official script's definitions)."""

import pytest

from lmpipe.models.squad_metrics import exact_match, f1_score, normalize_answer, squad_scores


@pytest.mark.parametrize(
    "text, normalized",
    [
        ("The Prince of Denmark!", "prince of denmark"),
        ("  an   apple,  a day ", "apple day"),
        ("Theatre", "theatre"),  # "the" only as a whole word
        ("Denmark's king.", "denmarks king"),
        ("A-B", "ab"),  # punctuation is removed, not turned into a space
        ("¡Olé!", "¡olé"),  # only ASCII punctuation (string.punctuation) goes
        ("", ""),
    ],
)
def test_normalization_lowers_and_drops_punctuation_articles_and_extra_spaces(text, normalized):
    assert normalize_answer(text) == normalized


def test_exact_match_compares_normalized_strings():
    assert exact_match("the Boulevard Saint-Germain.", "Boulevard SaintGermain") == 1.0
    assert exact_match("1887", "in 1887") == 0.0


@pytest.mark.parametrize(
    "prediction, gold, f1",
    [
        ("Denver Broncos", "Denver Broncos", 1.0),
        # common {king}: precision 1/3, recall 1/2 -> 2 * (1/6) / (5/6) = 0.4
        ("the king of Denmark", "Denmark's king", 0.4),
        # common {to, be} counted with multiplicity: "to be or not to be" has to x2, be x2;
        # prediction "to be" -> common 2, precision 1, recall 2/6 -> 0.5
        ("to be", "to be or not to be", 0.5),
        # "be be be" against "to be": common 1, precision 1/3, recall 1/2 -> 0.4
        ("be be be", "to be", 0.4),
        ("Hamlet", "Ophelia", 0.0),
        ("the", "Hamlet", 0.0),  # normalizes to nothing
    ],
)
def test_f1_is_over_bags_of_normalized_words(prediction, gold, f1):
    assert f1_score(prediction, gold) == pytest.approx(f1)


def test_scores_take_each_questions_best_gold_answer_and_average():
    predictions = ["HAMLET", "the king of Denmark", "Paris", ""]
    golds = [["Hamlet", "Prince Hamlet"], ["king", "Denmark's king"], ["London"], []]
    scores = squad_scores(predictions, golds)
    # exact: 1, 0, 0, 1 (no answer, predicted none); f1: 1, max(0.5, 0.4), 0, 1
    assert scores["exact_match"] == pytest.approx(0.5)
    assert scores["f1"] == pytest.approx((1 + 0.5 + 0 + 1) / 4)
    assert squad_scores(["x"], [[]]) == {"exact_match": 0.0, "f1": 0.0}
    with pytest.raises(ValueError, match="2 predictions for 1 questions"):
        squad_scores(["a", "b"], [["a"]])
