"""Labelled text for fine-tuning demos: Shakespeare's lines labelled by the genre of their play."""

import collections
import dataclasses

import numpy as np

from lmpipe.arguments import check_number, check_positive_int, check_seed
from lmpipe.datasets.corpora.corpus import TextCorpus


@dataclasses.dataclass(frozen=True)
class LabelledSplits:
    """Train and test examples for text classification, with the class names.

    Attributes:
        train_texts, test_texts: the texts, numpy arrays of `str`.
        train_labels, test_labels: their class indices, int32 numpy arrays.
        class_names: the name of each class index.
        train_groups, test_groups: the groups (plays) each split was drawn from; no group is
            in both.
    """

    train_texts: np.ndarray
    train_labels: np.ndarray
    test_texts: np.ndarray
    test_labels: np.ndarray
    class_names: tuple
    train_groups: tuple
    test_groups: tuple

    @property
    def train(self):
        """`(texts, labels)` of the training split, as `TextClassifier.fit` takes them."""
        return self.train_texts, self.train_labels

    @property
    def test(self):
        """`(texts, labels)` of the test split."""
        return self.test_texts, self.test_labels

    def class_frequencies(self, split="train"):
        """`{class name: share of the split's examples}` for split "train" or "test"."""
        if split not in ("train", "test"):
            raise ValueError(f'`split` must be "train" or "test", got {split!r}.')
        labels = self.train_labels if split == "train" else self.test_labels
        counts = np.bincount(labels, minlength=len(self.class_names))
        return {
            name: float(count) / len(labels)
            for name, count in zip(self.class_names, counts, strict=True)
        }

    def majority_rate(self, split="test"):
        """Accuracy of always predicting the split's most frequent class."""
        return max(self.class_frequencies(split).values())


def shakespeare_genres(
    genres=("comedies", "tragedies"),
    min_words=8,
    seed=0,
    test_fraction=0.2,
    sentences_per_example=1,
    balance=True,
):
    """Lines of Shakespeare labelled with the genre of their play, split by play.

    The text is `TextCorpus.shakespeare()` (speaker names and stage directions removed).
    An example is `sentences_per_example` consecutive sentences of one scene (never across
    scenes), kept if it has at least `min_words` words; its label is the index of its
    play's genre in `genres`. Whole plays go to the test split (at least one play per genre,
    at least one left for training), so a character's name or a play's vocabulary never
    helps across the split. With `balance`, each split keeps as many examples of every class
    as its rarest class has (drawn at random with `seed`), so the majority-class rate is
    `1 / len(genres)`; else `class_frequencies()` tells the rates.

    Args:
        genres: two or more of "comedies", "histories", "problems", "roman", "romances",
            "tragedies"; their order gives the class indices.
        min_words: the fewest whitespace-separated words of a kept example.
        seed: seed of the play split, the balancing draw and the order of the examples.
        test_fraction: share of each genre's plays held out for testing.
        sentences_per_example: consecutive sentences joined into one example.
        balance: equalize the classes within each split.

    Returns:
        A `LabelledSplits`; `.train` and `.test` are `(texts, labels)` for `TextClassifier`,
        `.class_names` are the genres.

    Example:

        data = lmpipe.datasets.shakespeare_genres()
        texts, labels = data.train   # comedies (0) and tragedies (1)
    """
    if isinstance(genres, str):
        genres = (genres,)
    genres = tuple(genres)
    if len(genres) < 2 or len(set(genres)) != len(genres):
        raise ValueError(f"`genres` must name at least two different genres, got {genres!r}.")
    check_positive_int("min_words", min_words)
    check_positive_int("sentences_per_example", sentences_per_example)
    check_seed(seed)
    check_number("test_fraction", test_fraction, above=0, below=1)
    corpus = TextCorpus.shakespeare(genres=list(genres))  # checks the genre names

    examples = collections.defaultdict(list)  # play -> [text, ...]
    genre_of = {}
    for metadata, sentences in zip(
        corpus.document_metadata(), corpus.iter_documents(), strict=True
    ):
        genre_of[metadata["play"]] = metadata["genre"]
        for start in range(0, len(sentences), sentences_per_example):
            text = " ".join(sentences[start : start + sentences_per_example])
            if len(text.split()) >= min_words:
                examples[metadata["play"]].append(text)

    rng = np.random.default_rng(seed)
    test_plays = []
    for genre in genres:
        plays = sorted(play for play in examples if genre_of[play] == genre)
        if len(plays) < 2:
            raise ValueError(
                f"Genre {genre!r} has {len(plays)} play(s) with examples; splitting by play "
                "needs at least 2."
            )
        count = min(len(plays) - 1, max(1, round(test_fraction * len(plays))))
        test_plays.extend(rng.permutation(plays)[:count].tolist())
    train_plays = sorted(set(examples) - set(test_plays))

    def split(plays):
        texts, labels = [], []
        for play in plays:
            texts.extend(examples[play])
            labels.extend([genres.index(genre_of[play])] * len(examples[play]))
        texts = np.array(texts, dtype=object)
        labels = np.array(labels, dtype=np.int32)
        if balance:
            size = np.bincount(labels, minlength=len(genres)).min()
            keep = np.concatenate(
                [
                    rng.permutation(np.flatnonzero(labels == index))[:size]
                    for index in range(len(genres))
                ]
            )
            texts, labels = texts[keep], labels[keep]
        order = rng.permutation(len(labels))
        return texts[order].astype(str), labels[order]

    train_texts, train_labels = split(train_plays)
    test_texts, test_labels = split(sorted(test_plays))
    return LabelledSplits(
        train_texts=train_texts,
        train_labels=train_labels,
        test_texts=test_texts,
        test_labels=test_labels,
        class_names=genres,
        train_groups=tuple(train_plays),
        test_groups=tuple(sorted(test_plays)),
    )
