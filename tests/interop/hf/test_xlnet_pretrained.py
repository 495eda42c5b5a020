"""Loading Hugging Face XLNet checkpoints with `xlnet_from_pretrained`: parity with transformers
on a tiny random checkpoint (fixtures/make_xlnet_folder_reference.py), its SentencePiece
tokenizer in XLNet's layout, and the errors a folder that does not fit gives."""

import json
import pathlib
import shutil

import numpy as np
import pytest
import tensorflow as tf
from safetensors.numpy import load_file, save_file

from lmpipe.datasets import SentencePieceTokenizer, TextCorpus
from lmpipe.datasets.examples.packing import pack_segments
from lmpipe.interop.hf import xlnet_from_pretrained
from lmpipe.interop.hf.xlnet import load_xlnet_pretrainer_weights, xlnet_config_from_hf
from lmpipe.models.xlnet_pretrainer import XLNetPretrainer
from lmpipe.pipelines import XLNetPretraining

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
MODEL_FIXTURES = FIXTURES.parents[2] / "models" / "fixtures"
CHECKPOINT = FIXTURES / "xlnet_tiny"
INPUTS = ("token_ids", "segment_ids", "padding_mask")


@pytest.fixture(scope="module")
def reference():
    return dict(np.load(FIXTURES / "xlnet_folder_reference.npz"))


def test_content_stream_matches_transformers(reference):
    model = xlnet_from_pretrained(CHECKPOINT)
    outputs = model({name: reference[name] for name in INPUTS}, training=False)
    real = reference["padding_mask"].astype(bool)
    assert not real.all(), "the fixture batch must contain padding"
    np.testing.assert_allclose(
        np.asarray(outputs["sequence_output"])[real],
        reference["last_hidden_state"][real],
        rtol=0,
        atol=1e-4,
    )


def test_the_two_stream_model_loads_mask_emb_too():
    weights = load_file(str(CHECKPOINT / "model.safetensors"))
    model = xlnet_from_pretrained(CHECKPOINT, two_stream=True, mem_len=4)
    mask = model.get_layer("mask_embedding").embeddings.numpy()
    np.testing.assert_array_equal(mask.reshape(-1), weights["transformer.mask_emb"].reshape(-1))


def test_the_folders_tokenizer_packs_pairs_as_transformers_does(reference):
    tokenizer = SentencePieceTokenizer.from_pretrained(CHECKPOINT)
    assert not tokenizer.lower_case
    assert (tokenizer.sep_id, tokenizer.cls_id, tokenizer.pad_id) == (4, 3, 5)
    first = tokenizer.tokenize(tf.constant(reference["texts"].astype(object)))
    second = tokenizer.tokenize(tf.constant(reference["pairs"].astype(object)))
    seq_len = reference["token_ids"].shape[1]
    packed = pack_segments(tokenizer, [first, second], seq_len, layout="xlnet")
    for name in INPUTS:
        np.testing.assert_array_equal(packed[name].numpy(), reference[name], err_msg=name)


def test_a_sequence_summary_becomes_the_pooler(tmp_path):
    folder = tmp_path / "xlnet"
    shutil.copytree(CHECKPOINT, folder)
    weights = load_file(str(folder / "model.safetensors"))
    rng = np.random.default_rng(0)
    weights["sequence_summary.summary.weight"] = rng.normal(size=(32, 32)).astype("float32")
    weights["sequence_summary.summary.bias"] = rng.normal(size=32).astype("float32")
    save_file(weights, str(folder / "model.safetensors"))
    pooler = xlnet_from_pretrained(folder).get_layer("pooler")
    np.testing.assert_array_equal(
        pooler.kernel.numpy(), weights["sequence_summary.summary.weight"].T
    )
    np.testing.assert_array_equal(pooler.bias.numpy(), weights["sequence_summary.summary.bias"])


@pytest.mark.parametrize(
    "config, message",
    [
        ({"model_type": "bert"}, "config.json: `model_type` must be \"xlnet\", found 'bert'"),
        ({"attn_type": "uni"}, "`attn_type` is 'uni'; lmpipe's XLNet is the bidirectional"),
        ({"same_length": True}, "`same_length` is True"),
        ({"ff_activation": "tanh"}, "unsupported `ff_activation` 'tanh'"),
        ({"d_inner": 48}, "'layer.0.ff.layer_1.weight' has shape \\(64, 32\\), expected \\(48"),
    ],
)
def test_a_config_that_does_not_fit_is_refused_naming_the_field(tmp_path, config, message):
    folder = tmp_path / "xlnet"
    shutil.copytree(CHECKPOINT, folder)
    hf = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**hf, **config}))
    with pytest.raises(ValueError, match=message):
        xlnet_from_pretrained(folder)


def test_a_missing_weight_is_named(tmp_path):
    folder = tmp_path / "xlnet"
    shutil.copytree(CHECKPOINT, folder)
    weights = load_file(str(folder / "model.safetensors"))
    del weights["transformer.layer.1.rel_attn.r_s_bias"]
    save_file(weights, str(folder / "model.safetensors"))
    with pytest.raises(ValueError, match="lacks 1 encoder weight.*'layer.1.rel_attn.r_s_bias'"):
        xlnet_from_pretrained(folder)


