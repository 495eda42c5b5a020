import numpy as np
import pytest
import tensorflow as tf

from lmpipe import kernels
from lmpipe.datasets import TextCorpus
from lmpipe.datasets.bundled.word_similarity import read_word_pairs, unit_vectors
from lmpipe.datasets.examples.word2vec_vocabulary import split_words
from lmpipe.layers.word2vec_embedding import Word2VecEmbedding
from lmpipe.models.word2vec import negative_sampling_loss, sparse_sgd_step
from lmpipe.pipelines.word2vec import Word2Vec

# A real corpus big enough for meaningful vectors, small enough for a test: Shakespeare's
# histories and tragedies (about 376,000 words in the vocabulary), CBOW with the reference's
# CBOW learning rate, narrow vectors, 3 epochs (about 7 s).
GENRES = ["histories", "tragedies"]
SETTINGS = {"method": "cbow", "vector_size": 32, "alpha": 0.05, "seed": 0}
EPOCHS = 3


@pytest.fixture(scope="module")
def corpus():
    return TextCorpus.shakespeare(genres=GENRES)


@pytest.fixture(scope="module")
def trained(corpus):
    pipe = Word2Vec(**SETTINGS)
    pipe.losses = pipe.fit(corpus, epochs=EPOCHS, verbose=False).history["loss"]
    return pipe


@pytest.mark.slow
def test_related_words_are_nearer_than_unrelated_ones(trained):
    pairs = [
        (a, b, score)
        for a, b, score in read_word_pairs()
        if a in trained.vocabulary and b in trained.vocabulary and a != b
    ]
    assert len(pairs) >= 60
    pairs.sort(key=lambda pair: pair[2])
    third = len(pairs) // 3
    low = np.array([trained.similarity(a, b) for a, b, _ in pairs[:third]])
    high = np.array([trained.similarity(a, b) for a, b, _ in pairs[-third:]])
    # The WordSim-353 pairs rated most related are nearer on average than those rated least
    # related. (On 376,000 words the difference, about 0.04 in cosine, is below two standard
    # errors for gensim's vectors too; the parity test below is the sharper check.)
    assert high.mean() > low.mean()
    # The nearest neighbours of "king" are its peers and the kings of the histories.
    neighbours = {word for word, _ in trained.most_similar("king", topn=10)}
    assert {"duke", "prince", "queen", "emperor", "henry", "edward", "richard"} & neighbours


@pytest.mark.slow
def test_vectors_agree_with_gensim_trained_on_the_same_corpus(trained, corpus):
    """Parity with the reference: the cosine similarities among the 300 most frequent words
    correlate with gensim's (same corpus, words and settings) about as well as two gensim
    runs with different seeds correlate with each other."""
    gensim_models = pytest.importorskip("gensim.models")
    sentences = [
        [word.decode("utf-8") for word in words]
        for document in corpus.iter_documents()
        for words in split_words(tf.constant(document)).to_list()
        if words
    ]

    def gensim_cosines(seed):
        model = gensim_models.Word2Vec(
            sentences, vector_size=32, window=5, negative=5, min_count=5, sample=1e-3,
            alpha=0.05, sg=0, epochs=EPOCHS, workers=1, seed=seed,
        )  # fmt: skip
        return list(model.wv.index_to_key), model.wv.vectors

    def cosines(words, vectors, top):
        index = {word: i for i, word in enumerate(words)}
        unit = unit_vectors(vectors[[index[word] for word in top]])
        similarity = unit @ unit.T
        return similarity[np.triu_indices(len(top), 1)]

    words, vectors = gensim_cosines(1)
    words_2, vectors_2 = gensim_cosines(2)
    assert set(words) == set(trained.vocabulary.words)  # the same words kept
    top = words[:300]
    reference = cosines(words, vectors, top)
    lmpipe = np.corrcoef(cosines(trained.vocabulary.words, trained.vectors, top), reference)
    gensim = np.corrcoef(cosines(words_2, vectors_2, top), reference)
    assert lmpipe[0, 1] > gensim[0, 1] - 0.05


