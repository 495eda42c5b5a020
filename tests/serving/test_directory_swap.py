"""Replacing a directory atomically, and clearing what a killed writer left: the writer is
killed before each of its file-system steps in turn, and the path must hold the complete old
or the complete new directory at every instant; a new export or save clears the leftovers."""

import os
import time

import keras
import numpy as np
import pytest
import tensorflow as tf

from lmpipe.datasets import WordPieceTokenizer
from lmpipe.serving import directory_swap, run_tf1_loader, versions
from lmpipe.serving.text_export import export_text_function, saveable_variables
from tests.kill_steps import (
    Killed,
    StepKiller,
    as_written_by,
    dead_pid,
    hidden_entries,
    swap_works,
    tree,
)

OLD = {"data": b"old", "sub/part": b"old part"}
NEW = {"data": b"new", "sub/part": b"new part", "sub/extra": b"only in the new one"}


def write(directory, files):
    for name, content in files.items():
        path = os.path.join(directory, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as file:
            file.write(content)


def replace_with_new(parent, target):
    """What a saver does: clear the leftovers, write the new directory, swap it in."""
    directory_swap.remove_leftovers(parent)
    with directory_swap.temporary_directory(parent) as temporary:
        write(temporary, NEW)
        directory_swap.replace_directory(temporary, target)


@pytest.fixture
def swapping_file_system(tmp_path):
    if not swap_works(str(tmp_path)):
        pytest.skip("this file system cannot swap two directories atomically")


@pytest.mark.usefixtures("swapping_file_system")
def test_replacing_a_directory_leaves_the_old_or_the_new_one_at_every_step(tmp_path, monkeypatch):
    parent, target = str(tmp_path / "runs"), str(tmp_path / "runs" / "pipeline")
    with monkeypatch.context() as patch:
        os.makedirs(target)
        write(target, OLD)
        counter = StepKiller(patch)
        replace_with_new(parent, target)
        steps = len(counter.steps)
    assert tree(target) == NEW and hidden_entries(parent) == []
    assert steps == 3  # mkdir, swap, remove the old one

    pid = dead_pid()
    for kill_at in range(1, steps + 1):
        directory_swap._remove(target)
        write(target, OLD)
        seen = []
        with monkeypatch.context() as patch:
            StepKiller(patch, kill_at, after_step=lambda name, seen=seen: seen.append(tree(target)))
            with pytest.raises(Killed):
                replace_with_new(parent, target)
        assert all(state in (OLD, NEW) for state in seen), kill_at
        assert tree(target) in (OLD, NEW), kill_at
        # The next writer clears the dead one's leftovers and leaves its own result.
        as_written_by(parent, pid)
        replace_with_new(parent, target)
        assert tree(target) == NEW and hidden_entries(parent) == [], kill_at


def test_without_swap_a_kill_between_the_renames_is_undone_by_the_next_writer(
    tmp_path, monkeypatch
):
    parent, target = str(tmp_path), str(tmp_path / "7")
    with monkeypatch.context() as patch:
        os.makedirs(target)
        write(target, OLD)
        counter = StepKiller(patch, swap=False)
        replace_with_new(parent, target)
        steps = len(counter.steps)
    assert tree(target) == NEW and hidden_entries(parent) == []
    assert steps == 5  # mkdir, failed swap, rename the old aside, rename the new in, remove

    pid = dead_pid()
    for kill_at in range(1, steps + 1):
        directory_swap._remove(target)
        write(target, OLD)
        with monkeypatch.context() as patch:
            StepKiller(patch, kill_at, swap=False)
            with pytest.raises(Killed):
                replace_with_new(parent, target)
        if kill_at == 4:  # between the renames: the old directory waits under a hidden name
            assert tree(target) is None
            [old] = [name for name in hidden_entries(parent) if name.startswith(".old-")]
            assert old.endswith("-7") and tree(os.path.join(parent, old)) == OLD
        else:
            assert tree(target) in (OLD, NEW), kill_at
        as_written_by(parent, pid)
        directory_swap.remove_leftovers(parent)
        assert tree(target) in (OLD, NEW) and hidden_entries(parent) == [], kill_at


def test_only_the_leftovers_of_writers_that_are_gone_are_removed(tmp_path):
    parent = str(tmp_path)

    def make(name, age=0.0):
        os.mkdir(os.path.join(parent, name))
        if age:
            stamp = time.time() - age
            os.utime(os.path.join(parent, name), (stamp, stamp))
        return name

    here = directory_swap._HOST
    running = make(directory_swap.hidden_name(directory_swap.TEMPORARY_PREFIX))
    dead = make(directory_swap.hidden_name(directory_swap.TEMPORARY_PREFIX, pid=dead_pid()))
    elsewhere = f".tmp-lmpipe-12-otherhost-{'0' * 32}"
    recent_elsewhere = make(elsewhere)
    old_elsewhere = make(elsewhere.replace("otherhost", "farhost"), age=2 * 24 * 3600)
    restorable = make(f".old-lmpipe-{dead_pid()}-{here}-{'1' * 32}-3")
    superseded = make(f".old-lmpipe-{dead_pid()}-{here}-{'2' * 32}-4")
    make("4")
    unrelated = make(".tmp-other-tool")

    directory_swap.remove_leftovers(parent)
    left = set(os.listdir(parent))
    assert {running, recent_elsewhere, unrelated, "3", "4"} == left
    assert not {dead, old_elsewhere, restorable, superseded} & left


class Scorer(tf.Module):
    """A text-in export small enough to write many times."""

    def __init__(self, scale):
        super().__init__()
        self.tokenizer = WordPieceTokenizer(
            ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat"]
        )
        self.embedding = keras.layers.Embedding(7, 2)
        self.embedding.build([None])
        self.embedding.embeddings.assign(np.full([7, 2], scale, np.float32))
        self.model_variables = saveable_variables(self.embedding.variables)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)], jit_compile=False)
    def serve(self, text):
        ids = self.tokenizer.tokenize(text).to_tensor()  # [batch, pieces]
        return {"score": tf.reduce_sum(self.embedding(ids), axis=[1, 2])}