def test_the_pretrainer_loads_the_lm_head_and_matches_transformers_with_memory(tmp_path):
    # The two-stream fixture of tests/models/fixtures/make_xlnet_reference.py (HF weights,
    # perm_mask, memory), written as a checkpoint folder and read by the library's loader.
    reference = dict(np.load(MODEL_FIXTURES / "xlnet_reference.npz"))
    prefix = "weights/"
    weights = {k[len(prefix) :]: v for k, v in reference.items() if k.startswith(prefix)}
    save_file(
        {k: np.ascontiguousarray(v) for k, v in weights.items()},
        str(tmp_path / "model.safetensors"),
    )
    config = {
        "model_type": "xlnet",
        "architectures": ["XLNetLMHeadModel"],
        **{"vocab_size": 100, "d_model": 16, "n_layer": 2, "n_head": 2, "d_inner": 32},
        **{"ff_activation": "gelu", "dropout": 0.0, "clamp_len": -1},
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    pretrainer = XLNetPretrainer(
        xlnet_config_from_hf(tmp_path / "config.json"),
        max_predictions=3,
        mem_len=6,
        reuse_len=5,
        batch_size=2,
    )
    assert load_xlnet_pretrainer_weights(pretrainer, tmp_path)
    pretrainer._memory.assign(
        np.concatenate([np.zeros((2, 2, 2, 16), "float32"), reference["memory"]], axis=2)
    )
    pretrainer._memory_mask.assign(np.array([[0, 0, 1, 1, 1, 1]] * 2, "int32"))
    names = ("token_ids", "segment_ids", "padding_mask", "perm_mask", "target_mapping")
    logits = pretrainer({name: reference[name] for name in names})["lm_logits"]
    np.testing.assert_allclose(np.asarray(logits), reference["lm_logits"], atol=1e-5)


def test_xlnet_pretraining_continues_from_the_folder():
    pipe = XLNetPretraining.from_pretrained(CHECKPOINT, seq_len=16, reuse_len=8)
    assert type(pipe.tokenizer) is SentencePieceTokenizer and pipe.config.hidden_dim == 32
    model = pipe.build_model(batch_size=2)
    weights = load_file(str(CHECKPOINT / "model.safetensors"))
    np.testing.assert_array_equal(model.lm_bias.numpy(), weights["lm_loss.bias"])
    documents = [["To be, or not to be.", "That is the question."]] * 4
    history = pipe.fit(
        TextCorpus.from_documents(documents), batch_size=2, epochs=1, steps_per_epoch=2, verbose=0
    )
    assert np.isfinite(history.history["loss"][-1])
    with pytest.raises(ValueError, match="holds a 'albert' checkpoint"):
        XLNetPretraining.from_pretrained(FIXTURES / "albert_tiny")


def test_a_folder_with_tokenizer_json_instead_of_spiece_model(tmp_path):
    # As transformers 5 writes the folder (tests/tokenizers/fixtures/tokenizer_json/xlnet was
    # written from the same spiece.model).
    folder = tmp_path / "xlnet"
    shutil.copytree(CHECKPOINT, folder, ignore=shutil.ignore_patterns("spiece.model"))
    written = FIXTURES.parents[2] / "tokenizers" / "fixtures" / "tokenizer_json" / "xlnet"
    for file in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(written / file, folder / file)
    pipe = XLNetPretraining.from_pretrained(folder, seq_len=16, reuse_len=8)
    original = SentencePieceTokenizer.from_pretrained(CHECKPOINT)
    assert pipe.tokenizer.vocabulary == original.vocabulary
    assert (pipe.tokenizer.lower_case, pipe.tokenizer.keep_accents) == (False, False)
    texts = ["To be, or not to be: that is the question.", "Café ``naïve'' Ångström"]
    assert pipe.tokenizer.tokenize(texts).to_list() == original.tokenize(texts).to_list()


def test_a_classifier_fine_tunes_the_folder_with_xlnets_packing(reference, tmp_path):
    from lmpipe.pipelines import TextClassifier

    seq_len = reference["token_ids"].shape[1]
    pipe = TextClassifier.from_pretrained(CHECKPOINT, num_classes=2, seq_len=seq_len)
    assert pipe.packing_layout == "xlnet"
    assert pipe.encoder_width == json.loads((CHECKPOINT / "config.json").read_text())["d_model"]
    texts = [str(text) for text in reference["texts"]]
    pairs = [str(text) for text in reference["pairs"]]
    features = pipe.encode(tf.constant(texts), tf.constant(pairs))
    for name in INPUTS:  # `A <sep> B <sep> <cls>`: transformers' XLNetTokenizer's batch
        np.testing.assert_array_equal(features[name].numpy(), reference[name], err_msg=name)
    pipe.fit((texts, pairs, [0, 1, 0, 1]), batch_size=2, epochs=1, verbose=0)
    probabilities = pipe.predict(texts, pairs)
    assert probabilities.shape == (4, 2) and np.isfinite(probabilities).all()
    pipe.save(tmp_path / "classifier")
    loaded = TextClassifier.load(tmp_path / "classifier")
    assert loaded.packing_layout == "xlnet"
    np.testing.assert_allclose(loaded.predict(texts, pairs), probabilities, rtol=1e-5)
