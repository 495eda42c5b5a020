"""Every path a command line names is checked right after it is parsed: a missing, unreadable
or wrong kind of file or folder is a one-line error naming the flag and the path, before
TensorFlow is imported and any data is read."""

import json
import os
import subprocess
import sys
import time

import pytest

# Run in a fresh process: main() as the `lmpipe` command runs it (argv from sys.argv), once
# per command line, each one's error printed; then whether TensorFlow was ever imported.
SCRIPT = """
import json, sys
from lmpipe.cli.main import main
for argv in json.loads(sys.argv[1]):
    sys.argv = ["lmpipe", *argv]
    try:
        main()
        print("no error")
    except SystemExit as exit:
        print(exit.code)
print("tensorflow imported:", "tensorflow" in sys.modules)
"""


@pytest.fixture
def paths(tmp_path):
    """Files and folders of each kind the flags name, in `tmp_path`."""
    (tmp_path / "file.txt").write_text("to be or not to be .\n")
    (tmp_path / "empty").mkdir()
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text("{}")
    (tmp_path / "run" / "pipeline").mkdir(parents=True)
    (tmp_path / "run" / "pipeline" / "pipeline.json").write_text("{}")
    (tmp_path / "gpt2").mkdir()
    (tmp_path / "gpt2" / "vocab.json").write_text("{}")
    return tmp_path


def command_lines(p):
    """`(argv, error)` pairs: every path-like flag of every verb, each wrong in one way."""
    file, empty, hf, run = p / "file.txt", p / "empty", p / "hf", p / "run"
    out = ["--out", str(p / "out")]
    finetune = ["finetune", "classify", "--pretrained", str(hf), *out]
    return [
        (
            ["pretrain", "bert", "--corpus", "missing.txt", *out],
            "error: --corpus 'missing.txt': no file matches it",
        ),
        (
            ["pretrain", "bert", "--corpus", str(p / "*.md"), *out],
            f"error: --corpus '{p / '*.md'}': no file matches it",
        ),
        (
            ["pretrain", "albert", "--corpus", str(empty), *out],
            f"error: --corpus '{empty}': is a folder; the corpus is files (give a glob such as "
            "DIR/*.txt)",
        ),
        (
            ["pretrain", "word2vec", "--corpus", str(p / "*"), *out],
            f"error: --corpus '{p / '*'}': matches {empty}, a folder; the corpus is files "
            "(give a glob such as DIR/*.txt)",
        ),
        (
            ["pretrain", "gpt", "--pretrained", str(p / "no-folder"), *out],
            f"error: --pretrained {p / 'no-folder'}: no such folder",
        ),
        (
            ["pretrain", "xlnet", "--pretrained", str(empty), *out],
            f"error: --pretrained {empty}: is not a Hugging Face checkpoint: it has no config.json",
        ),
        (
            ["pretrain", "bert", "--pretrained", str(file), *out],
            f"error: --pretrained {file}: is a file; give a Hugging Face checkpoint (a folder)",
        ),
        (
            ["pretrain", "bert", "--vocab", str(p / "vocab.txt"), *out],
            f"error: --vocab {p / 'vocab.txt'}: no such file",
        ),
        (
            ["pretrain", "gpt", "--vocab", str(p / "gpt2" / "vocab.json"), *out],
            f"error: --vocab {p / 'gpt2' / 'vocab.json'}: GPT-2's BPE needs merges.txt beside "
            f"it: no {p / 'gpt2' / 'merges.txt'}",
        ),
        (
            ["pretrain", "elmo", "--out", str(file / "run")],
            f"error: --out {file / 'run'}: {file} is a file, so no folder can be made under it",
        ),
        (
            ["pretrain", "bert", "--out", str(file)],
            f"error: --out {file}: is a file; give a folder",
        ),
        (
            ["pretrain", "bert", *out, "--export-dir", str(file / "a" / "b")],
            f"error: --export-dir {file / 'a' / 'b'}: {file} is a file, so no folder can be "
            "made under it",
        ),
        (
            ["finetune", "tokens", "--pretrained", str(p / "no-run"), *out],
            f"error: --pretrained {p / 'no-run'}: no such folder",
        ),
        (
            ["finetune", "spans", "--pretrained", str(empty), *out],
            f"error: --pretrained {empty}: is not a saved pipeline, the --out of a pretraining "
            "run or a Hugging Face checkpoint: it has no pipeline.json or "
            "pipeline/pipeline.json or config.json",
        ),
        (
            [*finetune, "--train", str(p / "train.csv")],
            f"error: --train {p / 'train.csv'}: no such file",
        ),
        (
            ["finetune", "tokens", "--pretrained", str(run), *out, "--train", str(empty)],
            f"error: --train {empty}: is a folder, not a file",
        ),
        (
            [*finetune, "--train", str(file), "--validation", str(p / "valid.csv")],
            f"error: --validation {p / 'valid.csv'}: no such file",
        ),
        (
            [*finetune, "--train", str(file), "--test", str(p / "test.csv")],
            f"error: --test {p / 'test.csv'}: no such file",
        ),
        (
            [*finetune, "--spam-assassin", str(p / "spam.tgz")],
            f"error: --spam-assassin {p / 'spam.tgz'}: no such file or folder",
        ),
        (
            ["train", "translation", "--pairs", str(file), str(p / "b.tsv"), *out],
            f"error: --pairs {p / 'b.tsv'}: no such file",
        ),
        (
            ["export", str(run), str(file / "serving")],
            f"error: base_dir {file / 'serving'}: {file} is a file, so no folder can be made "
            "under it",
        ),
        (
            ["export", str(empty), str(p / "serving")],
            f"error: {empty} is neither a saved pipeline (no pipeline.json) nor a run directory "
            "holding one in pipeline/; save one with `lmpipe pretrain` or pipe.save()",
        ),
        (
            ["predict", str(run), "Who?", "--context", f"@{p / 'scene.txt'}"],
            f"error: --context @{p / 'scene.txt'}: no such file",
        ),
        (
            ["evaluate", str(run), "--labelled", str(p / "test.csv")],
            f"error: --labelled {p / 'test.csv'}: no such file",
        ),
        (
            ["evaluate", str(run), "--corpus", str(p / "*.jsonl")],
            f"error: --corpus '{p / '*.jsonl'}': no file matches it",
        ),
        (
            ["evaluate", str(run), "--pairs", str(p / "pairs.tsv")],
            f"error: --pairs {p / 'pairs.tsv'}: no such file",
        ),
    ]