@pytest.mark.parametrize("method", ["skipgram", "cbow"])
def test_sparse_step_is_sgd_on_the_negative_sampling_loss(method):
    """With a tiny learning rate (the per-row correction is then 1), the hand-written step
    moves every row by -learning_rate times the autodiff gradient of the loss."""
    embedding = Word2VecEmbedding(vocabulary_size=30, vector_size=8, seed=1)
    embedding.build()
    rng = np.random.default_rng(0)
    for table in (embedding.input_embeddings, embedding.output_embeddings):
        table.assign(rng.uniform(-0.5, 0.5, (30, 8)).astype("float32"))
    weights = rng.integers(0, 2, (12, 4))  # noise words equal to the target weigh 0
    weights[:, 0] = 1
    features = {
        "candidate_ids": tf.constant(rng.integers(0, 30, (12, 4)), tf.int32),
        "candidate_weights": tf.constant(weights, tf.float32),
    }
    if method == "skipgram":
        features["input_ids"] = tf.constant(rng.integers(0, 30, 12), tf.int32)
    else:
        features["input_ids"] = tf.constant(rng.integers(0, 30, (12, 6)), tf.int32)
        mask = rng.integers(0, 2, (12, 6))
        mask[:, 0] = 1
        features["input_mask"] = tf.constant(mask, tf.float32)
    tables = [embedding.input_embeddings.value, embedding.output_embeddings.value]
    with tf.GradientTape() as tape:
        logits = embedding(features["input_ids"], features["candidate_ids"],
                           features.get("input_mask"))  # fmt: skip
        expected_loss = negative_sampling_loss(logits, features["candidate_weights"])
    gradients = [tf.convert_to_tensor(g) for g in tape.gradient(expected_loss, tables)]
    before = [table.numpy() for table in tables]
    learning_rate = 1e-3
    loss, examples = sparse_sgd_step(*tables, features, learning_rate)
    assert float(loss) == pytest.approx(float(expected_loss), rel=1e-5)
    assert int(examples) == 12
    for table, start, gradient in zip(tables, before, gradients, strict=True):
        moved = (table.numpy() - start) / learning_rate
        np.testing.assert_allclose(moved, -gradient.numpy(), rtol=0.02, atol=2e-3)
        assert np.abs(gradient.numpy()).max() > 0.2


@pytest.mark.slow
def test_learning_rate_decays_and_loss_falls(trained):
    losses = trained.losses
    assert losses[-1] < losses[0] < 6 * np.log(2)  # 6 candidates at log(2) each at the start


@pytest.mark.slow
@pytest.mark.parametrize("binary", [False, True])
def test_word2vec_format_loads_in_gensim_with_identical_vectors(trained, tmp_path, binary):
    keyed_vectors = pytest.importorskip("gensim.models").KeyedVectors
    path = str(tmp_path / "vectors.txt")
    trained.save_word2vec_format(path, binary=binary)
    loaded = keyed_vectors.load_word2vec_format(path, binary=binary)
    assert list(loaded.index_to_key) == list(trained.vocabulary.words)
    np.testing.assert_array_equal(loaded.vectors, trained.vectors)


@pytest.mark.slow
def test_save_load_round_trip_keeps_vectors_and_answers(trained, tmp_path):
    trained.save(str(tmp_path / "w2v"))
    loaded = Word2Vec.load(str(tmp_path / "w2v"))
    np.testing.assert_array_equal(loaded.vectors, trained.vectors)
    assert loaded.options == trained.options
    assert loaded.most_similar("love", topn=5) == trained.most_similar("love", topn=5)
    assert loaded.batch_size == trained.batch_size == 1024
    assert loaded.analogy("king", "man", "woman") == trained.analogy("king", "man", "woman")


@pytest.mark.slow
def test_unknown_word_raises_key_error_naming_it(trained):
    with pytest.raises(KeyError, match="zyzzyva"):
        trained.most_similar("zyzzyva")
    with pytest.raises(KeyError, match="qwxz"):
        trained.similarity("love", "qwxz")


@pytest.mark.slow
def test_analogy_evaluation_reports_coverage(trained):
    result = trained.evaluate_analogies()
    assert result["total"] == 19544
    assert 0 < result["answered"] < result["total"]
    assert result["coverage"] == pytest.approx(result["answered"] / result["total"])
    assert 0.0 <= result["accuracy"] <= 1.0


@pytest.mark.slow
def test_saved_model_serves_vectors_in_a_fresh_tf1_process(trained, tmp_path):
    from lmpipe.serving.emulator.compat import ServingProcess

    path = trained.export(str(tmp_path / "serving"))
    assert path.endswith("1")
    words = np.array([b"Love", b"king", b"zyzzyva"])
    with ServingProcess(path) as server:
        outputs = server.predict("serving_default", {"word": words})
    vectors = trained.vectors
    ids = [trained.vocabulary.index("love"), trained.vocabulary.index("king")]
    np.testing.assert_allclose(outputs["vector"][:2], vectors[ids], rtol=0, atol=0)
    assert outputs["found"].tolist() == [1, 1, 0]
    assert not outputs["vector"][2].any()
    assert outputs["vector"].dtype == np.float32


