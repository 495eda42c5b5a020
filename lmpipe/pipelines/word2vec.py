"""word2vec: vocabulary, training, word vectors, evaluation, export, in one object.

Training uses its own loop (`lmpipe.training.word2vec_loop`) rather than
`lmpipe.training.loop.train` (even with its `optimizer=` argument): word2vec's update is not a
Keras optimizer's, and its steps are tiny (a gather, dot products and a scatter per example),
so autodiff, Keras' per-step machinery and an optimizer over `IndexedSlices` made the first
version of this pipeline run at about 1/20 of gensim's speed. Its checkpoints are every
family's (`lmpipe.training.checkpointing.RunCheckpoints`). Two updates (`Word2VecOptions.update`):

- "sequential" (the default on one device): lmpipe's compiled kernel
  (`lmpipe.models.word2vec.sequential_sgd_step`) updates the vectors after every example, as
  the reference implementation does, on the CPU, while tf.data makes the next batches on the
  other cores. One iterator feeds the whole run, and an epoch is one `tf.function` call.
- "batched" (under a `tf.distribute` strategy, or where no C++ compiler is found): each step
  sums its examples' updates per row, each row's learning rate corrected for how many
  examples of the batch use it (`lmpipe.models.word2vec.sparse_sgd_step`), which is what
  lets batches of thousands of examples train like example-by-example SGD. It is a
  hand-written, XLA-compiled update of fixed-size batches (without XLA under a strategy) that
  touches only the rows the batch uses; a whole epoch is one `tf.function` call iterating
  the dataset in the graph.

The learning rate decays linearly from `alpha` to `min_alpha` by the words processed, as the
reference implementation does.
"""

import contextlib
import dataclasses
import hashlib
import io
import os
import warnings

import keras
import numpy as np
import tensorflow as tf

from lmpipe.arguments import check_bool, check_number, check_positive_int
from lmpipe.datasets.bundled.word_similarity import (
    SIMLEX999,
    analogy_accuracy,
    gensim_test_data,
    read_analogies,
    read_word_pairs,
    similarity_correlation,
    unit_vectors,
)
from lmpipe.datasets.examples.word2vec_examples import (
    check_word2vec_options,
    sentence_word_ids,
    word2vec_examples,
)
from lmpipe.datasets.examples.word2vec_vocabulary import (
    Word2VecVocabulary,
    as_corpus,
    normalize_words,
)
from lmpipe.kernels import KernelUnavailableError, load_kernel
from lmpipe.models.word2vec import Word2VecModel, negative_sampling_loss
from lmpipe.pipelines.command_line import CommandLine
from lmpipe.pipelines.pipeline import Pipeline, PipelineOptions
from lmpipe.serving.text_export import export_text_function
from lmpipe.training.checkpointing import RunCheckpoints
from lmpipe.training.distribution import distributed_dataset, distribution_strategy
from lmpipe.training.options import check_training_options
from lmpipe.training.word2vec_loop import epoch_function, is_distributed, train_epochs

VOCABULARY_FILE = "vocabulary.tsv"
VECTORS_FILE = "vectors.npz"
DEFAULT_BATCH_SIZES = {"skipgram": 4096, "cbow": 1024}
UPDATES = ("auto", "sequential", "batched")
# The training options of `Word2Vec.fit`: its loop is its own (see the module docstring).
WORD2VEC_TRAINING_OPTIONS = ("strategy", "checkpoint_dir", "verbose")


