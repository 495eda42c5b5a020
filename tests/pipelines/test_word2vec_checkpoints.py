"""word2vec's checkpoints resume as the other families' do: the run's settings checked, the
newest intact checkpoint restored, and the words processed (the learning rate's decay) as the
interrupted run counted them, so that a resumed run ends where an unbroken one ends."""

import json
import logging
import os

import numpy as np
import pytest
import tensorflow as tf

from lmpipe import kernels
from lmpipe.pipelines.word2vec import Word2Vec
from lmpipe.training.checkpointing import POINTER_FILE, RUN_FILE

SETTINGS = {"vector_size": 8, "window": 3, "min_count": 2, "seed": 5, "update": "batched"}
BATCH_SIZE = 512
UPDATES = [
    pytest.param(
        "sequential",
        marks=pytest.mark.skipif(kernels.compiler() is None, reason="no C++ compiler"),
    ),
    "batched",
]


class RunStoppedError(Exception):
    pass


@pytest.fixture(scope="module")
def sentences(comedies):
    """624 sentences of real text: the words an epoch counts, summed from each example's
    float32 share of its batch, are not the vocabulary's count of words to the last bit."""
    return [sentence for document in list(comedies.iter_documents())[:6] for sentence in document]


def fit(sentences, directory=None, epochs=3, **settings):
    pipe = Word2Vec(**{**SETTINGS, **settings})
    options = {} if directory is None else {"checkpoint_dir": str(directory)}
    history = pipe.fit(sentences, epochs=epochs, batch_size=BATCH_SIZE, verbose=False, **options)
    return pipe, history


def interrupted(sentences, directory, after_epoch, monkeypatch, **settings):
    """A 3-epoch run killed right after its checkpoint of `after_epoch` epochs."""
    save = tf.train.CheckpointManager.save

    def save_then_stop(manager, *args, **kwargs):
        path = save(manager, *args, **kwargs)
        if path.endswith(f"-{after_epoch}"):
            raise RunStoppedError
        return path

    with monkeypatch.context() as patch:
        patch.setattr(tf.train.CheckpointManager, "save", save_then_stop)
        with pytest.raises(RunStoppedError):
            fit(sentences, directory, **settings)


@pytest.mark.parametrize("update", UPDATES)
def test_a_run_resumed_mid_run_ends_where_an_unbroken_run_ends(
    sentences, update, tmp_path, monkeypatch
):
    """Killed after its first of 3 epochs, resumed: the same vectors to the bit (before, the
    words processed were recomputed as whole epochs' words, and the learning rates, and so
    the vectors, differed: by 2.4e-7 sequential, 6e-8 batched)."""
    unbroken, _ = fit(sentences, update=update)
    interrupted(sentences, tmp_path, 1, monkeypatch, update=update)
    resumed, history = fit(sentences, tmp_path, update=update)
    assert history.epoch == [1, 2]
    np.testing.assert_array_equal(resumed.vectors, unbroken.vectors)


@pytest.mark.parametrize(
    "changed, differs",
    [
        ({"window": 2}, "window"),
        ({"method": "cbow"}, "method"),
        ({"window": 5, "negative": 3}, "negative, window"),
        ({"min_count": 1}, "min_count, vocabulary"),
    ],
)
def test_a_run_with_other_settings_is_refused_naming_them(sentences, tmp_path, changed, differs):
    fit(sentences, tmp_path, epochs=1)
    with pytest.raises(ValueError) as refused:
        fit(sentences, tmp_path, epochs=2, **changed)
    message = str(refused.value)
    assert f"are of another model configuration (differs in: {differs}, see" in message
    assert os.path.join(str(tmp_path), RUN_FILE) in message
    recorded = json.loads((tmp_path / RUN_FILE).read_text())
    assert recorded["window"] == 3 and recorded["vocabulary"]["words"] > 100


def test_another_corpus_is_another_vocabulary(sentences, tmp_path):
    fit(sentences, tmp_path, epochs=1)
    with pytest.raises(ValueError, match=r"differs in: vocabulary, see"):
        fit(sentences[:300], tmp_path, epochs=2)


def test_a_garbage_index_file_falls_back_to_the_newest_intact_checkpoint(
    sentences, tmp_path, monkeypatch, caplog
):
    """Killed after epoch 2 of 3, its checkpoint's index file garbage (before: "file is too
    short to be an sstable"): the run resumes from epoch 1's checkpoint, with a warning, and
    ends where an unbroken run ends."""
    unbroken, _ = fit(sentences)
    interrupted(sentences, tmp_path, 2, monkeypatch)
    (tmp_path / "ckpt-2.index").write_bytes(b"not an index")
    with caplog.at_level(logging.WARNING):
        resumed, history = fit(sentences, tmp_path)
    assert "Skipping the damaged checkpoint" in caplog.text and "ckpt-2" in caplog.text
    assert "newest intact checkpoint" in caplog.text
    assert history.epoch == [1, 2]
    np.testing.assert_array_equal(resumed.vectors, unbroken.vectors)


def test_a_missing_pointer_file_resumes_from_the_newest_checkpoint(sentences, tmp_path, caplog):
    """Before, the run started again from epoch 0 without a word."""
    fit(sentences, tmp_path, epochs=2)
    os.remove(tmp_path / POINTER_FILE)
    with caplog.at_level(logging.WARNING):
        _, history = fit(sentences, tmp_path, epochs=3)
    assert f"The checkpoint pointer file {tmp_path / POINTER_FILE} is missing" in caplog.text
    assert history.epoch == [2]


def test_no_intact_checkpoint_is_an_error_not_a_new_run(sentences, tmp_path):
    fit(sentences, tmp_path, epochs=2)
    for name in os.listdir(tmp_path):
        if name.endswith(".index"):
            (tmp_path / name).write_bytes(b"garbage")
    with pytest.raises(ValueError, match="None of the checkpoints in .* reads back completely"):
        fit(sentences, tmp_path, epochs=3)


def test_a_finished_run_is_not_trained_again(sentences, tmp_path):
    first, _ = fit(sentences, tmp_path, epochs=2)
    again, history = fit(sentences, tmp_path, epochs=2)
    assert history.epoch == []
    np.testing.assert_array_equal(again.vectors, first.vectors)


def test_a_checkpoint_written_before_the_words_were_kept_resumes_by_whole_epochs(
    sentences, tmp_path
):
    """A run checkpointed as word2vec did before (tables and epochs, no `run.json`, no
    words processed) resumes after its epoch, counting whole epochs' words as then."""
    first, _ = fit(sentences, epochs=1)
    embedding = first.model.embedding
    legacy = tf.train.Checkpoint(
        input_embeddings=embedding.input_embeddings.value,
        output_embeddings=embedding.output_embeddings.value,
        epoch=tf.Variable(1, dtype=tf.int64),
    )
    tf.train.CheckpointManager(legacy, str(tmp_path), max_to_keep=1).save()
    resumed, history = fit(sentences, tmp_path, epochs=2)
    assert history.epoch == [1]
    assert not np.array_equal(resumed.vectors, first.vectors)
