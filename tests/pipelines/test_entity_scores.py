"""conlleval's chunks and entity scores, on hand-worked tag sequences."""

import pytest

from lmpipe.models.entity_scores import are_chunk_tags, entity_chunks, entity_scores


@pytest.mark.parametrize(
    "tags, chunks",
    [
        # BIO: a chunk at the start, one at the sentence end
        (["B-PER", "I-PER", "O", "B-LOC"], [("PER", 0, 2), ("LOC", 3, 4)]),
        # conlleval: an I- after O starts a chunk (strict IOB2 would drop it)
        (["O", "I-PER", "I-PER", "O"], [("PER", 1, 3)]),
        # I- of another type ends the chunk and starts a new one
        (["B-PER", "I-LOC", "I-LOC"], [("PER", 0, 1), ("LOC", 1, 3)]),
        # B- after B- of the same type: two chunks
        (["B-PER", "B-PER", "I-PER"], [("PER", 0, 1), ("PER", 1, 3)]),
        # IOB1: I- starts a chunk, B- only separates two adjacent chunks of one type
        (["I-ORG", "I-ORG", "B-ORG", "O", "I-LOC"], [("ORG", 0, 2), ("ORG", 2, 3), ("LOC", 4, 5)]),
        # IOBES: E- closes, S- is a chunk alone, E- after E- starts a new chunk
        (
            ["B-LOC", "I-LOC", "E-LOC", "S-PER", "E-PER", "O", "S-MISC"],
            [("LOC", 0, 3), ("PER", 3, 4), ("PER", 4, 5), ("MISC", 6, 7)],
        ),
        (["O", "O"], []),
        ([], []),
    ],
)
def test_chunks_follow_conlleval(tags, chunks):
    assert entity_chunks(tags) == chunks


def test_scores_count_exact_chunks_only():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"], ["O", "B-PER"]]
    predicted = [["B-PER", "O", "O", "B-LOC"], ["B-ORG", "O"], ["O", "O"]]
    # gold: PER(0,2) LOC(3,4) ORG(0,1) PER(1,2) = 4; predicted: PER(0,1) LOC ORG = 3;
    # correct: LOC and ORG (the cut PER is wrong) = 2
    scores = entity_scores(gold, predicted)
    assert (scores.gold, scores.predicted, scores.correct) == (4, 3, 2)
    assert scores.precision == pytest.approx(2 / 3)
    assert scores.recall == pytest.approx(0.5)
    assert scores.f1 == pytest.approx(2 * (2 / 3) * 0.5 / (2 / 3 + 0.5))
    assert scores.by_type["PER"].correct == 0 and scores.by_type["PER"].gold == 2
    assert scores.by_type["LOC"].f1 == 1.0
    assert scores.as_metrics() == {
        "entity_precision": scores.precision,
        "entity_recall": scores.recall,
        "entity_f1": scores.f1,
    }


def test_no_predicted_or_gold_chunk_scores_zero_not_an_error():
    scores = entity_scores([["O", "B-PER"]], [["O", "O"]])
    assert (scores.precision, scores.recall, scores.f1) == (0.0, 0.0, 0.0)
    assert entity_scores([["O"]], [["O"]]).f1 == 0.0


def test_bad_sequences_are_refused():
    with pytest.raises(ValueError, match="Sentence 0 has 2 gold tags but 1 predicted"):
        entity_scores([["O", "O"]], [["O"]])
    with pytest.raises(ValueError, match="'NN' is not a chunk tag"):
        entity_scores([["NN"]], [["O"]])
    assert are_chunk_tags(["O", "B-PER", "S-X"]) and not are_chunk_tags(["O", "PER"])
    assert not are_chunk_tags(["B-"])
