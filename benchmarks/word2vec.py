"""word2vec training speed and quality: lmpipe's Word2Vec against gensim's Word2Vec.

Both train on the same words with the same settings: vector_size 100, window 5, 5 negatives,
5 epochs, min_count 5, sample 1e-3, skip-gram and CBOW (gensim: workers=2, its defaults
otherwise, so alpha 0.025 for both methods; lmpipe: the same alpha, its default batch sizes).
The words are lmpipe's
(`lmpipe.datasets.examples.word2vec_vocabulary.split_words`: lowercased runs of letters,
digits and inner apostrophes); gensim gets them as token lists made before its clock
starts, whereas lmpipe's time includes reading and splitting the text, learning the vocabulary and
compiling its step, so the comparison is conservative for lmpipe.

Corpora:
- "lee": gensim's Wikipedia sample `lee_background.cor` (300 news articles, 60,000 words; a
  line is a sentence, as gensim's tests read it). Too small for meaningful vectors: quality
  numbers on it are noise, and its timings are dominated by start-up costs.
- "shakespeare": all the plays bundled with lmpipe (`TextCorpus.shakespeare()`, 836,000 words;
  a speech line is a sentence).

Speed: words/s = vocabulary words of the corpus x epochs / seconds of the whole fit, for each
library; "steady" is lmpipe's median words/s of epochs 2-5 (tracing and compilation done).
Quality: accuracy on gensim's questions-words.txt among the 30,000 most frequent words (the
questions with all four words in the vocabulary: "answered"), and the Spearman correlation
of cosine similarities with WordSim-353 ratings over the pairs in the vocabulary. gensim is
trained twice (seeds 0 and 1): the difference between its two runs is the noise against which
lmpipe's numbers are to be read. Goal: at least 0.5x gensim's words/s, quality within 2 points.

Run: python benchmarks/word2vec.py [--corpus lee|shakespeare|both]   (about 4 minutes on 2
CPU cores)
"""

import argparse
import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import statistics  # noqa: E402
import time  # noqa: E402

import tensorflow as tf  # noqa: E402
from gensim.models import Word2Vec as GensimWord2Vec  # noqa: E402
from measure import Results, print_machine  # noqa: E402

from lmpipe.datasets import TextCorpus  # noqa: E402
from lmpipe.datasets.bundled.word_similarity import (  # noqa: E402
    WIKIPEDIA_SAMPLE,
    analogy_accuracy,
    gensim_test_data,
    read_analogies,
    read_word_pairs,
    similarity_correlation,
)
from lmpipe.datasets.examples.word2vec_examples import split_words  # noqa: E402
from lmpipe.pipelines.word2vec import Word2Vec  # noqa: E402

SETTINGS = {"vector_size": 100, "window": 5, "negative": 5, "min_count": 5, "sample": 1e-3}
EPOCHS = 5
WORKERS = 2
METHODS = ("skipgram", "cbow")


def corpus_sentences(name):
    """The sentences (`str`) of a corpus, in order."""
    if name == "lee":
        with open(gensim_test_data(WIKIPEDIA_SAMPLE), encoding="utf-8") as file:
            return [line.strip() for line in file if line.strip()]
    corpus = TextCorpus.shakespeare()
    return [sentence for document in corpus.iter_documents() for sentence in document]


def token_lists(sentences):
    """The words of each sentence as lmpipe splits them, for gensim."""
    words = split_words(tf.constant(sentences)).to_list()
    return [[word.decode("utf-8") for word in sentence] for sentence in words if sentence]


def quality(words, vectors, questions, pairs):
    analogies = analogy_accuracy(words, vectors, questions)
    similarity = similarity_correlation(words, vectors, pairs)
    return {
        "analogy": analogies["accuracy"],
        "answered": analogies["answered"],
        "spearman": similarity["spearman"],
        "pairs": similarity["pairs"],
    }