def files_of(version_dir):
    names = tree(version_dir)
    return None if names is None else sorted(names)


@pytest.mark.usefixtures("swapping_file_system")
def test_export_overwrite_killed_at_any_step_leaves_a_servable_version(tmp_path, monkeypatch):
    base_dir, version_dir = str(tmp_path / "model"), str(tmp_path / "model" / "1")
    old, new = Scorer(1.0), Scorer(2.0)
    export_text_function(base_dir, old, old.serve)
    old_tree = tree(version_dir)
    with monkeypatch.context() as patch:
        counter = StepKiller(patch)
        export_text_function(base_dir, new, new.serve, version=1, overwrite=True)
        steps = len(counter.steps)
    new_files = files_of(version_dir)
    assert new_files == sorted(old_tree) and tree(version_dir) != old_tree
    assert steps == 3  # make the hidden directory, swap it in, remove the old version

    pid = dead_pid()
    for kill_at in range(1, steps + 1):
        versions.publish(_copy_of(old_tree, base_dir), base_dir, 1, overwrite=True)
        seen = []

        def check(name, seen=seen):
            seen.append(tree(version_dir) == old_tree or files_of(version_dir) == new_files)

        with monkeypatch.context() as patch:
            StepKiller(patch, kill_at, after_step=check)
            with pytest.raises(Killed):
                export_text_function(base_dir, new, new.serve, version=1, overwrite=True)
        assert all(seen), kill_at
        # What TF Serving sees: version 1, complete, old or new.
        assert versions.model_versions(base_dir) == {1: "1"}, kill_at
        assert tree(version_dir) == old_tree or files_of(version_dir) == new_files, kill_at
        as_written_by(base_dir, pid)
        versions.remove_leftovers(base_dir)
        assert os.listdir(base_dir) == ["1"], kill_at

    # The last state, after a killed export, loads as TF Serving loads it.
    score = run_tf1_loader(version_dir, "serving_default", {"text": np.array([b"the cat"])})
    assert score["score"].tolist() in ([4.0], [8.0])


def _copy_of(files, base_dir):
    with directory_swap.temporary_directory(base_dir) as temporary:
        write(temporary, files)
    return temporary
