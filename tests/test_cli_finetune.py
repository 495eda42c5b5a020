"""`lmpipe finetune classify|tokens|spans`: the user's files and the demos end to end, and
bad input refused before training."""

import json
import re

import numpy as np
import pytest


def test_finetune_on_the_users_labelled_files_then_predict(tiny_bert, tmp_path, capsys):
    from lmpipe.cli.main import main

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


@pytest.mark.parametrize(
    "examples, width, given, schedule",
    [
        (100, 384, [], (1e-4, 16, 9, "pooled")),  # 7 updates an epoch: 9 epochs make 60
        (300, 384, [], (1e-4, 16, 4, "pooled")),
        (5000, 768, [], (1e-4, 16, 2, "pooled")),  # never fewer than 2 epochs
        (30, 256, [], (1e-4, 16, 10, "pooled")),  # nor more than 10
        (300, 128, [], (5e-4, 16, 4, "mean")),  # a narrow encoder: a larger rate, the mean
        (300, 255, ["--batch-size", "32", "--accumulation-steps", "2"], (5e-4, 32, 10, "mean")),
        (300, 384, ["--steps-per-epoch", "20"], (1e-4, 16, 3, "pooled")),
        (300, 384, ["--pooling", "mean"], (1e-4, 16, 4, "mean")),
        (300, 128, ["--epochs", "1", "--learning-rate", "3e-5"], (3e-5, 16, 1, "mean")),
        (300, 128, ["--pooling", "pooled"], (5e-4, 16, 4, "pooled")),
    ],
)
def test_classify_schedule_without_flags_makes_enough_updates(examples, width, given, schedule):
    from lmpipe.cli.finetune import classify_schedule
    from lmpipe.cli.main import build_parser

    argv = ["finetune", "classify", "--pretrained", "x", "--out", "y", *given]
    arguments = build_parser().parse_args(argv)
    arguments.flags_given = {flag for flag in argv if flag.startswith("--")}
    classify_schedule(arguments, examples, width)
    settings = (arguments.learning_rate, arguments.batch_size, arguments.epochs)
    assert (*settings, arguments.pooling) == schedule


@pytest.mark.parametrize("scratch", [False, True])
def test_finetune_demo_on_the_spam_assassin_corpus(
    tiny_bert, spam_assassin_archive, tmp_path, capsys, scratch
):
    from lmpipe.cli.main import main
    from lmpipe.pipelines import load

    out = tmp_path / "spam"
    command = ["finetune", "classify", "--pretrained", str(tiny_bert), "--out", str(out)]
    command += ["--spam-assassin", spam_assassin_archive, "--limit", "48", "--held-out", "0.01"]
    command += ["--seq-len", "16", "--epochs", "1", "--batch-size", "16", "--no-export"]
    command += ["--learning-rate", "5e-5"]
    # An encoder under 256 wide: the mean of the tokens unless --pooling says otherwise.
    assert main([*command, *(["--from-scratch", "--pooling", "pooled"] if scratch else [])]) == 0
    printed = capsys.readouterr().out
    assert re.search(r"SpamAssassin: 5,9\d\d messages \(1,\d{3} spam; \d+ repeated texts", printed)
    assert "48 examples to train on, 59 to test; classes: ham, spam" in printed
    pooling = "pooled" if scratch else "mean"
    assert f"batch size 16, epochs 1, pooling {pooling} (the encoder is 16 wide" in printed
    assert re.search(r"Test split \(59 examples\): accuracy", printed)
    # Three steps at 5e-5 move a weight by about 1e-4: a fine-tuned encoder stays next to the
    # pretrained one, one started from scratch is a new draw (weights of stddev 0.02).
    pretrained = load(str(tiny_bert)).encoder.get_weights()
    trained = load(str(out / "pipeline"))
    assert trained.options.labels == ("ham", "spam")
    assert trained.options.pooling == trained.model.pooling == pooling
    shifts = [
        float(np.abs(a - b).max())
        for a, b in zip(pretrained, trained.encoder.get_weights(), strict=True)
    ]
    assert (max(shifts) > 0.01) if scratch else (max(shifts) < 0.002)


@pytest.mark.parametrize(
    "options, message",
    [
        (["--validation", "{train}"], "--validation go with --train"),
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
    from lmpipe.cli.main import main

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


def test_finetune_from_a_gpt_run_says_a_classifier_needs_an_encoder(tmp_path):
    import keras

    from lmpipe.cli.main import main
    from lmpipe.datasets import WordPieceTokenizer
    from lmpipe.models import GptConfig
    from lmpipe.pipelines import GptPretraining

    tokenizer = WordPieceTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b"])
    config = GptConfig.tiny(vocabulary_size=7, hidden_dim=8, num_heads=2)
    gpt = GptPretraining(tokenizer, seq_len=8, config=config, seed=0)
    keras.utils.set_random_seed(0)
    gpt.model = gpt.build_model()
    gpt.save(str(tmp_path / "gpt" / "pipeline"))
    (tmp_path / "train.csv").write_text("text,label\n" + "a,spam\nb,ham\n" * 10)
    command = ["finetune", "classify", "--pretrained", str(tmp_path / "gpt")]
    command += ["--train", str(tmp_path / "train.csv"), "--out", str(tmp_path / "run")]
    with pytest.raises(SystemExit) as raised:
        main(command)
    assert str(raised.value) == (
        f"error: --pretrained {tmp_path / 'gpt'} holds a GptPretraining run: TextClassifier "
        "fine-tunes a BERT/ALBERT-family or XLNet encoder; the pretrained pipeline is a "
        "GptPretraining, which has none: pretrain with BertPretraining, AlbertPretraining or "
        "XLNetPretraining (`lmpipe pretrain bert|albert|xlnet`), or start from a Hugging Face "
        "BERT, ALBERT or XLNet folder."
    )
    assert not (tmp_path / "run").exists()


def test_finetune_tokens_on_conll_files_then_predict_and_evaluate(tiny_bert, tmp_path, capsys):
    from lmpipe.cli.main import main

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
    from lmpipe.cli.runs import show_tags

    pairs = [["Sir", "O"], ["Toby", "B-PER"], ["Belch", "I-PER"], ["and", "O"], ["Maria", "B-PER"]]
    assert show_tags("", pairs) == "Sir [Toby Belch]PER and [Maria]PER"
    assert show_tags("", [["Toby", "NNP"], ["sings", "VBZ"]]) == "Toby/NNP sings/VBZ"


@pytest.mark.parametrize(
    "options, message",
    [
        (["--test", "{train}"], "--test go with --train"),
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
    from lmpipe.cli.main import main

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
    from lmpipe.cli.main import main

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
        (["--validation", "{train}"], "--validation go with --train"),
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
    from lmpipe.cli.main import main

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
