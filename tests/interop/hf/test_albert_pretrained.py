"""Loading Hugging Face ALBERT checkpoints with `albert_from_pretrained`: parity with
transformers on a tiny random checkpoint (fixtures/make_albert_reference.py), its SentencePiece
tokenizer, and the errors a damaged folder gives."""

import json
import pathlib
import shutil

import numpy as np
import pytest
import tensorflow as tf
from safetensors.numpy import load_file, save_file

from lmpipe.datasets import SentencePieceTokenizer, TextCorpus
from lmpipe.datasets.examples.packing import pack_segments
from lmpipe.interop.hf import albert_from_pretrained
from lmpipe.pipelines import AlbertPretraining, BertPretraining, TextClassifier

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
CHECKPOINT = FIXTURES / "albert_tiny"
INPUTS = ("token_ids", "segment_ids", "padding_mask")


@pytest.fixture(scope="module")
def reference():
    return dict(np.load(FIXTURES / "albert_reference.npz"))


@pytest.fixture(scope="module")
def model():
    return albert_from_pretrained(CHECKPOINT)


def test_outputs_match_transformers(model, reference):
    outputs = model({name: reference[name] for name in INPUTS}, training=False)
    real = reference["padding_mask"].astype(bool)
    assert not real.all(), "the fixture batch must contain padding"
    np.testing.assert_allclose(
        np.asarray(outputs["sequence_output"])[real],
        reference["last_hidden_state"][real],
        rtol=0,
        atol=1e-4,
    )
    np.testing.assert_allclose(
        np.asarray(outputs["pooled_output"]), reference["pooler_output"], rtol=0, atol=1e-4
    )


def test_the_folders_tokenizer_packs_pairs_as_transformers_does(reference):
    tokenizer = SentencePieceTokenizer.from_pretrained(CHECKPOINT)
    assert tokenizer.lower_case and not tokenizer.keep_accents
    first = tokenizer.tokenize(tf.constant(reference["texts"].astype(object)))
    second = tokenizer.tokenize(tf.constant(reference["pairs"].astype(object)))
    packed = pack_segments(tokenizer, [first, second], reference["token_ids"].shape[1])
    for name in INPUTS:
        np.testing.assert_array_equal(packed[name].numpy(), reference[name], err_msg=name)


def test_config_and_shared_layer(model):
    config = json.loads((CHECKPOINT / "config.json").read_text())
    shared = [layer for layer in model.layers if layer.name == "shared_block"]
    assert len(shared) == 1 and config["num_hidden_layers"] == 2
    embedding = model.get_layer("embedding")
    assert embedding.token_embedding.embeddings.shape == (2000, 16)
    assert embedding.projection.kernel.shape == (16, 32)


def test_a_classifier_fine_tunes_from_the_folder():
    pipe = TextClassifier.from_pretrained(CHECKPOINT, 2, seq_len=16)
    assert type(pipe.tokenizer) is SentencePieceTokenizer
    assert pipe.encoder_width == 32  # the hidden size, not the 16-wide factorized embedding
    texts, labels = ["The rest is silence.", "O, woe!"], [0, 1]
    pipe.fit((texts, labels), batch_size=2, epochs=1, steps_per_epoch=1, verbose=0)
    assert len(pipe.classify(texts)) == 2


def copy_checkpoint(tmp_path, config=None, weights=None):
    folder = tmp_path / "albert"
    shutil.copytree(CHECKPOINT, folder)
    if config is not None:
        hf = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**hf, **config}))
    if weights is not None:
        save_file(
            weights(load_file(str(folder / "model.safetensors"))), str(folder / "model.safetensors")
        )
    return folder


@pytest.mark.parametrize(
    "config, message",
    [
        ({"model_type": "bert"}, "config.json: `model_type` must be \"albert\", found 'bert'"),
        ({"num_hidden_groups": 2}, "`num_hidden_groups` is 2; lmpipe's ALBERT shares one layer"),
        ({"inner_group_num": 2}, "`inner_group_num` is 2"),
        ({"architectures": ["BertModel"]}, "`architectures` must name ALBERT models"),
        ({"hidden_act": "quick_gelu"}, "unsupported `hidden_act` 'quick_gelu'"),
        ({"embedding_size": 8}, "'embeddings.word_embeddings.weight' has shape \\(2000, 16\\)"),
    ],
)
def test_a_config_that_does_not_fit_is_refused_naming_the_field(tmp_path, config, message):
    with pytest.raises(ValueError, match=message):
        albert_from_pretrained(copy_checkpoint(tmp_path, config=config))


def test_missing_and_unexpected_weights_are_named(tmp_path):
    def drop_pooler(weights):
        return {k: v for k, v in weights.items() if not k.startswith("albert.pooler.")}

    with pytest.raises(ValueError, match="lacks 2 encoder weight.*'pooler.weight'"):
        albert_from_pretrained(copy_checkpoint(tmp_path / "a", weights=drop_pooler))

    def add_group(weights):
        extra = "albert.encoder.albert_layer_groups.1.albert_layers.0.ffn.bias"
        return {**weights, extra: np.zeros(64, "float32")}

    with pytest.raises(ValueError, match="does not have.*albert_layer_groups.1"):
        albert_from_pretrained(copy_checkpoint(tmp_path / "b", weights=add_group))
    with pytest.raises(ValueError, match="Hugging Face ALBERT checkpoint folder"):
        albert_from_pretrained(tmp_path)


def test_pretraining_continues_from_the_folder_with_its_heads(reference, tmp_path):
    pipe = AlbertPretraining.from_pretrained(CHECKPOINT, seq_len=32, max_predictions=3)
    assert type(pipe.tokenizer) is SentencePieceTokenizer and pipe.config.embedding_dim == 16
    model = pipe.build_model()
    inputs = {name: reference[name] for name in (*INPUTS, "mask_positions")}
    outputs = model(inputs, training=False)
    np.testing.assert_allclose(
        np.asarray(outputs["mlm_logits"]), reference["prediction_logits"], rtol=0, atol=1e-4
    )
    # Hugging Face's SOP label 0 is "in order", lmpipe's 1: the same logits, swapped.
    np.testing.assert_allclose(
        np.asarray(outputs["pair_logits"])[:, ::-1], reference["sop_logits"], rtol=0, atol=1e-4
    )
    pairs = zip(reference["texts"], reference["pairs"], strict=True)
    corpus = TextCorpus.from_documents([[text, pair] for text, pair in pairs])
    history = pipe.fit(corpus, batch_size=2, epochs=1, steps_per_epoch=2, verbose=0)
    assert np.isfinite(history.history["loss"][-1])
    with pytest.raises(ValueError, match="holds a 'albert' checkpoint; BertPretraining"):
        BertPretraining.from_pretrained(CHECKPOINT)
