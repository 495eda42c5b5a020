"""GPT-2 checkpoints in and out: `gpt2_from_pretrained` against `transformers.GPT2LMHeadModel`
on a tiny random checkpoint (fixtures/make_gpt2_reference.py), `GptPretraining.from_pretrained`
and `save_pretrained`."""

import json
import pathlib
import shutil

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from lmpipe.datasets import BytePairTokenizer, TextCorpus, WordPieceTokenizer
from lmpipe.interop.hf import gpt2_from_pretrained, save_pretrained
from lmpipe.models import GptConfig
from lmpipe.pipelines import GptPretraining

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
CHECKPOINT = FIXTURES / "gpt2_tiny"


@pytest.fixture(scope="module")
def reference():
    return dict(np.load(FIXTURES / "gpt2_reference.npz"))


@pytest.fixture(scope="module")
def model():
    return gpt2_from_pretrained(CHECKPOINT)


def test_logits_equal_gpt2_lm_head_models_with_right_and_left_padding(model, reference):
    assert model.config == GptConfig(
        vocabulary_size=2000, hidden_dim=32, num_layers=2, num_heads=4, intermediate_dim=64,
        max_sequence_length=64, dropout=0.0,
    )  # fmt: skip
    for prefix in ("", "left_"):
        mask = reference[f"{prefix}padding_mask"]
        logits = model.predict(
            {"token_ids": reference[f"{prefix}token_ids"], "padding_mask": mask}, verbose=0
        )
        real = mask.astype(bool)  # padding positions differ: HF attends from them anyway
        np.testing.assert_allclose(
            logits[real], reference[f"{prefix}logits"][real], atol=1e-4, rtol=1e-4
        )


def test_the_folders_tokenizer_gives_transformers_ids_and_generation_its_tokens(reference):
    pipe = GptPretraining.from_pretrained(CHECKPOINT, seq_len=32)
    assert isinstance(pipe.tokenizer, BytePairTokenizer)
    texts = [str(text) for text in reference["texts"]]
    ids = pipe.tokenizer.tokenize(texts).to_tensor(default_value=pipe.tokenizer.pad_id).numpy()
    np.testing.assert_array_equal(ids, reference["token_ids"])
    # Greedy continuations of the prompts, decoded with the key/value cache, are the tokens
    # transformers picks feeding the whole sequence each step. (The pipeline puts
    # <|endoftext|> before a prompt; the reference prompts have none, so call the sampler.)
    from lmpipe.models.samplers import generate

    decoded = generate(
        pipe.model,
        reference["left_token_ids"],
        reference["left_padding_mask"],
        eos_id=2000 + 5,  # never: the reference ran without an end token
        pad_id=pipe.tokenizer.pad_id,
        max_new_tokens=8,
        strategy="greedy",
    )
    np.testing.assert_array_equal(decoded.token_ids.numpy(), reference["greedy_ids"])


def test_a_folder_with_tokenizer_json_instead_of_vocab_json_and_merges_txt(reference, tmp_path):
    # As transformers 5 writes the folder (tests/tokenizers/fixtures/tokenizer_json/gpt2 was
    # written from the same vocab.json and merges.txt).
    folder = tmp_path / "gpt2"
    shutil.copytree(CHECKPOINT, folder, ignore=shutil.ignore_patterns("vocab.json", "merges.txt"))
    written = FIXTURES.parents[2] / "tokenizers" / "fixtures" / "tokenizer_json" / "gpt2"
    for file in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(written / file, folder / file)
    pipe = GptPretraining.from_pretrained(folder, seq_len=32)
    original = BytePairTokenizer.from_pretrained(CHECKPOINT)
    assert pipe.tokenizer.vocabulary == original.vocabulary
    assert pipe.tokenizer.merges == original.merges
    texts = [str(text) for text in reference["texts"]]
    ids = pipe.tokenizer.tokenize(texts).to_tensor(default_value=pipe.tokenizer.pad_id).numpy()
    np.testing.assert_array_equal(ids, reference["token_ids"])


