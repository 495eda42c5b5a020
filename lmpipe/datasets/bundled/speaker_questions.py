"""Real extractive questions from the bundled Shakespeare: who says a line of a scene?

A context is a stretch of consecutive speeches of one scene, each written as the play writes
it, its speaker's name first: "BERNARDO. Who's there?\\nFRANCISCO. Nay, answer me: ...". A
question quotes a few words of one speech, `Who says "stand, and unfold yourself"?`, and its
answer is that speech's speaker name, at the place it labels the speech. Reading is needed:
the quote occurs once in its context, and a context has at least two speakers.
"""

import numpy as np

from lmpipe.arguments import check_number, check_positive_int, check_seed
from lmpipe.datasets.corpora.shakespeare import (
    check_choices,
    shakespeare_plays,
    shakespeare_speeches,
)
from lmpipe.datasets.labelled.squad import SpanExamples

GENRES = ("comedies", "histories", "problems", "roman", "romances", "tragedies")


def shakespeare_speakers(
    genres=None,
    speeches_per_context=3,
    questions_per_context=2,
    quote_words=5,
    max_speech_words=12,
    seed=0,
):
    """Who-says questions about stretches of Shakespeare's scenes, as `SpanExamples`.

    A scene is cut into stretches of `speeches_per_context` consecutive speeches of at most
    `max_speech_words` words each (a longer speech, or a speech without a speaker, ends a
    stretch); a stretch with a single speaker is skipped. Up to `questions_per_context`
    speeches of a stretch (drawn with `seed`) of at least `quote_words` words are quoted:
    `quote_words` consecutive words of the speech, a quote that occurs once in the stretch.
    The groups are the plays, so `split` holds out whole plays.

    Args:
        genres: None for every play, or some of "comedies", "histories", "problems",
            "roman", "romances", "tragedies".
        speeches_per_context: speeches in a context (at least 2).
        questions_per_context: questions asked about one context, at most.
        quote_words: words of a quote.
        max_speech_words: the longest speech kept in a context, in words.
        seed: seed of the speeches and quotes drawn.

    Returns:
        `SpanExamples`: ids `"<play>-<scene number>-<stretch>-<speech>"`, groups the plays.

    Example:

        train, test = lmpipe.datasets.shakespeare_speakers().split(held_out=0.1)
    """
    genres = check_choices("genres", genres, GENRES)
    check_number("speeches_per_context", speeches_per_context, minimum=2, integer=True)
    check_positive_int("questions_per_context", questions_per_context)
    check_positive_int("quote_words", quote_words)
    check_number("max_speech_words", max_speech_words, minimum=quote_words, integer=True)
    check_seed(seed)
    rng = np.random.default_rng(seed)
    ids, questions, contexts, answers, groups = [], [], [], [], []
    for genre, play in shakespeare_plays():
        if genres is not None and genre not in genres:
            continue
        _, scenes = shakespeare_speeches(genre, play)
        for scene_number, (_, _, speeches) in enumerate(scenes):
            for stretch_number, stretch in enumerate(
                _stretches(speeches, speeches_per_context, max_speech_words)
            ):
                if len({speaker for speaker, _ in stretch}) < 2:
                    continue
                lines = [f"{speaker}. {speech}" for speaker, speech in stretch]
                context = "\n".join(lines)
                starts = np.cumsum([0] + [len(line) + 1 for line in lines[:-1]])
                order = rng.permutation(len(stretch))
                asked = 0
                for index in order:
                    if asked == questions_per_context:
                        break
                    speaker, speech = stretch[index]
                    quote = _quote(speech, quote_words, rng)
                    if quote is None or context.count(quote) != 1:
                        continue
                    asked += 1
                    ids.append(f"{play}-{scene_number}-{stretch_number}-{index}")
                    questions.append(f'Who says "{quote}"?')
                    contexts.append(context)
                    answers.append(((speaker, int(starts[index])),))
                    groups.append(play)
    if not ids:
        raise ValueError(
            "No questions: no stretch of speeches fits these settings (raise "
            "`max_speech_words`, or lower `speeches_per_context` or `quote_words`)."
        )
    return SpanExamples(
        "Shakespeare's plays (who says it?)", ids, questions, contexts, answers, groups
    )


def _stretches(speeches, size, max_words):
    """Runs of `size` consecutive speeches with a speaker and at most `max_words` words."""
    run = []
    for speaker, speech in speeches:
        if speaker is None or len(speech.split()) > max_words:
            run = []
            continue
        run.append((speaker, speech))
        if len(run) == size:
            yield tuple(run)
            run = []


def _quote(speech, words, rng):
    """`words` consecutive words of `speech` (as written), or None if it is shorter."""
    parts = speech.split(" ")
    if len(parts) < words:
        return None
    start = int(rng.integers(len(parts) - words + 1))
    return " ".join(parts[start : start + words])
