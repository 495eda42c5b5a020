"""`lmpipe export RUN FOLDER --format hf`: a run written as a Hugging Face folder."""

import json

import pytest


@pytest.mark.slow  # about 25 s: it fine-tunes, evaluates and writes four folders
def test_a_classifier_fine_tuned_on_the_command_line_exports_as_a_transformers_folder(
    tiny_bert, tmp_path, capsys
):
    from lmpipe.cli.main import main

    rows = [("win money now, free prize", "spam"), ("see you at five for lunch", "ham")] * 6
    (tmp_path / "train.csv").write_text(
        "text,label\n" + "".join(f'"{text}",{label}\n' for text, label in rows)
    )
    out = tmp_path / "run"
    command = ["finetune", "classify", "--pretrained", str(tiny_bert), "--out", str(out)]
    command += ["--train", str(tmp_path / "train.csv"), "--held-out", "0.2", "--seq-len", "16"]
    # Hugging Face's classifiers read the pooler: --pooling pooled (under 256 wide the default
    # is the mean of the tokens, which a transformers folder cannot hold).
    command += ["--epochs", "1", "--batch-size", "4", "--no-export", "--pooling", "pooled"]
    assert main(command) == 0
    # No --learning-rate: the default for an encoder under 256 wide.
    printed = capsys.readouterr().out
    assert (
        "Learning rate 0.0005, batch size 4, epochs 1, pooling pooled (the encoder is 16 wide"
        in printed
    )

    folder = tmp_path / "hf"
    assert main(["export", str(out), str(folder), "--format", "hf"]) == 0
    assert f"Wrote a Hugging Face folder (TextClassifier): {folder}" in capsys.readouterr().out
    config = json.loads((folder / "config.json").read_text())
    assert config["architectures"] == ["BertForSequenceClassification"]
    assert config["num_labels"] == 2
    assert config["id2label"] == {"0": "ham", "1": "spam"}
    assert config["label2id"] == {"ham": 0, "spam": 1}
    names = sorted(path.name for path in folder.iterdir())
    assert names == ["config.json", "model.safetensors", "tokenizer_config.json", "vocab.txt"]

    with pytest.raises(SystemExit, match="is not empty; give a new folder, or --overwrite"):
        main(["export", str(out), str(folder), "--format", "hf"])
    assert main(["export", str(out), str(folder), "--format", "hf", "--overwrite"]) == 0
    with pytest.raises(SystemExit, match="--version and --outputs are for SavedModels"):
        main(["export", str(out), str(tmp_path / "other"), "--format", "hf", "--version", "2"])
    assert not (tmp_path / "other").exists()

    # A pretraining run exports with its heads: tiny_bert is a masked-LM BERT.
    assert main(["export", str(tiny_bert), str(tmp_path / "mlm"), "--format", "hf"]) == 0
    config = json.loads((tmp_path / "mlm" / "config.json").read_text())
    assert config["architectures"] == ["BertForMaskedLM"]