def test_checkpoint_errors_name_the_file_and_the_field_or_weight(tmp_path):
    def copy(name):
        folder = tmp_path / name
        shutil.copytree(CHECKPOINT, folder)
        return folder

    folder = copy("untied")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "tie_word_embeddings": False}))
    with pytest.raises(ValueError, match=r"config.json: `tie_word_embeddings` is False"):
        gpt2_from_pretrained(folder)
    folder = copy("scaled")
    config["scale_attn_by_inverse_layer_idx"] = True
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="scale_attn_by_inverse_layer_idx"):
        gpt2_from_pretrained(folder)
    folder = copy("missing")
    tensors = load_file(folder / "model.safetensors")
    del tensors["transformer.h.1.mlp.c_fc.bias"]
    save_file(tensors, folder / "model.safetensors")
    with pytest.raises(ValueError, match=r"lacks 1 encoder weight.*'h.1.mlp.c_fc.bias'"):
        gpt2_from_pretrained(folder)
    folder = copy("head")
    tensors = load_file(CHECKPOINT / "model.safetensors")
    tensors["lm_head.weight"] = tensors["transformer.wte.weight"] + 1
    save_file(tensors, folder / "model.safetensors")
    with pytest.raises(ValueError, match="lm_head.weight` differs from the token embedding"):
        gpt2_from_pretrained(folder)
    tensors["lm_head.weight"] = tensors["transformer.wte.weight"]  # tied, stored: accepted
    save_file(tensors, folder / "model.safetensors")
    gpt2_from_pretrained(folder)
    folder = copy("bert")
    (folder / "config.json").write_text(json.dumps({"model_type": "bert"}))
    with pytest.raises(ValueError, match=r"holds a 'bert' checkpoint; GptPretraining"):
        GptPretraining.from_pretrained(folder)
    with pytest.raises(ValueError, match='`model_type` must be "gpt2"'):
        gpt2_from_pretrained(folder)


def test_a_folder_written_again_has_transformers_own_weights_and_loads_back(model, tmp_path):
    save_pretrained(tmp_path / "again", model, model.config, BytePairTokenizer.from_pretrained(
        CHECKPOINT
    ))  # fmt: skip
    theirs = load_file(CHECKPOINT / "model.safetensors")
    ours = load_file(tmp_path / "again" / "model.safetensors")
    assert sorted(ours) == sorted(name for name in theirs if not name.endswith(".attn.bias"))
    for name, value in ours.items():
        np.testing.assert_array_equal(value, theirs[name], err_msg=name)
    config = json.loads((tmp_path / "again" / "config.json").read_text())
    assert config["architectures"] == ["GPT2LMHeadModel"] and config["eos_token_id"] == 0
    for file in ("vocab.json", "merges.txt"):
        assert (tmp_path / "again" / file).read_text() == (CHECKPOINT / file).read_text()
    settings = json.loads((tmp_path / "again" / "tokenizer_config.json").read_text())
    assert settings["tokenizer_class"] == "GPT2Tokenizer"
    again = gpt2_from_pretrained(tmp_path / "again")
    ids = {
        "token_ids": np.array([[0, 5, 9, 300]], "int32"),
        "padding_mask": np.ones((1, 4), "int32"),
    }
    np.testing.assert_array_equal(again.predict(ids, verbose=0), model.predict(ids, verbose=0))


def test_a_gpt_of_lmpipe_round_trips_with_its_own_tokenizer(tmp_path):
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "to", "be", "or", "not", "##s"]
    tokenizer = WordPieceTokenizer(words, lower_case=False)
    config = GptConfig.tiny(vocabulary_size=len(words))
    pipe = GptPretraining(tokenizer, config, seq_len=16)
    pipe.model = pipe.build_model()  # what fit trains; its weights are what matters here
    pipe.save_pretrained(tmp_path / "gpt")
    assert (tmp_path / "gpt" / "vocab.txt").is_file()
    again = GptPretraining.from_pretrained(tmp_path / "gpt", seq_len=16)
    assert isinstance(again.tokenizer, WordPieceTokenizer)
    assert again.tokenizer.vocabulary == tokenizer.vocabulary
    ids = {
        "token_ids": np.array([[3, 5, 6, 9]], "int32"),
        "padding_mask": np.ones((1, 4), "int32"),
    }
    np.testing.assert_array_equal(
        again.model.predict(ids, verbose=0), pipe.model.predict(ids, verbose=0)
    )
    assert not again.tokenizer.lower_case


def test_pretraining_continues_from_the_checkpoint(tmp_path):
    pipe = GptPretraining.from_pretrained(CHECKPOINT, seq_len=16)
    corpus = TextCorpus.shakespeare(plays=["hamlet"])
    # With a checkpoint directory, fit builds its model anew: from the folder's weights.
    pipe.fit(corpus, batch_size=4, epochs=1, steps_per_epoch=3, verbose=0,
             checkpoint_dir=str(tmp_path / "run"))  # fmt: skip
    embedding = load_file(CHECKPOINT / "model.safetensors")["transformer.wte.weight"]
    moved = np.abs(pipe.model.token_embedding.embeddings.numpy() - embedding)
    assert 0 < moved.max() < 3e-3  # three AdamW steps at 3e-4 from the checkpoint's 0.2-wide noise
    assert np.isfinite(pipe.model.token_embedding.embeddings.numpy()).all()