def test_every_path_flag_is_refused_in_one_line_before_tensorflow_is_imported(paths):
    cases = command_lines(paths)
    start = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, json.dumps([argv for argv, _ in cases])],
        capture_output=True,
        text=True,
        timeout=120,
    )
    seconds = time.perf_counter() - start
    assert result.returncode == 0, result.stderr
    printed = result.stdout.splitlines()
    assert printed[-1] == "tensorflow imported: False"
    assert printed[:-1] == [error for _, error in cases]
    # 26 command lines in one interpreter: each far below the seconds TensorFlow's import takes.
    assert seconds < 30, seconds
    assert not (paths / "out").exists()


def test_the_command_refuses_a_missing_corpus_in_one_line(tmp_path):
    command = [sys.executable, "-m", "lmpipe.cli", "pretrain", "bert", "--corpus", "missing.txt"]
    result = subprocess.run(
        [*command, "--out", str(tmp_path / "x")], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 1
    assert result.stderr == "error: --corpus 'missing.txt': no file matches it\n"
    assert not (tmp_path / "x").exists()


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root reads every file")
def test_an_unreadable_file_is_refused_naming_the_flag(paths):
    from lmpipe.cli.main import main

    train = paths / "train.csv"
    train.write_text("text,label\n")
    train.chmod(0)
    with pytest.raises(SystemExit, match=r"--train .*train\.csv: cannot be read \(Permission"):
        main(
            [
                "finetune",
                "classify",
                "--pretrained",
                str(paths / "hf"),
                "--train",
                str(train),
                "--out",
                str(paths / "out"),
            ]
        )
