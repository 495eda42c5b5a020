"""Word-vector evaluation sets (analogies, similarity ratings) and their scores.

The sets are the ones gensim's wheel ships in `gensim/test/test_data/`: `questions-words.txt`
(Mikolov et al.'s 19,544 analogy questions in 14 sections), `wordsim353.tsv` (WordSim-353) and
`simlex999.txt` (SimLex-999). They are found with `importlib.util.find_spec("gensim")`,
without importing gensim. Scores follow gensim's `evaluate_word_analogies` and
`evaluate_word_pairs`: questions and pairs are lowercased, those with a word outside the
vocabulary are skipped and reported as coverage.
"""

import importlib.util
import os

import numpy as np

ANALOGIES = "questions-words.txt"
WORDSIM353 = "wordsim353.tsv"
SIMLEX999 = "simlex999.txt"
WIKIPEDIA_SAMPLE = "lee_background.cor"


def gensim_test_data(name):
    """The path of a file of gensim's `gensim/test/test_data/`, found without importing
    gensim.

    Raises:
        ImportError: gensim is not installed (it is lmpipe's test extra).
    """
    spec = importlib.util.find_spec("gensim")
    if spec is None or spec.origin is None:
        raise ImportError(
            f"{name} ships with gensim's test data: pip install gensim (lmpipe's test extra)."
        )
    path = os.path.join(os.path.dirname(spec.origin), "test", "test_data", name)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"gensim is installed but has no test data file {path}.")
    return path


def read_analogies(path=None):
    """The analogy questions of `path` (default: gensim's questions-words.txt).

    Returns:
        A list of `(section, a, b, c, expected)` lowercased: `a` is to `b` as `c` is to
        `expected`. Lines starting with ":" open a section.
    """
    path = gensim_test_data(ANALOGIES) if path is None else os.fspath(path)
    questions, section = [], None
    with open(path, encoding="utf-8") as file:
        for number, line in enumerate(file, start=1):
            if line.startswith(":"):
                section = line[1:].strip()
                continue
            words = line.lower().split()
            if not words:
                continue
            if len(words) != 4 or section is None:
                raise ValueError(
                    f"{path}:{number}: expected a ': section' line or four words, got {line!r}."
                )
            questions.append((section, *words))
    return questions


def read_word_pairs(path=None):
    """`(word1, word2, score)` of a similarity set (default: gensim's wordsim353.tsv);
    lines starting with "#" are comments; fields are separated by tabs."""
    path = gensim_test_data(WORDSIM353) if path is None else os.fspath(path)
    pairs = []
    with open(path, encoding="utf-8") as file:
        for number, line in enumerate(file, start=1):
            if line.startswith("#") or not line.strip():
                continue
            fields = line.rstrip("\n").split("\t")
            try:
                pairs.append((fields[0].lower(), fields[1].lower(), float(fields[2])))
            except (IndexError, ValueError):
                raise ValueError(
                    f"{path}:{number}: expected `word1<TAB>word2<TAB>score`, got {line!r}."
                ) from None
    return pairs


def unit_vectors(vectors):
    """Each row divided by its L2 norm (zero rows stay zero)."""
    vectors = np.asarray(vectors, np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.maximum(norms, 1e-12)


def analogy_accuracy(words, vectors, questions, restrict_vocab=30000, chunk=2048):
    """Accuracy of 3CosAdd on analogy questions, as gensim's `evaluate_word_analogies`.

    The answer to "a is to b as c is to ?" is the word, among the `restrict_vocab` most
    frequent (`words` is ordered by frequency), nearest in cosine to `unit(b) - unit(a) +
    unit(c)` (unit vectors averaged as gensim does), other than a, b and c. Questions with a
    word outside those words are skipped.

    Returns:
        A dict: `accuracy` (correct / answered, 0 if none), `correct`, `answered`, `total`,
        `coverage` (answered / total) and `sections` (`{name: (correct, answered)}`).
    """
    words = list(words)[:restrict_vocab]
    ids = {word: index for index, word in enumerate(words)}
    unit = unit_vectors(np.asarray(vectors)[: len(words)])
    answered = [q for q in questions if all(word in ids for word in q[1:])]
    sections = {}
    for section, *_ in questions:
        sections.setdefault(section, [0, 0])
    correct = 0
    for start in range(0, len(answered), chunk):
        part = answered[start : start + chunk]
        a, b, c, expected = (np.array([ids[q[i]] for q in part]) for i in range(1, 5))
        queries = unit_vectors((unit[b] - unit[a] + unit[c]) / 3.0)
        scores = queries @ unit.T  # [questions, vocabulary]
        rows = np.arange(len(part))
        for excluded in (a, b, c):
            scores[rows, excluded] = -np.inf
        hits = scores.argmax(axis=1) == expected
        correct += int(hits.sum())
        for question, hit in zip(part, hits, strict=True):
            sections[question[0]][0] += int(hit)
            sections[question[0]][1] += 1
    return {
        "accuracy": correct / len(answered) if answered else 0.0,
        "correct": correct,
        "answered": len(answered),
        "total": len(questions),
        "coverage": len(answered) / len(questions) if questions else 0.0,
        "sections": {name: tuple(value) for name, value in sections.items()},
    }


def similarity_correlation(words, vectors, pairs):
    """Spearman (and Pearson) correlation of cosine similarities with human ratings, over the
    pairs whose two words are in `words`, as gensim's `evaluate_word_pairs`.

    Returns:
        A dict: `spearman`, `pearson`, `pairs` (used), `total`, `coverage`.
    """
    from scipy import stats

    ids = {word: index for index, word in enumerate(words)}
    unit = unit_vectors(vectors)
    used = [(ids[a], ids[b], score) for a, b, score in pairs if a in ids and b in ids]
    if len(used) < 2:
        spearman = pearson = float("nan")
    else:
        first, second, human = (np.array(column) for column in zip(*used, strict=True))
        cosine = np.sum(unit[first] * unit[second], axis=1)
        spearman = float(stats.spearmanr(cosine, human).statistic)
        pearson = float(stats.pearsonr(cosine, human).statistic)
    return {
        "spearman": spearman,
        "pearson": pearson,
        "pairs": len(used),
        "total": len(pairs),
        "coverage": len(used) / len(pairs) if pairs else 0.0,
    }
