"""`fit` keeps the steps of one pass over a file corpus in its checkpoint directory: a resumed
or repeated run on the same files does not count them again; changed files are counted."""

import json

import pytest

from lmpipe.datasets import TextCorpus, WordPieceTokenizer
from lmpipe.models import BertConfig
from lmpipe.pipelines import BertPretraining
from lmpipe.pipelines.pipeline import STEPS_FILE


@pytest.fixture(scope="module")
def plays():
    return TextCorpus.shakespeare(plays=["hamlet"])


@pytest.fixture(scope="module")
def tokenizer(plays):
    return WordPieceTokenizer.train(plays, vocab_size=300)


def write_corpus(folder, plays, documents):
    folder.mkdir(exist_ok=True)
    scenes = list(plays.iter_documents())[:documents]
    (folder / "scenes.txt").write_text("".join("\n".join(s) + "\n\n" for s in scenes))
    return TextCorpus.from_files(str(folder / "*.txt"))


def test_the_count_is_kept_by_the_files_and_the_configuration(
    plays, tokenizer, tmp_path, monkeypatch
):
    config = BertConfig.tiny(vocabulary_size=tokenizer.vocabulary_size, max_sequence_length=32)
    pipe = BertPretraining(tokenizer, config, seq_len=32, seed=0)
    corpus = write_corpus(tmp_path / "data", plays, 2)
    counted = []
    real = BertPretraining.steps_in_one_pass

    def count(self, data, batch_size):
        counted.append(batch_size)
        return real(self, data, batch_size)

    monkeypatch.setattr(BertPretraining, "steps_in_one_pass", count)

    def fit(batch_size, epochs=1):
        return pipe.fit(
            corpus,
            batch_size=batch_size,
            epochs=epochs,
            checkpoint_dir=str(tmp_path / "run"),
            verbose=0,
        ).params

    first = fit(16)
    assert counted == [16]
    kept = json.loads((tmp_path / "run" / STEPS_FILE).read_text())
    assert kept["steps"] == first["steps"] == real(pipe, corpus, 16)
    assert fit(16, epochs=2)["steps"] == first["steps"]  # resumed: not counted again
    assert counted == [16]
    # Another batch size: counted, then refused (the run was trained with 16).
    with pytest.raises(ValueError, match="batch_size 16 -> 8"):
        fit(8, epochs=1)
    assert counted == [16, 8]
    corpus = write_corpus(tmp_path / "data", plays, 3)  # the file changed: counted again
    fit(16, epochs=3)
    assert counted == [16, 8, 16]