@dataclasses.dataclass(frozen=True)
class Word2VecOptions(PipelineOptions):
    """The options of `Word2Vec`.

    Attributes:
        method: "skipgram" (the center word predicts each context word) or "cbow" (the mean
            of the context vectors predicts the center word).
        vector_size: dimension of the vectors.
        window: largest distance between a center and a context word; each center draws its
            window uniformly from 1..window.
        negative: noise words per example.
        min_count: words occurring fewer times are ignored.
        sample: subsampling threshold t of frequent words (0 disables it).
        alpha, min_alpha: the learning rate decays linearly from `alpha` to `min_alpha`
            over the run, by words processed.
        lower_case: lowercase the text (the evaluation sets are lowercase).
        update: how a step updates the vectors. "sequential": example by example, as the
            reference implementation does, in lmpipe's compiled kernel
            (`lmpipe.models.word2vec.sequential_sgd_step`; CPU, one device, needs a C++
            compiler the first time). "batched": each batch's updates summed per row with a
            per-row correction (`lmpipe.models.word2vec.sparse_sgd_step`; XLA, any device and
            `tf.distribute` strategy). "auto": sequential without a distribution strategy,
            batched under one; batched also where the kernel cannot be built, with a
            `RuntimeWarning` saying why.
        seed: seed of the initialization and of every random choice.
    """

    method: str = "skipgram"
    vector_size: int = 100
    window: int = 5
    negative: int = 5
    min_count: int = 5
    sample: float = 1e-3
    alpha: float = 0.025
    min_alpha: float = 1e-4
    lower_case: bool = True
    update: str = "auto"

    def check(self):
        super().check()
        check_word2vec_options(self.method, self.window, self.negative, self.sample)
        check_positive_int("vector_size", self.vector_size)
        check_positive_int("min_count", self.min_count)
        check_number("alpha", self.alpha, above=0)
        check_number("min_alpha", self.min_alpha, minimum=0)
        if self.min_alpha > self.alpha:
            raise ValueError(
                f"Need `min_alpha` <= `alpha`, got alpha={self.alpha!r}, "
                f"min_alpha={self.min_alpha!r}."
            )
        check_bool("lower_case", self.lower_case)
        if self.update not in UPDATES:
            raise ValueError(f"`update` must be one of {UPDATES}, got {self.update!r}.")
        for name in ("sample", "alpha", "min_alpha"):
            self.resolve(name, float(getattr(self, name)))


def _command_line_options(flags):
    """`lmpipe pretrain word2vec`'s options: the flags given (the others keep the defaults),
    the learning rate as `alpha`, lower case unless `--cased`."""
    names = ("method", "vector_size", "window", "min_count", "negative", "update")
    options = {name: getattr(flags, name) for name in names}
    options["alpha"] = flags.learning_rate
    options = {name: value for name, value in options.items() if value is not None}
    return {**options, "seed": flags.seed, "lower_case": not flags.cased}