def run_gensim(tokens, method, seed):
    start = time.perf_counter()
    model = GensimWord2Vec(
        tokens, sg=int(method == "skipgram"), epochs=EPOCHS, workers=WORKERS, seed=seed, **SETTINGS
    )
    seconds = time.perf_counter() - start
    words = sum(model.wv.get_vecattr(word, "count") for word in model.wv.index_to_key)
    return seconds, words, list(model.wv.index_to_key), model.wv.vectors


def run_lmpipe(sentences, method, seed):
    start = time.perf_counter()
    model = Word2Vec(method=method, seed=seed, **SETTINGS)
    history = model.fit(sentences, epochs=EPOCHS, verbose=False)
    seconds = time.perf_counter() - start
    steady = statistics.median(history.history["words_per_second"][1:])
    return seconds, model.vocabulary.retained_words, model, steady


def benchmark(corpus_name, questions, pairs, record):
    """Train both libraries on `corpus_name`, print their rows, add lmpipe / gensim words/s to
    `record` (the spread: against each of gensim's two runs) and return it by method."""
    sentences = corpus_sentences(corpus_name)
    tokens = token_lists(sentences)
    print(f"\n{corpus_name}: {len(tokens):,} sentences, {sum(map(len, tokens)):,} words")
    ratios = {}
    for method in METHODS:
        rows = {}
        for seed in (0, 1):
            seconds, words, vocabulary, vectors = run_gensim(tokens, method, seed)
            rows[f"gensim (seed {seed})"] = (
                words * EPOCHS / seconds,
                None,
                quality(vocabulary, vectors, questions, pairs),
            )
        seconds, words, model, steady = run_lmpipe(sentences, method, 0)
        rows["lmpipe (seed 0)"] = (
            words * EPOCHS / seconds,
            steady,
            quality(model.vocabulary.words, model.vectors, questions, pairs),
        )
        reference = statistics.mean(rows[f"gensim (seed {seed})"][0] for seed in (0, 1))
        print(f"  {method} ({len(model.vocabulary):,}-word vocabulary)")
        for name, (rate, steady_rate, scores) in rows.items():
            steady_text = f"steady {steady_rate:9,.0f}" if steady_rate else " " * 16
            print(
                f"    {name:<16} {rate:9,.0f} words/s {rate / reference:5.2f}x  {steady_text}"
                f"  analogy {100 * scores['analogy']:5.2f}% ({scores['answered']:,} answered)"
                f"  WordSim-353 Spearman {scores['spearman']:6.3f} ({scores['pairs']} pairs)"
            )
        ratios[method] = rows["lmpipe (seed 0)"][0] / reference
        lmpipe_rate, steady_rate, _ = rows["lmpipe (seed 0)"]
        gensim_rates = [rows[f"gensim (seed {seed})"][0] for seed in (0, 1)]
        record.add(
            f"words/s of the whole fit, {method}, {corpus_name}",
            ratios[method],
            f"gensim Word2Vec (workers={WORKERS})",
            # The goal is Shakespeare's: the small lee corpus times mostly start-up costs.
            goal=">= 0.5x" if corpus_name == "shakespeare" else None,
            spread=(
                min(lmpipe_rate / rate for rate in gensim_rates),
                max(lmpipe_rate / rate for rate in gensim_rates),
            ),
            words_per_second=lmpipe_rate,
            steady_words_per_second=steady_rate,
            gensim_words_per_second=gensim_rates,
            quality={name: scores for name, (_, _, scores) in rows.items()},
        )
    return ratios


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", choices=("lee", "shakespeare", "both"), default="both")
    args = parser.parse_args()
    print_machine()
    questions, pairs = read_analogies(), read_word_pairs()
    names = ("lee", "shakespeare") if args.corpus == "both" else (args.corpus,)
    record = Results("word2vec")
    summary = {name: benchmark(name, questions, pairs, record) for name in names}
    print("\nlmpipe / gensim (workers=2) words/s, whole fit (goal: >= 0.5x):")
    for name, ratios in summary.items():
        print("  " + name + ": " + ", ".join(f"{m} {r:.2f}x" for m, r in ratios.items()))
    record.write()


if __name__ == "__main__":
    main()
