"""Entity-level precision, recall and F1 of tag sequences, as conlleval (CoNLL-2000/2003) and
seqeval's default mode compute them.

A chunk (an entity) is a run of words `(type, start, end)` found by conlleval's rules, which
read BIO (IOB2), IOB1 and IOBES alike: a tag is `O` or `<prefix>-<type>` with prefix `B`, `I`,
`E` or `S`. A chunk starts at `B-x` or `S-x`, at an `I-x` or `E-x` after `O` (conlleval
counts an `I-` that follows `O` as the start of a chunk, where strict IOB2 would call it an
error), after `E-`/`S-`, or where the type changes; it ends before `B-`, `S-`, `O`, after `E-`
and `S-`, where the type changes, and at the end of the sentence. A predicted chunk is
correct when a gold chunk has the same type, start and end.
"""

import collections
import dataclasses

PREFIXES = ("B", "I", "E", "S")


def split_tag(tag):
    """`(prefix, type)` of a chunk tag: ("O", "") for "O", ("B", "PER") for "B-PER"; a
    ValueError for anything else."""
    if tag == "O":
        return "O", ""
    prefix, dash, kind = tag.partition("-")
    if not dash or prefix not in PREFIXES or not kind:
        raise ValueError(
            f"{tag!r} is not a chunk tag: entity scores need 'O' or B-, I-, E-, S- and a type, "
            "such as 'B-PER'."
        )
    return prefix, kind


def are_chunk_tags(tags):
    """Whether every tag of `tags` is a chunk tag (see `split_tag`)."""
    try:
        for tag in tags:
            split_tag(tag)
    except ValueError:
        return False
    return True


def _ends(previous, current):
    """conlleval's `endOfChunk`: the chunk of the previous word ends before this word."""
    (prev_prefix, prev_type), (prefix, kind) = previous, current
    if prev_prefix in ("E", "S"):
        return True
    if prev_prefix in ("B", "I") and prefix in ("B", "S", "O"):
        return True
    return prev_prefix != "O" and prev_type != kind


def _starts(previous, current):
    """conlleval's `startOfChunk`: a chunk starts at this word."""
    (prev_prefix, prev_type), (prefix, kind) = previous, current
    if prefix in ("B", "S"):
        return True
    if prev_prefix in ("E", "S", "O") and prefix in ("E", "I"):
        return True
    return prefix != "O" and prev_type != kind


def entity_chunks(tags):
    """The chunks of one sentence's tags, as `(type, start, end)` (end exclusive), in order.

    >>> entity_chunks(["B-PER", "I-PER", "O", "I-LOC", "B-LOC", "I-ORG"])
    [('PER', 0, 2), ('LOC', 3, 4), ('LOC', 4, 5), ('ORG', 5, 6)]
    """
    chunks = []
    previous = ("O", "")
    start = None
    for index, tag in enumerate([*tags, "O"]):  # a last "O" closes a chunk at the end
        current = split_tag(tag)
        if start is not None and _ends(previous, current):
            chunks.append((previous[1], start, index))
            start = None
        if _starts(previous, current):
            start = index
        previous = current
    return chunks


@dataclasses.dataclass(frozen=True)
class EntityScores:
    """Entity counts and scores over sentences.

    Attributes:
        gold: the gold chunks.
        predicted: the predicted chunks.
        correct: the predicted chunks that are gold chunks.
        by_type: `{type: EntityScores}` of each entity type (empty within a type).
    """

    gold: int
    predicted: int
    correct: int
    by_type: dict = dataclasses.field(default_factory=dict)

    @property
    def precision(self):
        """correct / predicted (0 without a predicted chunk, as conlleval)."""
        return self.correct / self.predicted if self.predicted else 0.0

    @property
    def recall(self):
        """correct / gold (0 without a gold chunk)."""
        return self.correct / self.gold if self.gold else 0.0

    @property
    def f1(self):
        """The harmonic mean of precision and recall (0 when both are 0)."""
        total = self.precision + self.recall
        return 2 * self.precision * self.recall / total if total else 0.0

    def as_metrics(self, prefix="entity_"):
        """`{entity_precision, entity_recall, entity_f1}`, floats."""
        return {
            f"{prefix}precision": self.precision,
            f"{prefix}recall": self.recall,
            f"{prefix}f1": self.f1,
        }


def entity_scores(gold, predicted):
    """Entity precision, recall and F1 of `predicted` tag sequences against `gold` ones.

    Args:
        gold: the gold tags, a list of sentences, each a list of tags.
        predicted: the predicted tags, shaped as `gold`.

    Returns:
        An `EntityScores`, with one per entity type in `by_type`.

    Raises:
        ValueError: the sentences differ in number or length (naming the sentence), or a tag
            is not a chunk tag.

    >>> scores = entity_scores([["B-PER", "I-PER", "O"]], [["B-PER", "O", "O"]])
    >>> scores.precision, scores.recall
    (0.0, 0.0)
    """
    if len(gold) != len(predicted):
        raise ValueError(
            f"{len(gold)} gold sentences but {len(predicted)} predicted ones; they must pair up."
        )
    counts = collections.defaultdict(lambda: [0, 0, 0])  # type -> [gold, predicted, correct]
    for index, (gold_tags, predicted_tags) in enumerate(zip(gold, predicted, strict=True)):
        if len(gold_tags) != len(predicted_tags):
            raise ValueError(
                f"Sentence {index} has {len(gold_tags)} gold tags but {len(predicted_tags)} "
                "predicted ones."
            )
        gold_chunks = set(entity_chunks(gold_tags))
        predicted_chunks = set(entity_chunks(predicted_tags))
        for chunk in gold_chunks:
            counts[chunk[0]][0] += 1
        for chunk in predicted_chunks:
            counts[chunk[0]][1] += 1
        for chunk in gold_chunks & predicted_chunks:
            counts[chunk[0]][2] += 1
    by_type = {kind: EntityScores(*counts[kind]) for kind in sorted(counts)}
    totals = [sum(values) for values in zip(*counts.values(), strict=True)] or [0, 0, 0]
    return EntityScores(*totals, by_type=by_type)