class Word2Vec(Pipeline):
    """word2vec word vectors (skip-gram or CBOW, negative sampling), trained in TensorFlow.

    Words are the lowercased runs of letters, digits and inner apostrophes of each sentence
    (`lmpipe.datasets.examples.word2vec_vocabulary.split_words`); see
    `lmpipe.datasets.examples.word2vec_vocabulary` for the vocabulary and
    `lmpipe.datasets.examples.word2vec_examples` for subsampling, dynamic windows and negative
    sampling, which follow the reference implementation (word2vec.c, as gensim implements it)
    and run in tf.data graph code.

    Args:
        **options: the fields of `Word2VecOptions` (`method`, `vector_size`, `window`,
            `negative`, `min_count`, `sample`, `alpha`, `min_alpha`, `lower_case`, `seed`).

    `fit`'s `batch_size` is the number of examples per SGD step (per replica) of the batched
    update: (center, context) pairs for skip-gram, center words for CBOW; None: 4096 for
    skip-gram (about 1,100 words), 1024 for CBOW (about 1,400 words). A batched step sums its
    examples' updates per row with a correction for rows used many times
    (`lmpipe.models.word2vec.sparse_sgd_step`); larger steps have less overhead but
    materialize `[batch_size, 1 + negative, vector_size]` tensors, which outgrow the CPU
    caches and the allocator's reused memory, and approximate the reference's
    example-by-example updates less well. The sequential update takes the examples of about
    16 such batches (whole sentences) per call of its kernel, with one learning rate; they
    are updated one after the other all the same. An epoch is one pass over the corpus.

    Example:

    >>> sentences = ["the cat sat on the mat", "the dog sat on the log"] * 50
    >>> w2v = Word2Vec(vector_size=8, window=2, min_count=1, sample=0, seed=1)
    >>> history = w2v.fit(sentences, epochs=2, verbose=False)
    >>> w2v.vectors.shape
    (7, 8)
    >>> w2v.most_similar("cat", topn=2)[0][0] in w2v.vocabulary.words
    True

    Reference:
        Mikolov et al., "Distributed Representations of Words and Phrases and their
        Compositionality", NeurIPS 2013.
    """

    options_class = Word2VecOptions
    training_options = WORD2VEC_TRAINING_OPTIONS
    predictions = ("most_similar",)
    command_line = CommandLine("word2vec", options=_command_line_options)
    training_defaults = {"verbose": True}
    default_batch_size = None  # the method's, see `DEFAULT_BATCH_SIZES`
    default_epochs = 5

    def __init__(self, **options):
        super().__init__(None, **options)
        self.vocabulary = None
        self.batch_size = None  # examples per step of the last fit
        self.update = None  # "sequential" or "batched": how the last fit updated

    def check_data(self, corpus, name="data"):
        return as_corpus(corpus)

    def _examples_per_batch(self, batch_size):
        if batch_size is None:
            return DEFAULT_BATCH_SIZES[self.options.method]
        return check_positive_int("batch_size", batch_size)

    def dataset(self, corpus, batch_size=None, epochs=None, input_context=None):
        """word2vec's batches of `corpus` (see `lmpipe.datasets.examples.word2vec_examples`),
        for the vocabulary of the trained pipeline, or, before `fit`, of `corpus`.

        Args:
            corpus: a `TextCorpus` or an iterable of sentences.
            batch_size: examples per batch; None: the method's default.
            epochs: passes over the corpus; None repeats forever.
            input_context: a `tf.distribute.InputContext`: which shard to read.
        """
        corpus = as_corpus(corpus)
        options = self.options
        vocabulary = self.vocabulary
        if vocabulary is None:
            vocabulary = Word2VecVocabulary.learn(corpus, options.min_count, options.lower_case)
        dataset = word2vec_examples(
            corpus,
            vocabulary,
            method=options.method,
            window=options.window,
            negative=options.negative,
            sample=options.sample,
            seed=options.seed,
            epochs=1,
            lower_case=options.lower_case,
            input_context=input_context,
            examples_per_batch=self._examples_per_batch(batch_size),
        )
        return dataset.repeat(epochs)

    # Training ---------------------------------------------------------------------------------

    def fit(
        self,
        corpus,
        batch_size=None,
        epochs=None,
        steps_per_epoch=None,
        validation=None,
        **training_options,
    ):
        """Learn the vocabulary of `corpus` and train the vectors for `epochs` passes.

        Args:
            corpus: a `lmpipe.datasets.TextCorpus`, or an iterable of sentences (`str`).
            batch_size: examples per SGD step (per replica); None: the method's default (see
                the class docstring).
            epochs: passes over the corpus (5).
            steps_per_epoch, validation: not taken: an epoch is a pass over the corpus, and
                the vectors are evaluated with `evaluate` and the word-similarity methods.
            **training_options: `strategy` (None, "mirrored", "multi_worker" or a
                `tf.distribute.Strategy`; each input pipeline reads its own shard of the
                corpus), `checkpoint_dir` (checkpoint after every epoch there; a run started
                again with the same arguments resumes after the last finished epoch, from the
                newest intact checkpoint, with the words processed and so the learning rate
                restored; other options or another vocabulary are a `ValueError` naming
                them, see `run_settings`) and `verbose` (print the loss and speed of each
                epoch; default True).

        Returns:
            A Keras `History`: per epoch, `loss` (per example), `examples`, `words`,
            `seconds`, `words_per_second`.

        Raises:
            ValueError: bad `epochs`, or no word occurs `min_count` times.
        """
        options = check_training_options(
            f"{type(self).__name__}.fit",
            training_options,
            self.training_defaults,
            self.training_options,
        )
        for name, value in (("steps_per_epoch", steps_per_epoch), ("validation", validation)):
            if value is not None:
                raise ValueError(
                    f"Word2Vec.fit takes no `{name}`: an epoch is a pass over the corpus; "
                    "evaluate the vectors with evaluate() or evaluate_similarity()."
                )
        epochs = self.default_epochs if epochs is None else epochs
        check_positive_int("epochs", epochs)
        examples_per_batch = self._examples_per_batch(batch_size)
        checkpoint_dir, verbose = options.checkpoint_dir, options.verbose
        corpus = as_corpus(corpus)
        strategy = distribution_strategy(options.strategy)
        # Before the corpus is read: update='sequential' may not run here at all.
        sequential = self.sequential_update(strategy)
        settings = self.options
        vocabulary = Word2VecVocabulary.learn(corpus, settings.min_count, settings.lower_case)
        if len(vocabulary) < 2:
            raise ValueError(
                f"Only {len(vocabulary)} word occurs min_count={settings.min_count} times in "
                "the corpus; word2vec needs at least 2: lower `min_count` or use a larger corpus."
            )
        self.vocabulary = vocabulary
        self.batch_size = examples_per_batch
        self.update = "sequential" if sequential else "batched"
        # Sentences are turned into examples about 16 steps' worth at a time: fewer, larger
        # tf.data calls cost less per word. Skip-gram makes about window + 1 examples per
        # word, CBOW one.
        per_word = settings.window + 1 if settings.method == "skipgram" else 1
        words_per_batch = 16 * examples_per_batch / per_word
        sentences_per_batch = max(
            1, round(words_per_batch * vocabulary.num_sentences / max(vocabulary.total_words, 1))
        )
        # The sequential kernel runs on the CPU, where its tables must be.
        with strategy.scope(), tf.device("/CPU:0") if sequential else contextlib.nullcontext():
            self.model = Word2VecModel(len(vocabulary), settings.vector_size, seed=settings.seed)
        checkpoints = None
        first_epoch, words_done = 0, 0.0
        if checkpoint_dir is not None:
            checkpoints = self._checkpoints(checkpoint_dir, strategy, vocabulary)
            first_epoch = checkpoints.restore()
            # The words processed as the interrupted run counted them (not recomputed from
            # the epochs), so that the resumed run's learning rates are the unbroken run's;
            # a checkpoint written before they were kept counts whole epochs' words.
            words_done = float(checkpoints.optional["words_done"].numpy())
            if checkpoints.lacking:
                words_done = float(first_epoch * vocabulary.retained_words)

        word_ids = {}

        def make_dataset(epoch, epochs=1):
            def for_pipeline(input_context):
                key = 0 if input_context is None else input_context.input_pipeline_id
                if key not in word_ids:  # tokenized once, cached for all epochs
                    word_ids[key] = sentence_word_ids(
                        corpus, vocabulary, sentences_per_batch, settings.lower_case, input_context
                    )
                return word2vec_examples(
                    corpus,
                    vocabulary,
                    method=settings.method,
                    window=settings.window,
                    negative=settings.negative,
                    sample=settings.sample,
                    seed=settings.seed,
                    epochs=epochs,
                    first_epoch=epoch,
                    lower_case=settings.lower_case,
                    input_context=input_context,
                    word_ids=word_ids[key],
                    # The batched step is compiled for one shape; the kernel takes any.
                    examples_per_batch=None if sequential else examples_per_batch,
                )

            return distributed_dataset(strategy, for_pipeline)

        total_words = epochs * vocabulary.retained_words
        train = epoch_function(
            self.model, strategy, total_words, settings.alpha, settings.min_alpha, sequential
        )
        if sequential:
            # One iterator for the whole run, so that the input pipeline prefetches across the
            # ends of epochs; an epoch is its fixed number of batches of sentences.
            # Without tf.data's autotuning: destroying an autotuned iterator at the end of the
            # run took 4 seconds in about one run of two here; the epochs are no slower.
            options = tf.data.Options()
            options.autotune.enabled = False
            dataset = make_dataset(first_epoch, epochs - first_epoch).with_options(options)
            batches = iter(dataset)
            steps = tf.constant(-(-vocabulary.num_sentences // sentences_per_batch), tf.int64)

            def run_epoch(epoch, words_done):
                return train(batches, words_done, steps)

        elif is_distributed(strategy):

            def run_epoch(epoch, words_done):
                return train(make_dataset(epoch), words_done)

        else:
            # The epoch's dataset is built inside the function from the epoch number, so its
            # tf.data functions are traced once for the run rather than once per epoch. The
            # word ids are made out here: a cache made inside the function would be a new one
            # at every call, and every epoch would split and look up the corpus again.
            word_ids[0] = sentence_word_ids(
                corpus, vocabulary, sentences_per_batch, settings.lower_case, None
            )
            train_on = train.python_function

            @tf.function
            def train_epoch(epoch, words_done):
                return train_on(make_dataset(epoch), words_done)

            def run_epoch(epoch, words_done):
                return train_epoch(tf.constant(epoch, tf.int64), words_done)

        def end_epoch(epochs_done, words_done):
            if checkpoints is not None:
                checkpoints.tracked["epoch"].assign(epochs_done)
                checkpoints.optional["words_done"].assign(words_done)
                checkpoints.save()

        words_done = tf.constant(words_done, tf.float64)
        words = vocabulary.retained_words
        try:
            return train_epochs(
                run_epoch, first_epoch, epochs, words_done, words, verbose, end_epoch
            )
        finally:
            if checkpoints is not None:
                checkpoints.close()

    def _checkpoints(self, directory, strategy, vocabulary):
        """The run's `RunCheckpoints` in `directory`, one per epoch: both vector tables, the
        epochs done (`epoch`, which numbers them) and the words processed (`words_done`,
        where the learning rate's decay stands, optional: checkpoints of before it lack it)."""
        embedding = self.model.embedding
        epochs_done = tf.Variable(0, dtype=tf.int64, trainable=False)
        tables = {
            "input_embeddings": embedding.input_embeddings.value,
            "output_embeddings": embedding.output_embeddings.value,
            "epoch": epochs_done,
        }
        words_done = tf.Variable(0.0, dtype=tf.float64, trainable=False)
        # Two kept, so that a damaged newest one has one to fall back on.
        return RunCheckpoints(
            directory,
            tables,
            strategy,
            self.run_settings(vocabulary),
            steps=lambda: int(epochs_done.numpy()),
            max_to_keep=2,
            optional={"words_done": words_done},
        )

    def run_settings(self, vocabulary):
        """What identifies a training run, kept in the checkpoint directory's `run.json` and
        checked when a run resumes (`lmpipe.training.checkpointing`): the options (method,
        window, negative, vector_size, min_count, sample, alpha, min_alpha, lower_case,
        update, seed) and the vocabulary (its size and a hash of its words and counts, which
        says that two runs train the same rows on the same word frequencies)."""
        lines = "\n".join(
            f"{word}\t{count}"
            for word, count in zip(vocabulary.words, vocabulary.counts.tolist(), strict=True)
        )
        digest = hashlib.sha256(lines.encode("utf-8")).hexdigest()
        return self.run_config() | {"vocabulary": {"words": len(vocabulary), "sha256": digest}}

    def sequential_update(self, strategy=None):
        """Whether `fit` under `strategy` (None: the current one) updates example by example
        (see `Word2VecOptions.update`). update='sequential' under a distribution strategy is a
        ValueError, and where the kernel cannot be built a `KernelUnavailableError` saying
        why; 'auto' falls back to the batched update there, with a RuntimeWarning."""
        strategy = tf.distribute.get_strategy() if strategy is None else strategy
        update = self.options.update
        if update == "batched":
            return False
        if tf.distribute.has_strategy() or strategy is not tf.distribute.get_strategy():
            if update == "sequential":
                raise ValueError(
                    "Word2Vec(update='sequential') runs on one device, without a distribution "
                    f"strategy; got {type(strategy).__name__}: use update='batched' (or 'auto')."
                )
            return False
        try:
            load_kernel("word2vec_sgd")
        except KernelUnavailableError as error:
            if update == "sequential":
                raise
            warnings.warn(
                f"Word2Vec trains with update='batched': {error}", RuntimeWarning, stacklevel=3
            )
            return False
        return True

    # Results ----------------------------------------------------------------------------------

    def evaluate(self, corpus, batch_size=None, steps=None, verbose=0):
        """`{"loss": the negative-sampling loss per example}` on `corpus` (one pass, or
        `steps` batches), with the trained vectors, without updating them; examples are drawn
        as in training (subsampling, windows, noise words keyed by the seed)."""
        del verbose
        check_positive_int("steps", steps, none=True)
        model = self.require_model()
        dataset = self.dataset(as_corpus(corpus), batch_size, epochs=None if steps else 1)
        if steps:
            dataset = dataset.take(steps)

        @tf.function
        def run(dataset):
            total = tf.constant(0.0, tf.float64)
            examples = tf.constant(0.0, tf.float64)
            for features in dataset:
                weights = features["candidate_weights"]
                loss = negative_sampling_loss(model(features), weights)
                total += tf.cast(loss, tf.float64)
                examples += tf.reduce_sum(tf.cast(weights[:, 0] > 0, tf.float64))
            return total, examples

        total, examples = run(dataset)
        return {"loss": float(total) / max(float(examples), 1.0)}

    @property
    def vectors(self):
        """The word vectors, a float32 numpy array `[V, D]`, row i for `vocabulary.words[i]`."""
        return self.require_model().vectors

    def _ids(self, words):
        self.require_model()
        return [self.vocabulary.index(word) for word in words]

    def most_similar(self, word_or_words, topn=10, negative=None):
        """The `topn` words nearest in cosine to the mean of the unit vectors of the given
        words minus those of `negative` (the query words themselves excluded).

        Args:
            word_or_words: a word or a list of words.
            topn: number of results.
            negative: a word or list of words to subtract.

        Returns:
            A list of `(word, cosine)`, most similar first.

        Raises:
            KeyError: a word is not in the vocabulary (the message names it).
        """
        positive = [word_or_words] if isinstance(word_or_words, str) else list(word_or_words)
        negative = [negative] if isinstance(negative, str) else list(negative or [])
        unit = unit_vectors(self.vectors)
        query = np.zeros(unit.shape[1], np.float32)
        for ids, sign in ((self._ids(positive), 1.0), (self._ids(negative), -1.0)):
            for index in ids:
                query += sign * unit[index]
        scores = unit @ unit_vectors(query[None])[0]
        scores[self._ids(positive + negative)] = -np.inf
        best = np.argsort(-scores)[:topn]
        return [(self.vocabulary.words[i], float(scores[i])) for i in best]

    def analogy(self, a, b, c):
        """The word nearest to `a - b + c` (unit vectors), other than a, b and c: for instance
        `analogy("king", "man", "woman")` answers "queen" with good vectors."""
        return self.most_similar([a, c], topn=1, negative=[b])[0][0]

    def similarity(self, first, second):
        """Cosine similarity of two words' vectors."""
        unit = unit_vectors(self.vectors[self._ids([first, second])])
        return float(unit[0] @ unit[1])

    def evaluate_analogies(self, path=None, restrict_vocab=30000):
        """Analogy accuracy (3CosAdd) on `path` (default: gensim's questions-words.txt),
        among the `restrict_vocab` most frequent words, as gensim does.

        Returns:
            A dict with `accuracy`, `correct`, `answered`, `total`, `coverage`, `sections`.
        """
        self.require_model()
        return analogy_accuracy(
            self.vocabulary.words, self.vectors, read_analogies(path), restrict_vocab
        )

    def evaluate_similarity(self, path=None):
        """Spearman correlation of cosine similarity with human ratings on `path` (default:
        gensim's wordsim353.tsv; "simlex999" names gensim's SimLex-999), over the pairs whose
        words are in the vocabulary.

        Returns:
            A dict with `spearman`, `pearson`, `pairs`, `total`, `coverage`.
        """
        self.require_model()
        if path == "simlex999":
            path = gensim_test_data(SIMLEX999)
        return similarity_correlation(self.vocabulary.words, self.vectors, read_word_pairs(path))

    # Save, load, export -----------------------------------------------------------------------

    def save_word2vec_format(self, path, binary=False):
        """Write the vectors in word2vec's format (what gensim's
        `KeyedVectors.load_word2vec_format` reads): a header `V D`, then one word per line
        with its vector, as text (`%.9g`, which float32 round-trips exactly) or, with
        `binary=True`, as raw little-endian float32 after the word and a space."""
        vectors = self.vectors.astype("<f4")
        with open(path, "wb") as file:
            file.write(f"{vectors.shape[0]} {vectors.shape[1]}\n".encode())
            for word, vector in zip(self.vocabulary.words, vectors, strict=True):
                if binary:
                    file.write(word.encode("utf-8") + b" " + vector.tobytes() + b"\n")
                else:
                    values = " ".join(f"{value:.9g}" for value in vector.tolist())
                    file.write(f"{word} {values}\n".encode())

    def saved_state(self):
        return {"batch_size": self.batch_size}

    def restore_state(self, state):
        self.batch_size = state.get("batch_size")

    def write_model(self, directory):
        """Write the vocabulary (`vocabulary.tsv`) and both vector tables (`vectors.npz`)."""
        embedding = self.require_model().embedding
        self.vocabulary.save(os.path.join(directory, VOCABULARY_FILE))
        buffer = io.BytesIO()  # numpy's zip writer seeks, which a GFile opened for writing cannot
        np.savez(
            buffer,
            input_embeddings=keras.ops.convert_to_numpy(embedding.input_embeddings),
            output_embeddings=keras.ops.convert_to_numpy(embedding.output_embeddings),
        )
        with tf.io.gfile.GFile(os.path.join(directory, VECTORS_FILE), "wb") as file:
            file.write(buffer.getvalue())

    def read_model(self, saved):
        self.vocabulary = Word2VecVocabulary.load(saved.file(VOCABULARY_FILE))
        with tf.io.gfile.GFile(saved.file(VECTORS_FILE), "rb") as file:
            arrays = np.load(io.BytesIO(file.read()))
            tables = arrays["input_embeddings"], arrays["output_embeddings"]
        model = Word2VecModel(len(self.vocabulary), self.options.vector_size)
        model.embedding.input_embeddings.assign(tables[0])
        model.embedding.output_embeddings.assign(tables[1])
        return model

    @classmethod
    def from_parts(cls, saved, config, options):
        return cls(**options.to_dict())

    def serving_module(self):
        """A `tf.Module` whose `serve` maps words to vectors, for TF Serving.

        Input `word`: tf.string `[B]`, one word each, normalized as in training (lowercased
        if `lower_case`, U+2019 read as an apostrophe). Outputs: `vector` float32 `[B, D]`,
        the word's vector, all zeros for a word outside the vocabulary, and `found` int32
        `[B]`, 1 if the word is in the vocabulary, else 0.
        """
        self.require_model()
        module = tf.Module()
        module.table = self.vocabulary.lookup_table()
        module.vectors = tf.Variable(self.vectors, trainable=False, name="vectors")
        lower_case = self.options.lower_case

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="word")])
        def serve(word):
            ids = module.table.lookup(normalize_words(tf.strings.strip(word), lower_case))
            found = ids >= 0
            vectors = tf.gather(module.vectors, tf.maximum(ids, 0))  # [B, D]
            vectors = tf.where(found[:, None], vectors, tf.zeros_like(vectors))
            return {"vector": vectors, "found": tf.cast(found, tf.int32)}

        module.serve = serve
        return module

    def write_export(self, base_dir, version, overwrite):
        """Written to a temporary directory and renamed into place, with a warmup request.

        Signature `serving_default`: input `word` (tf.string `[B]`), outputs `vector`
        (float32 `[B, D]`, zeros for unknown words) and `found` (int32 `[B]`, 1 = known word).
        """
        module = self.serving_module()
        return export_text_function(
            base_dir, module, module.serve, version=version, overwrite=overwrite
        )
