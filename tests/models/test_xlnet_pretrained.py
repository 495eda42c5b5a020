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

from lmpipe.datasets import SentencePieceTokenizer
from lmpipe.datasets.packing import pack_segments
from lmpipe.models import xlnet_from_pretrained

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
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
