"""word2vec training data in tf.data graph code: subsampling, windows, skip-gram pairs and
CBOW examples, negatives (the words and the vocabulary are
`lmpipe.datasets.examples.word2vec_vocabulary`).

The recipe is the reference implementation's (Mikolov et al.'s word2vec.c, as gensim follows
it), computed for a whole batch of sentences at once:

1. Words: each sentence is lowercased (optional, Unicode-aware), the typographic apostrophe
   U+2019 becomes `'`, and the text is split on every run of characters that are neither
   letters, digits nor apostrophes; apostrophes at the ends of a word are quotation marks and
   are removed ("'tis" -> "tis", "o'er" stays). This spells words as the evaluation sets
   (questions-words, WordSim-353, SimLex-999) do once lowercased.
2. Vocabulary: words occurring at least `min_count` times, by count descending (ties by the
   word's UTF-8 bytes), with their counts. Words outside it are removed from the sentences
   before windows are taken, as in the reference.
3. Subsampling: a word with frequency `f = count / retained words` is kept with probability
   `min(1, (sqrt(f / t) + 1) * t / f)`, `t = sample` (0 disables it).
4. Dynamic window: each center word draws its window `b` uniformly from 1..window; its
   contexts are the words at most `b` positions away in the same sentence.
5. Skip-gram: one example per (center, context) pair, the center's input vector predicting
   the context word. CBOW: one example per center with at least one context word, the mean of
   the context words' input vectors predicting the center.
6. Negative sampling: `negative` noise words per example, drawn from the unigram distribution
   raised to 0.75 (`count**0.75 / sum`). A noise word equal to the example's target gets
   weight 0, as the reference skips it.

Randomness: stateless ops keyed by `seed`, the input pipeline, the epoch and the batch index,
so the same seed gives the same examples in any process.
"""

import numpy as np
import tensorflow as tf

from lmpipe.arguments import check_number, check_positive_int
from lmpipe.datasets.corpora.sharding import pipeline_position
from lmpipe.datasets.corpora.shuffling import graph_code
from lmpipe.datasets.examples.word2vec_vocabulary import corpus_sentences, split_words

METHODS = ("skipgram", "cbow")

_SUBSAMPLE, _WINDOW, _NEGATIVE = 0, 1, 2  # independent random streams of a batch


# Per-batch transforms ---------------------------------------------------------------------------


def subsample(ids, keep_probabilities, seed):
    """Drop each word of `ids` (ragged `[S, (n)]` int) with probability 1 - its keep
    probability (`keep_probabilities`, float `[V]`), keyed by the `[2]` `seed`."""
    draws = tf.random.stateless_uniform(tf.shape(ids.flat_values), seed, dtype=tf.float64)
    keep = draws < tf.gather(tf.cast(keep_probabilities, tf.float64), ids.flat_values)
    return tf.ragged.boolean_mask(ids, ids.with_flat_values(keep))


def reduced_windows(num_words, window, seed):
    """int32 `[num_words]`: each center word's effective window, uniform over 1..window."""
    return tf.random.stateless_uniform(
        [num_words], seed, minval=1, maxval=window + 1, dtype=tf.int32
    )


def context_windows(ids, window, effective_windows):
    """Every center word's context positions, as a dense `[N, 2 * window]` grid.

    Args:
        ids: ragged `[S, (n)]` word ids (N words in all).
        window: the largest window.
        effective_windows: int `[N]`, each center's window b (1..window).

    Returns:
        `(positions, valid)`: int32 `[N, 2 * window]` indices into `ids.flat_values` of the
        words at offsets -window..-1, 1..window (clipped into range), and bool `[N, 2 * window]`
        that is True where the offset is within the center's b and inside its sentence.
    """
    num_words = tf.shape(ids.flat_values, out_type=tf.int32)[0]
    rows = tf.cast(ids.value_rowids(), tf.int32)
    starts = tf.gather(tf.cast(ids.row_starts(), tf.int32), rows)  # [N]
    limits = tf.gather(tf.cast(ids.row_limits(), tf.int32), rows)  # [N]
    offsets = tf.concat([tf.range(-window, 0), tf.range(1, window + 1)], 0)  # [2W]
    positions = tf.range(num_words)[:, None] + offsets[None, :]  # [N, 2W]
    valid = (
        (positions >= starts[:, None])
        & (positions < limits[:, None])
        & (tf.abs(offsets)[None, :] <= tf.cast(effective_windows, tf.int32)[:, None])
    )
    return tf.clip_by_value(positions, 0, tf.maximum(num_words - 1, 0)), valid


