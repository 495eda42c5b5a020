"""Words tagged for token classification demos: the characters' names in Shakespeare's speeches.

Real text with labels from the plays themselves: every mention in a sentence of a character
of the play, as the play's own speaker list names them, is tagged `B-PER` / `I-PER`, every
other word `O` (BIO, as CoNLL-2003's persons).
"""

import dataclasses
import re

import numpy as np
import tensorflow as tf

from lmpipe.arguments import check_number, check_positive_int, check_seed
from lmpipe.datasets.corpora.shakespeare import (
    check_choices,
    shakespeare_play,
    shakespeare_plays,
    shakespeare_speakers,
)
from lmpipe.datasets.labelled.tagged_files import TaggedSentences
from lmpipe.datasets.labelled.word_pieces import split_text_words

NAME_TAGS = ("B-PER", "I-PER", "O")

# Words of a speaker label that are a rank, not a name: "KING CLAUDIUS" names "Claudius".
_TITLES = frozenset(
    ("KING", "QUEEN", "LORD", "LADY", "SIR", "DUKE", "DUCHESS", "PRINCE", "PRINCESS", "EARL")
    + ("COUNT", "COUNTESS", "FRIAR", "CAPTAIN", "MISTRESS", "MASTER", "CARDINAL", "BISHOP")
    + ("ARCHBISHOP", "MARQUESS", "MARQUIS", "BARON", "SENATOR", "GENERAL", "YOUNG", "OLD")
    + ("DAME", "ABBESS")
)
_ROMAN = re.compile(r"[IVX]+")


@dataclasses.dataclass(frozen=True)
class TaggedSplits:
    """Train and test sentences for token classification, drawn from different plays.

    Attributes:
        train, test: the `TaggedSentences` of each split.
        tag_names: the tags, sorted.
        train_groups, test_groups: the plays of each split; no play is in both.
    """

    train: TaggedSentences
    test: TaggedSentences
    tag_names: tuple
    train_groups: tuple
    test_groups: tuple


def cast_names(genre, play):
    """The names of a play's characters, as word tuples written as in its speeches: from each
    speaker label in capitals ("IAGO", "KING CLAUDIUS", "SIR TOBY BELCH"), the name without
    rank or regnal number ("Iago", "Claudius", "Toby Belch", and "Toby" and "Belch" alone).
    Labels in mixed case ("First Clown", "Messenger") are roles, not names; labels such as
    "DUKE OF VENICE" name a place, and are left out too."""
    names = set()
    for label in shakespeare_speakers(genre, play):
        for part in label.split("&"):
            words = [word.strip(".:,;") for word in part.split()]
            words = [word for word in words if word]
            if not words or re.search(r"[a-z]", part) or "ALL" in words:
                continue
            while words and words[0] in _TITLES:
                words = words[1:]
            while words and _ROMAN.fullmatch(words[-1]):
                words = words[:-1]
            if not words or "OF" in words or any(word in _TITLES for word in words):
                continue
            phrase = tuple(word.capitalize() for word in words)
            names.add(phrase)
            if len(phrase) > 1:
                names.update((word,) for word in phrase)
    return names


def tag_names(words, names):
    """BIO tags of `words` (a list of str): the longest name of `names` (word tuples) that
    starts at a word is tagged `B-PER I-PER ...`, other words `O`."""
    longest = max((len(name) for name in names), default=0)
    tags, index = [], 0
    while index < len(words):
        for size in range(min(longest, len(words) - index), 0, -1):
            if tuple(words[index : index + size]) in names:
                tags += ["B-PER"] + ["I-PER"] * (size - 1)
                index += size
                break
        else:
            tags.append("O")
            index += 1
    return tags


def shakespeare_names(
    genres=None, plays=None, test_fraction=0.2, seed=0, min_words=3, without_names=1.0
):
    """Sentences of Shakespeare with the names of the play's characters tagged, split by play.

    Each sentence of a speech (`TextCorpus.shakespeare()`'s sentences: speaker names and stage
    directions removed) is split into words as the WordPiece tokenizer splits text (see
    `lmpipe.datasets.labelled.word_pieces.split_text_words`: "Iago's" is "Iago", "'", "s"), and
    every
    mention of a character of its play (see `cast_names`) is tagged `B-PER` (first word)
    and `I-PER` (the next words of a longer name, "Toby Belch"); the other words are `O`. The
    labels come from the cast lists, so they are as good as those are: a name used for
    another thing ("Will") counts as a name, a character not in the list ("Michael Cassio"'s
    "Michael") does not.

    Whole plays go to the test split (at least one, at least one left for training), so that a
    tagger is tested on the names of characters it has mostly not seen.

    Args:
        genres: the genres of the plays (None: all), e.g. ["tragedies"].
        plays: the plays by name (None: all of `genres`), e.g. ["othello", "hamlet"].
        test_fraction: the share of the plays held out for testing.
        seed: seed of the play split.
        min_words: the fewest words of a kept sentence.
        without_names: the share of the sentences without a name that are kept (drawn with
            `seed`); about one sentence in nine names a character, so 0.1 gives a set where
            half the sentences have a name, as in CoNLL-2003, and trains a tagger faster.

    Returns:
        A `TaggedSplits`; `.train.examples` and `.test.examples` are `(sentences, tags)` for
        `TokenTagger`, `.tag_names` are `("B-PER", "I-PER", "O")`.

    Example:

        data = lmpipe.datasets.bundled.shakespeare_names(genres=["tragedies"])
        words, tags = data.train.sentences[0], data.train.tags[0]
    """
    available = shakespeare_plays()
    genres = check_choices("genres", genres, sorted({genre for genre, _ in available}))
    names = check_choices("plays", plays, sorted({play for _, play in available}))
    check_number("test_fraction", test_fraction, above=0, below=1)
    check_seed(seed)
    check_positive_int("min_words", min_words)
    check_number("without_names", without_names, minimum=0, maximum=1)
    chosen = [
        (genre, play)
        for genre, play in available
        if (genres is None or genre in genres) and (names is None or play in names)
    ]
    if len(chosen) < 2:
        raise ValueError(
            f"`genres`={genres!r} and `plays`={plays!r} select {len(chosen)} play(s); splitting "
            "by play needs at least 2."
        )
    count = min(len(chosen) - 1, max(1, round(test_fraction * len(chosen))))
    order = np.random.default_rng(seed).permutation(len(chosen))
    test_plays = {chosen[i] for i in order[:count]}
    rng = np.random.default_rng([seed, 1])

    splits = {"train": ([], []), "test": ([], [])}
    for genre, play in chosen:
        cast = cast_names(genre, play)
        _, scenes = shakespeare_play(genre, play)
        sentences = [sentence for _, _, scene in scenes for sentence in scene]
        words = split_text_words(tf.constant(sentences, tf.string)).to_list()
        split = splits["test" if (genre, play) in test_plays else "train"]
        for sentence in words:
            sentence = [word.decode("utf-8") for word in sentence]
            if len(sentence) < min_words:
                continue
            tags = tag_names(sentence, cast)
            if "B-PER" in tags or without_names == 1 or rng.random() < without_names:
                split[0].append(sentence)
                split[1].append(tags)
    return TaggedSplits(
        train=TaggedSentences("shakespeare names, train", *splits["train"]),
        test=TaggedSentences("shakespeare names, test", *splits["test"]),
        tag_names=NAME_TAGS,
        train_groups=tuple(play for genre, play in chosen if (genre, play) not in test_plays),
        test_groups=tuple(play for genre, play in chosen if (genre, play) in test_plays),
    )
