"""The saved-pipeline folder: a save over an existing one is atomic (killed before any of its
steps, the folder still loads as the old or the new pipeline), and a damaged `pipeline.json`
is an error that names the file."""

import os
import re

import keras
import numpy as np
import pytest

from lmpipe.models.gpt import GptConfig
from lmpipe.pipelines import saved_pipeline
from lmpipe.pipelines.gpt_pretraining import GptPretraining
from lmpipe.pipelines.saved_pipeline import PIPELINE_FILE, SavedPipeline
from lmpipe.tokenizers.wordpiece import WordPieceTokenizer
from tests.kill_steps import Killed, StepKiller, as_written_by, dead_pid, hidden_entries

VOCABULARY = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "to", "be", "or", "not", "."]


def pipeline(seed):
    """A GPT pipeline with a (random, untrained) model: enough to save and load."""
    tokenizer = WordPieceTokenizer(VOCABULARY)
    config = GptConfig.tiny(vocabulary_size=len(VOCABULARY), hidden_dim=8, num_heads=2)
    pipe = GptPretraining(tokenizer, seq_len=8, config=config, seed=seed)
    keras.utils.set_random_seed(seed)
    pipe.model = pipe.build_model()
    pipe.model({"token_ids": np.zeros([1, 8], np.int32), "padding_mask": np.ones([1, 8], np.int32)})
    return pipe


def weights(pipe):
    return [np.asarray(weight) for weight in pipe.model.get_weights()]


def saved_is(directory, expected):
    loaded = GptPretraining.load(directory)
    return loaded.options.seed == expected.options.seed and all(
        np.array_equal(a, b) for a, b in zip(weights(loaded), weights(expected), strict=True)
    )


def test_a_save_killed_at_any_step_leaves_the_old_or_the_new_pipeline(tmp_path, monkeypatch):
    directory = str(tmp_path / "pipeline")
    old, new = pipeline(1), pipeline(2)
    old.save(directory)
    with monkeypatch.context() as patch:
        counter = StepKiller(patch)
        new.save(directory)
        steps = len(counter.steps)
    assert saved_is(directory, new) and hidden_entries(str(tmp_path)) == []
    assert steps == 3  # make the hidden folder, swap it in, remove the old one

    pid = dead_pid()
    for kill_at in range(1, steps + 1):
        old.save(directory)
        with monkeypatch.context() as patch:
            StepKiller(patch, kill_at)
            with pytest.raises(Killed):
                new.save(directory)
        assert saved_is(directory, old) or saved_is(directory, new), kill_at
        as_written_by(str(tmp_path), pid)
        new.save(directory)  # clears what the killed save left
        assert saved_is(directory, new) and hidden_entries(str(tmp_path)) == [], kill_at

    # Killed while writing model.keras: the folder still holds the old pipeline.
    old.save(directory)
    with monkeypatch.context() as patch:

        def killed_while_writing(path, *arguments, **keywords):
            with open(path, "wb") as file:
                file.write(b"PK\x03\x04 half a zip")
            raise Killed(path)

        patch.setattr(new.model, "save", killed_while_writing)
        StepKiller(patch, kill_at=2)  # and dead before the swap
        with pytest.raises(Killed):
            new.save(directory)
    assert saved_is(directory, old)
    assert sorted(os.listdir(directory)) == ["model.keras", PIPELINE_FILE, "tokenizer"]


def test_saving_over_a_file_is_refused(tmp_path):
    (tmp_path / "pipeline").write_text("not a folder")
    with pytest.raises(ValueError, match="exists and is not a directory"):
        pipeline(1).save(str(tmp_path / "pipeline"))


@pytest.mark.parametrize(
    "content, message",
    [
        (
            b'{"pipeline": "GptPretraining",\n "seed": 1,,}',
            r"pipeline.json is not valid JSON \(line 2",
        ),
        (b"\xff\xfe{}", "pipeline.json is not UTF-8"),
        (b'["GptPretraining"]', "pipeline.json must hold a JSON object"),
    ],
)
def test_a_damaged_pipeline_json_is_an_error_naming_the_file(tmp_path, content, message):
    (tmp_path / PIPELINE_FILE).write_bytes(content)
    with pytest.raises(ValueError, match=message):
        SavedPipeline(str(tmp_path))
    with pytest.raises(ValueError, match=re.escape(str(tmp_path))):
        saved_pipeline.read_description(str(tmp_path))


def test_a_truncated_or_missing_model_keras_is_named_damaged_not_not_found(tmp_path):
    pipeline(1).save(str(tmp_path / "pipeline"))
    path = tmp_path / "pipeline" / "model.keras"
    size = path.stat().st_size
    for cut in (size // 2, 10):
        with open(path, "r+b") as file:
            file.truncate(cut)
        with pytest.raises(ValueError) as raised:
            GptPretraining.load(str(tmp_path / "pipeline"))
        assert str(raised.value) == (
            f"{path} is damaged (File is not a zip file): it is not a complete Keras archive "
            "(a save cut short, or a copy truncated). Save the pipeline again, or restore the "
            "file from a copy."
        )
    path.unlink()
    with pytest.raises(ValueError, match=f"{re.escape(str(path))} is missing"):
        GptPretraining.load(str(tmp_path / "pipeline"))