SENTENCES = ["the cat sat on the mat", "the dog sat on the log", "a cat and a dog"] * 30
# The sequential update needs lmpipe's kernel, which needs a C++ compiler the first time.
UPDATES = [
    pytest.param(
        "sequential",
        marks=pytest.mark.skipif(kernels.compiler() is None, reason="no C++ compiler"),
    ),
    "batched",
]


@pytest.mark.slow
@pytest.mark.parametrize("update", UPDATES)
def test_training_is_reproducible_for_the_same_seed(update):
    def vectors(seed, method):
        pipe = Word2Vec(
            method=method, vector_size=8, window=2, min_count=1, seed=seed, update=update
        )
        pipe.fit(SENTENCES, epochs=2, verbose=False)
        assert pipe.update == update
        return pipe.vectors

    np.testing.assert_array_equal(vectors(3, "skipgram"), vectors(3, "skipgram"))
    if update == "sequential":  # the seed reaches the data the same way for both updates
        assert not np.array_equal(vectors(3, "cbow"), vectors(4, "cbow"))


class RunStoppedError(Exception):
    pass


@pytest.mark.parametrize("update", UPDATES)
def test_a_run_resumed_after_its_last_epoch_ends_where_an_unbroken_run_ends(
    update, tmp_path, monkeypatch
):
    """A 3-epoch run stopped after its second checkpoint, started again with the same
    arguments, trains the third epoch only, with the batches and learning rates of the third
    epoch of an unbroken run (the words processed are restored as the interrupted run summed
    them; see test_word2vec_checkpoints.py for the rest of resuming)."""
    settings = {"vector_size": 8, "window": 2, "min_count": 1, "seed": 5, "update": update}
    unbroken = Word2Vec(**settings)
    unbroken.fit(SENTENCES, epochs=3, verbose=False)

    save = tf.train.CheckpointManager.save

    def save_then_stop_at_epoch_2(manager, *args, **kwargs):
        path = save(manager, *args, **kwargs)
        if path.endswith("-2"):
            raise RunStoppedError
        return path

    monkeypatch.setattr(tf.train.CheckpointManager, "save", save_then_stop_at_epoch_2)
    interrupted = Word2Vec(**settings)
    with pytest.raises(RunStoppedError):
        interrupted.fit(SENTENCES, epochs=3, checkpoint_dir=str(tmp_path), verbose=False)
    monkeypatch.undo()
    resumed = Word2Vec(**settings)
    history = resumed.fit(SENTENCES, epochs=3, checkpoint_dir=str(tmp_path), verbose=False)
    assert history.epoch == [2]
    np.testing.assert_array_equal(resumed.vectors, unbroken.vectors)
    assert np.abs(resumed.vectors - interrupted.vectors).max() > 1e-4  # epoch 3 did train


def test_corpus_below_min_count_names_min_count_and_the_count():
    with pytest.raises(ValueError, match=r"min_count=5.*occurs 2 times"):
        Word2Vec(min_count=5).fit(["to be or not to be"], verbose=False)


def test_a_corpus_that_makes_no_example_is_an_error_not_a_silent_run(tmp_path):
    # Every sentence a single word: no word has a context, so no example, no update.
    pipe = Word2Vec(vector_size=8, min_count=1)
    with pytest.raises(ValueError) as error:
        pipe.fit(["alpha", "beta", "12", "34"] * 25, checkpoint_dir=str(tmp_path), verbose=0)
    assert str(error.value).startswith(
        "word2vec made no training example from the corpus in epoch 1 (100 words of the "
        "vocabulary): an example needs a sentence with two words of the vocabulary"
    )
    assert not list(tmp_path.glob("ckpt-*"))  # nothing checkpointed as if trained


@pytest.mark.parametrize(
    "options, message",
    [
        ({"window": 0}, "window"),
        ({"negative": 0}, "negative"),
        ({"vector_size": 0}, "vector_size"),
        ({"min_count": 0}, "min_count"),
        ({"method": "glove"}, "method"),
        ({"alpha": 0.01, "min_alpha": 0.1}, "min_alpha"),
    ],
)
def test_bad_options_are_rejected_by_name(options, message):
    with pytest.raises(ValueError, match=message):
        Word2Vec(**options)


def test_results_before_fit_raise():
    with pytest.raises(ValueError, match="fit"):
        Word2Vec().vectors  # noqa: B018