def skipgram_pairs(ids, window, effective_windows):
    """`(centers, contexts)` int `[P]`: every (center, context) pair of the windows, center by
    center in sentence order, contexts from the left-most to the right-most."""
    positions, valid = context_windows(ids, window, effective_windows)
    words = ids.flat_values
    centers = tf.broadcast_to(words[:, None], tf.shape(positions))
    return tf.boolean_mask(centers, valid), tf.boolean_mask(tf.gather(words, positions), valid)


def cbow_examples(ids, window, effective_windows):
    """`(centers [P], contexts [P, 2 * window], context_mask [P, 2 * window])` for every center
    with at least one context word; masked contexts hold id 0."""
    positions, valid = context_windows(ids, window, effective_windows)
    words = ids.flat_values
    contexts = tf.where(valid, tf.gather(words, positions), tf.zeros_like(positions, words.dtype))
    has_context = tf.reduce_any(valid, axis=1)
    return (
        tf.boolean_mask(words, has_context),
        tf.boolean_mask(contexts, has_context),
        tf.boolean_mask(valid, has_context),
    )


def alias_table(probabilities):
    """Walker's alias table of a discrete distribution, for sampling with one uniform draw.

    Column `j` of `V` columns, chosen uniformly, yields `j` with probability
    `thresholds[j] / 2**32` and `aliases[j]` otherwise (Vose's construction), so each id `i`
    comes out with probability `probabilities[i]` (to 2**-32).

    Args:
        probabilities: float `[V]`, non-negative, summing to 1.

    Returns:
        `(thresholds, aliases)`: uint64 numpy `[V]` in [0, 2**32], int32 numpy `[V]`.
    """
    probabilities = np.asarray(probabilities, np.float64)
    size = len(probabilities)
    scaled = probabilities * size / probabilities.sum()
    aliases = np.arange(size, dtype=np.int32)
    small = [i for i in range(size) if scaled[i] < 1.0]
    large = [i for i in range(size) if scaled[i] >= 1.0]
    while small and large:
        low, high = small.pop(), large.pop()
        aliases[low] = high
        scaled[high] -= 1.0 - scaled[low]
        (small if scaled[high] < 1.0 else large).append(high)
    for index in small + large:  # what is left is 1 up to rounding
        scaled[index] = 1.0
    thresholds = np.round(np.clip(scaled, 0.0, 1.0) * 2.0**32).astype(np.uint64)
    return thresholds, aliases


def negative_samples(thresholds, aliases, shape, seed):
    """int32 noise word ids of `shape` from an `alias_table`, keyed by the `[2]` `seed`.

    One uint32 draw `r` per sample: `r * V` splits into the column (`>> 32`) and a uniform
    fraction (the low 32 bits) compared with the column's threshold. A binary search over the
    cumulative distribution is several times slower on CPU.
    """
    draws = tf.random.stateless_uniform(shape, seed, minval=None, maxval=None, dtype=tf.uint32)
    product = tf.cast(draws, tf.uint64) * tf.cast(tf.size(aliases), tf.uint64)
    columns = tf.cast(tf.bitwise.right_shift(product, 32), tf.int32)
    fractions = tf.bitwise.bitwise_and(product, 0xFFFFFFFF)
    own = fractions < tf.gather(tf.cast(thresholds, tf.uint64), columns)
    return tf.where(own, columns, tf.gather(tf.cast(aliases, tf.int32), columns))


def candidates_with_negatives(targets, negative, noise_table, seed):
    """`(candidate_ids [P, 1 + negative], candidate_weights [P, 1 + negative])`: each target
    first, then its `negative` noise words drawn from `noise_table` (`(thresholds, aliases)`
    of an `alias_table`); a noise word equal to its target weighs 0."""
    targets = tf.cast(targets, tf.int32)
    noise = negative_samples(*noise_table, tf.stack([tf.size(targets), negative]), seed)
    candidates = tf.concat([targets[:, None], noise], axis=1)
    noise_weights = tf.cast(noise != targets[:, None], tf.float32)
    weights = tf.concat([tf.ones_like(noise_weights[:, :1]), noise_weights], axis=1)
    return candidates, weights


def check_word2vec_options(method, window, negative, sample):
    """Raise a ValueError naming the first bad option."""
    if method not in METHODS:
        raise ValueError(f"`method` must be one of {METHODS}, got method={method!r}.")
    check_positive_int("window", window)
    check_positive_int("negative", negative)
    check_number("sample", sample, minimum=0, below=1)


# The functions of this module use no Python control flow on tensors: they run as written,
# without AutoGraph's conversion (`graph_code`), also when a `tf.function` builds the datasets
# (Word2Vec.fit does). Converted, building an epoch's dataset took about a second, half of it
# in the Python loop of `alias_table`.
@graph_code
def sentence_word_ids(
    corpus, vocabulary, sentences_per_batch=512, lower_case=True, input_context=None
):
    """Batches of `sentences_per_batch` sentences as ragged `[S, (words)]` int32 word ids,
    words outside `vocabulary` removed, cached in memory after the first pass (word ids take
    4 bytes per word), so that later epochs skip splitting and lookup."""
    table = vocabulary.lookup_table()

    def word_ids(sentences):
        words = split_words(sentences, lower_case)
        ids = tf.ragged.map_flat_values(table.lookup, words)
        ids = tf.ragged.boolean_mask(ids, ids >= 0)  # out-of-vocabulary words are removed
        return ids.with_flat_values(tf.cast(ids.flat_values, tf.int32))

    return (
        corpus_sentences(corpus, input_context)
        .batch(sentences_per_batch)
        .map(graph_code(word_ids), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        .cache()
    )


@graph_code
def word2vec_examples(
    corpus,
    vocabulary,
    *,
    method="skipgram",
    window=5,
    negative=5,
    sample=1e-3,
    seed=0,
    sentences_per_batch=512,
    epochs=1,
    first_epoch=0,
    lower_case=True,
    input_context=None,
    word_ids=None,
    examples_per_batch=None,
):
    """A `tf.data.Dataset` of word2vec training batches, made from `sentences_per_batch`
    sentences at a time, in corpus order (as the reference implementation reads it).

    Args:
        corpus: a `TextCorpus`.
        vocabulary: its `Word2VecVocabulary`.
        method: "skipgram" or "cbow".
        window: the largest window (the dynamic window is drawn from 1..window).
        negative: noise words per example.
        sample: the subsampling threshold t (0: no subsampling).
        seed: int seed of every random choice.
        sentences_per_batch: sentences per batch.
        epochs: passes over the corpus, numbered from `first_epoch` (their seeds differ).
        first_epoch: the number of the first pass (to resume a run).
        lower_case: lowercase the text (as the vocabulary was learned).
        input_context: a `tf.distribute.InputContext`: which shard to read.
        word_ids: the `sentence_word_ids` of this corpus and shard, to reuse (and its cache)
            across calls; made here by default.
        examples_per_batch: None: one batch per `sentences_per_batch` sentences, of varying
            size. An int: the examples are regrouped into batches of exactly this many (the
            last batch of each epoch padded with examples of weight 0), so that a training
            step compiles once (XLA) and its tensors keep one size.

    Returns:
        A dataset of dicts: `input_ids` int32 `[P]` (skip-gram: the center) or `[P, 2 * window]`
        (CBOW: the contexts) with `input_mask` float32 `[P, 2 * window]` (1 = real context);
        `candidate_ids` int32 `[P, 1 + negative]`, the word to predict then the noise words;
        `candidate_weights` float32 `[P, 1 + negative]` (0 for skipped noise words and
        padding); `words` float32 `[P]`, each example's share of the vocabulary words of its
        sentences before subsampling (its batch's words over its examples), so that summing
        it counts the words processed, the measure of progress the learning rate decays with.
    """
    check_word2vec_options(method, window, negative, sample)
    check_positive_int("examples_per_batch", examples_per_batch, none=True)
    _, pipeline_id = pipeline_position(input_context)
    keep = tf.constant(vocabulary.keep_probabilities(sample), tf.float64)
    noise_table = tuple(tf.constant(x) for x in alias_table(vocabulary.noise_distribution()))
    base_seed = tf.random.experimental.stateless_fold_in(
        tf.constant([seed, 0], tf.int64), pipeline_id
    )

    if word_ids is None:
        word_ids = sentence_word_ids(
            corpus, vocabulary, sentences_per_batch, lower_case, input_context
        )

    def make_batch(epoch, index, ids):
        batch_seed = tf.random.experimental.stateless_fold_in(
            tf.random.experimental.stateless_fold_in(base_seed, epoch), index
        )
        num_words = tf.size(ids.flat_values, out_type=tf.int64)
        if sample > 0:
            subsample_seed = tf.random.experimental.stateless_fold_in(batch_seed, _SUBSAMPLE)
            ids = subsample(ids, keep, subsample_seed)
        windows = reduced_windows(
            tf.size(ids.flat_values),
            window,
            tf.random.experimental.stateless_fold_in(batch_seed, _WINDOW),
        )
        if method == "skipgram":
            centers, contexts = skipgram_pairs(ids, window, windows)
            features = {"input_ids": centers}
            targets = contexts
        else:
            centers, contexts, mask = cbow_examples(ids, window, windows)
            features = {"input_ids": contexts, "input_mask": tf.cast(mask, tf.float32)}
            targets = centers
        candidates, weights = candidates_with_negatives(
            targets,
            negative,
            noise_table,
            tf.random.experimental.stateless_fold_in(batch_seed, _NEGATIVE),
        )
        examples = tf.shape(candidates)[0]
        share = tf.cast(num_words, tf.float32) / tf.cast(tf.maximum(examples, 1), tf.float32)
        features.update(
            candidate_ids=candidates,
            candidate_weights=weights,
            words=tf.fill([examples], share),
        )
        return features

    def make_epoch(epoch):
        return word_ids.enumerate().map(
            graph_code(lambda index, ids: make_batch(epoch, index, ids)),
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=True,
        )

    def make_fixed_epoch(epoch):
        # Each batch of sentences is padded to whole batches of examples and split; carrying
        # remainders over (Dataset.rebatch) would waste less padding but is several times
        # slower.
        return (
            make_epoch(epoch)
            .map(
                graph_code(lambda features: split_examples(features, examples_per_batch)),
                num_parallel_calls=tf.data.AUTOTUNE,
                deterministic=True,
            )
            .unbatch()
        )

    epochs_dataset = tf.data.Dataset.range(first_epoch, first_epoch + epochs)
    epoch_fn = make_epoch if examples_per_batch is None else make_fixed_epoch
    return epochs_dataset.flat_map(graph_code(epoch_fn)).prefetch(tf.data.AUTOTUNE)


def split_examples(features, size):
    """Pad every `[P, ...]` tensor of a batch with zeros (id 0, weight 0, no context, no
    words: examples that change nothing in training) to a multiple of `size` examples and
    split it into `[P / size, size, ...]`."""
    examples = tf.shape(features["candidate_ids"])[0]
    chunks = (examples + size - 1) // size
    split = {}
    for name, tensor in features.items():
        padding = [[0, chunks * size - examples]] + [[0, 0]] * (tensor.shape.rank - 1)
        split[name] = tf.reshape(tf.pad(tensor, padding), [chunks, size, *tensor.shape[1:]])
    return split
