"""SavedModel export for TF Serving, checked along the server's own loading path.

One export of a tiny BERT with a small real WordPiece vocabulary (trained on Hamlet) is shared
by the module, and one fresh process loads it with the TF1 loader as TF Serving does; the
layout tests use an even smaller encoder.
"""

import json
import os
import pathlib
import re

import keras
import numpy as np
import pytest
import tensorflow as tf

from lmpipe.datasets import TextCorpus, WordPieceTokenizer
from lmpipe.models import BertConfig, bert
from lmpipe.serving import (
    RestRequestError,
    ServingError,
    ServingProcess,
    export_saved_model,
    outputs_to_rest,
    read_signature_defs,
    read_warmup_requests,
    replay_warmup,
    rest_to_inputs,
    run_tf1_loader,
    truncate_longest_first,
    versions,
)
from lmpipe.serving.emulator.batching import batched_outputs

SEQ_LEN = 16
TEXTS = [
    "To be, or not to be, that is the question:",
    "",
    "Whether 'tis nobler in the mind to suffer the slings and arrows of outrageous fortune, "
    "or to take arms against a sea of troubles",
    "Ophélie, Horatio!",
]
PAIRS = [
    "The rest is silence.",
    "Something is rotten in the state of Denmark, and it is not the cheese.",
    "",
    "",
]
SERVING_GUIDE = pathlib.Path(__file__).resolve().parents[2] / "docs" / "serving.md"


@pytest.fixture(scope="module")
def tokenizer():
    """A real WordPiece vocabulary of 500 tokens learned from 300 lines of Hamlet."""
    corpus = TextCorpus.shakespeare(plays=["hamlet"])
    lines = [sentence for document in corpus.iter_documents() for sentence in document][:300]
    return WordPieceTokenizer.train(lines, vocab_size=500)


@pytest.fixture(scope="module")
def encoder(tokenizer):
    keras.utils.set_random_seed(1)
    return bert(BertConfig.tiny(vocabulary_size=tokenizer.vocabulary_size))


@pytest.fixture(scope="module")
def export_dir(tmp_path_factory, encoder, tokenizer):
    base_dir = tmp_path_factory.mktemp("serving") / "bert"
    return export_saved_model(base_dir, encoder, tokenizer, seq_len=SEQ_LEN)


@pytest.fixture(scope="module")
def server(export_dir):
    """The export loaded in a fresh process as TF Serving loads it."""
    with ServingProcess(export_dir) as process:
        yield process


def small_encoder(vocabulary_size):
    return bert(
        BertConfig.tiny(
            vocabulary_size=vocabulary_size,
            hidden_dim=8,
            num_layers=1,
            num_heads=2,
            intermediate_dim=16,
            max_sequence_length=SEQ_LEN,
        )
    )


def strings(texts):
    return np.array([text.encode("utf-8") for text in texts], dtype=object)


def reference_pack(tokenizer, texts, pairs=None):
    """`[CLS] A [SEP] (B [SEP])` and padding in Python, cutting as BERT's truncate_seq_pair."""
    first = tokenizer.tokenize(texts).to_list()
    second = tokenizer.tokenize(pairs).to_list() if pairs is not None else [None] * len(texts)
    rows = {"token_ids": [], "segment_ids": [], "padding_mask": []}
    for a, b in zip(first, second, strict=True):
        if b is None:
            a = a[: SEQ_LEN - 2]
            ids = [tokenizer.cls_id, *a, tokenizer.sep_id]
            segments = [0] * len(ids)
        else:
            a, b = list(a), list(b)
            while len(a) + len(b) > SEQ_LEN - 3:
                (a if len(a) > len(b) else b).pop()
            ids = [tokenizer.cls_id, *a, tokenizer.sep_id, *b, tokenizer.sep_id]
            segments = [0] * (len(a) + 2) + [1] * (len(b) + 1)
        padding = SEQ_LEN - len(ids)
        rows["token_ids"].append(ids + [tokenizer.pad_id] * padding)
        rows["segment_ids"].append(segments + [0] * padding)
        rows["padding_mask"].append([1] * len(ids) + [0] * padding)
    return {name: np.array(values, np.int32) for name, values in rows.items()}


def keras_outputs(encoder, features):
    outputs = encoder({name: tf.constant(value) for name, value in features.items()})
    return {name: np.asarray(value, np.float32) for name, value in outputs.items()}


def text_outputs(encoder, features):
    """What the text signatures serve for `features`: the model's outputs, per-position ones
    (`sequence_output`) zero at padding."""
    outputs = keras_outputs(encoder, features)
    mask = np.asarray(features["padding_mask"], np.float32)
    return {
        name: value * mask[..., None] if value.ndim == 3 else value
        for name, value in outputs.items()
    }


def assert_outputs_equal(actual, expected, atol=1e-5):
    assert set(actual) == set(expected)
    for name in expected:
        assert actual[name].dtype == np.float32, name
        np.testing.assert_allclose(actual[name], expected[name], atol=atol, rtol=0, err_msg=name)


# bfloat16 keeps 8 significant bits: one unit in the last place is 2**-7 relative to the
# value's binade. Kernels that round in another order (oneDNN on AVX-512 machines, Grappler's
# fusions in a SavedModel session) move results by an ulp or two, so bfloat16 outputs are
# compared at that precision, relative to each output's scale.
BFLOAT16_ULP = 2.0**-7


def assert_outputs_close_in_bfloat16(actual, expected, ulps=4):
    assert set(actual) == set(expected)
    for name in expected:
        assert actual[name].dtype == np.float32, name
        scale = float(np.max(np.abs(expected[name])))
        np.testing.assert_allclose(
            actual[name],
            expected[name],
            rtol=ulps * BFLOAT16_ULP,
            atol=ulps * BFLOAT16_ULP * scale,
            err_msg=name,
        )


# ---------------------------------------------------------------------------- layout


def test_versions_are_integer_directories_written_atomically(tmp_path, tokenizer):
    base_dir = tmp_path / "bert"
    model = small_encoder(tokenizer.vocabulary_size)
    first = export_saved_model(base_dir, model, tokenizer, SEQ_LEN, pairs=False, warmup=False)
    second = export_saved_model(base_dir, model, tokenizer, SEQ_LEN, pairs=False, warmup=False)
    assert (first, second) == (str(base_dir / "1"), str(base_dir / "2"))
    assert sorted(os.listdir(base_dir)) == ["1", "2"]  # no temporary directory left behind
    assert (base_dir / "2" / "saved_model.pb").is_file()

    with pytest.raises(ValueError, match="overwrite"):
        export_saved_model(base_dir, model, tokenizer, SEQ_LEN, version=2)
    assert sorted(os.listdir(base_dir)) == ["1", "2"]

    (base_dir / "2" / "old-marker").write_text("the replaced export")
    replaced = export_saved_model(
        base_dir, model, tokenizer, SEQ_LEN, version=2, overwrite=True, warmup=False
    )
    assert replaced == str(base_dir / "2")
    assert sorted(os.listdir(base_dir)) == ["1", "2"]
    assert not (base_dir / "2" / "old-marker").exists()
    assert "serve_text_pair" in read_signature_defs(replaced)  # the new export, pairs=True


def test_next_version_counts_only_what_tf_serving_sees_as_versions(tmp_path):
    for name in ["3", "10", ".tmp-lmpipe-0123", "7b", "latest"]:
        (tmp_path / name).mkdir()
    (tmp_path / "12").write_text("a file, not a version")
    assert versions.model_versions(tmp_path) == {3: "3", 10: "10"}
    assert versions.next_version(tmp_path) == 11
    assert versions.next_version(tmp_path / "missing") == 1


def test_failed_export_leaves_no_directory(tmp_path, tokenizer):
    hidden = tf.Variable(2.0)

    def untracked(features):  # its variable is not in `model.variables`: saving fails
        return {"scores": hidden * tf.cast(features["padding_mask"], tf.float32)}

    with pytest.raises((ValueError, AssertionError), match="untracked"):
        export_saved_model(tmp_path / "bert", untracked, tokenizer, SEQ_LEN)
    assert os.listdir(tmp_path / "bert") == []


@pytest.mark.parametrize(
    "arguments, message",
    [
        (dict(seq_len=2), "seq_len"),
        (dict(version=-1), "version"),
        (dict(version="3"), "version"),
        (dict(outputs={"bad name": "pooled_output"}), "outputs"),
        (dict(outputs=["missing"]), "missing"),
        (dict(warmup="some text"), "warmup"),
    ],
)
def test_bad_arguments_are_named(tmp_path, tokenizer, arguments, message):
    model = small_encoder(tokenizer.vocabulary_size)
    arguments = {"seq_len": SEQ_LEN, **arguments}
    with pytest.raises(ValueError, match=message):
        export_saved_model(tmp_path / "bert", model, tokenizer, **arguments)


def test_model_too_short_for_seq_len_fails_before_writing(tmp_path, tokenizer):
    model = small_encoder(tokenizer.vocabulary_size)  # max_sequence_length=SEQ_LEN
    with pytest.raises(ValueError, match="seq_len=32"):
        export_saved_model(tmp_path / "bert", model, tokenizer, seq_len=32)
    assert not (tmp_path / "bert").exists() or os.listdir(tmp_path / "bert") == []


def test_integer_outputs_are_refused(tmp_path, tokenizer):
    model = small_encoder(tokenizer.vocabulary_size)
    outputs = {"best": lambda out: keras.ops.argmax(out["pooled_output"], axis=-1)}
    with pytest.raises(ValueError, match="float32"):
        export_saved_model(tmp_path / "bert", model, tokenizer, SEQ_LEN, outputs=outputs)


# ---------------------------------------------------------------------------- the SavedModel


def test_signatures_have_exact_names_dtypes_and_float32_outputs(export_dir):
    signatures = read_signature_defs(export_dir)
    assert set(signatures) == {"serving_default", "serve_text", "serve_text_pair"}

    def inputs(name):
        return {
            key: (tf.as_dtype(info.dtype).name, [dim.size for dim in info.tensor_shape.dim])
            for key, info in signatures[name].inputs.items()
        }

    assert inputs("serving_default") == {
        "token_ids": ("int32", [-1, -1]),
        "segment_ids": ("int32", [-1, -1]),
        "padding_mask": ("int32", [-1, -1]),
    }
    assert inputs("serve_text") == {"text": ("string", [-1])}
    assert inputs("serve_text_pair") == {"text": ("string", [-1]), "text_pair": ("string", [-1])}
    for signature in signatures.values():
        assert signature.method_name == "tensorflow/serving/predict"
        assert set(signature.outputs) == {"sequence_output", "pooled_output"}
        assert {tf.as_dtype(info.dtype) for info in signature.outputs.values()} == {tf.float32}
    # Text signatures pad to seq_len: fixed output shapes whatever the batch holds.
    sequence = signatures["serve_text"].outputs["sequence_output"].tensor_shape.dim
    assert [dim.size for dim in sequence] == [-1, SEQ_LEN, 128]


def test_saved_model_has_only_the_serve_tag_and_no_xla(export_dir):
    from tensorflow.core.protobuf import saved_model_pb2

    saved_model = saved_model_pb2.SavedModel()
    saved_model.ParseFromString(pathlib.Path(export_dir, "saved_model.pb").read_bytes())
    assert [list(graph.meta_info_def.tags) for graph in saved_model.meta_graphs] == [["serve"]]
    graph = saved_model.meta_graphs[0].graph_def
    nodes = list(graph.node) + [node for f in graph.library.function for node in f.node_def]
    attrs = [dict(node.attr) for node in nodes]
    attrs += [dict(f.attr) for f in graph.library.function]
    compiled = [a for a in attrs if "_XlaMustCompile" in a and a["_XlaMustCompile"].b]
    assert compiled == []
    assert len(graph.library.function) > 0  # the check looked into the functions


def test_vocabulary_is_an_asset(export_dir, tokenizer):
    from tensorflow.core.protobuf import saved_model_pb2

    saved_model = saved_model_pb2.SavedModel()
    saved_model.ParseFromString(pathlib.Path(export_dir, "saved_model.pb").read_bytes())
    assets = saved_model.meta_graphs[0].asset_file_def
    assert sorted(asset.filename for asset in assets) == ["tokenizer.json", "vocab.txt"]
    vocabulary = pathlib.Path(export_dir, "assets", "vocab.txt").read_text("utf-8").splitlines()
    assert vocabulary == list(tokenizer.vocabulary)
    config = json.loads(pathlib.Path(export_dir, "assets", "tokenizer.json").read_text("utf-8"))
    assert config["vocabulary_size"] == tokenizer.vocabulary_size


def test_truncate_longest_first_is_berts_truncate_seq_pair():
    cases = [(a, b, m) for a in range(7) for b in range(7) for m in range(11)]
    for max_tokens in range(11):
        rows = [(a, b) for a, b, m in cases if m == max_tokens]
        first = tf.ragged.constant([list(range(100, 100 + a)) for a, _ in rows], tf.int32)
        second = tf.ragged.constant([list(range(200, 200 + b)) for _, b in rows], tf.int32)
        first, second = truncate_longest_first(first, second, max_tokens)
        for (a, b), got_a, got_b in zip(rows, first.to_list(), second.to_list(), strict=True):
            want_a, want_b = list(range(100, 100 + a)), list(range(200, 200 + b))
            while len(want_a) + len(want_b) > max_tokens:
                (want_a if len(want_a) > len(want_b) else want_b).pop()
            assert (got_a, got_b) == (want_a, want_b), (a, b, max_tokens)


# ---------------------------------------------------------------------------- TF Serving's path


def test_serving_process_imports_no_lmpipe(server):
    assert "tensorflow" in server.modules and "tensorflow_text" in server.modules
    assert not [name for name in server.modules if name.startswith("lmpipe")]


def test_serving_default_equals_keras_model(server, encoder, tokenizer):
    features = reference_pack(tokenizer, TEXTS)
    assert_outputs_equal(
        server.predict("serving_default", features), keras_outputs(encoder, features)
    )
    # Shorter sequences than seq_len are served too (the inputs are [batch, length]).
    short = {name: value[:, :9] for name, value in reference_pack(tokenizer, TEXTS[:2]).items()}
    assert_outputs_equal(server.predict("serving_default", short), keras_outputs(encoder, short))


def test_serve_text_equals_in_process_tokenizer_and_packing(server, encoder, tokenizer):
    outputs = server.predict("serve_text", {"text": strings(TEXTS)})
    assert_outputs_equal(outputs, text_outputs(encoder, reference_pack(tokenizer, TEXTS)))


def test_serve_text_pair_cuts_the_longer_side_first(server, encoder, tokenizer):
    outputs = server.predict(
        "serve_text_pair", {"text": strings(TEXTS), "text_pair": strings(PAIRS)}
    )
    expected = reference_pack(tokenizer, TEXTS, PAIRS)
    assert expected["padding_mask"][1].sum() == SEQ_LEN  # the cut example: "" + a long pair
    assert_outputs_equal(outputs, text_outputs(encoder, expected))


def test_empty_string_is_cls_sep(server, encoder, tokenizer):
    ids = np.full([1, SEQ_LEN], tokenizer.pad_id, np.int32)
    ids[0, :2] = [tokenizer.cls_id, tokenizer.sep_id]
    features = {
        "token_ids": ids,
        "segment_ids": np.zeros_like(ids),
        "padding_mask": (ids != tokenizer.pad_id).astype(np.int32),
    }
    outputs = server.predict("serve_text", {"text": strings([""])})
    assert_outputs_equal(outputs, text_outputs(encoder, features))


def test_int64_inputs_are_rejected_like_the_server(server, tokenizer):
    features = reference_pack(tokenizer, TEXTS[:1])
    features["token_ids"] = features["token_ids"].astype(np.int64)
    with pytest.raises(ServingError, match="token_ids.*expects int32 but int64 is provided"):
        server.predict("serving_default", features)


def test_malformed_requests_fail_with_the_checks_message(server, tokenizer):
    features = reference_pack(tokenizer, TEXTS[:1])
    with pytest.raises(ServingError, match="Missing but required: {padding_mask}"):
        server.predict(
            "serving_default", {k: v for k, v in features.items() if k != "padding_mask"}
        )
    too_long = {name: np.concatenate([value, value], axis=1) for name, value in features.items()}
    with pytest.raises(ServingError, match=f"at most seq_len={SEQ_LEN}"):
        server.predict("serving_default", too_long)
    with pytest.raises(ServingError, match="at least one token"):
        server.predict("serving_default", {k: v[:, :0] for k, v in features.items()})
    with pytest.raises(ServingError, match="`segment_ids` must have the shape of `token_ids`"):
        server.predict(
            "serving_default", {**features, "segment_ids": features["segment_ids"][:, 1:]}
        )
    features["token_ids"][0, 1] = tokenizer.vocabulary_size
    with pytest.raises(ServingError, match="vocabulary_size"):
        server.predict("serving_default", features)
    with pytest.raises(ServingError, match="one text per `text`"):
        server.predict("serve_text_pair", {"text": strings(TEXTS), "text_pair": strings(PAIRS[:1])})


@pytest.mark.parametrize(
    "name, value, message",
    [
        ("segment_ids", -1, "`segment_ids` must be >= 0"),
        ("segment_ids", 2, "`segment_ids` must be < num_segments=2"),
        ("padding_mask", 2, "`padding_mask` must be 0 or 1"),
        ("padding_mask", -1, "`padding_mask` must be 0 or 1"),
    ],
)
def test_segment_ids_and_padding_mask_out_of_range_are_refused(
    server, tokenizer, name, value, message
):
    features = reference_pack(tokenizer, TEXTS[:2])
    assert server.predict("serving_default", features)  # the request is valid as packed
    features[name][1, 1] = value  # one value of the second example, a real token's
    with pytest.raises(ServingError, match=re.escape(message)):
        server.predict("serving_default", features)


def test_saved_model_load_in_a_fresh_process_gives_the_same_outputs(export_dir, server):
    inputs = {"text": strings(TEXTS[:2]), "text_pair": strings(PAIRS[:2])}
    expected = server.predict("serve_text_pair", inputs)
    with ServingProcess(export_dir, loader="tf2") as tf2:
        assert set(tf2.signatures) == {"serving_default", "serve_text", "serve_text_pair"}
        assert_outputs_equal(tf2.predict("serve_text_pair", inputs), expected)
        assert not [name for name in tf2.modules if name.startswith("lmpipe")]


# ---------------------------------------------------------------------------- REST


def test_rest_row_and_columnar_bodies_give_the_same_outputs(server, tokenizer):
    features = reference_pack(tokenizer, TEXTS[:2])
    expected = server.predict("serving_default", features)
    rows = {"instances": [{k: v[i].tolist() for k, v in features.items()} for i in range(2)]}
    columns = {"inputs": {k: v.tolist() for k, v in features.items()}}
    signatures = read_signature_defs(server.export_dir)
    for body in (rows, columns, json.dumps(rows)):
        inputs = rest_to_inputs(body, signatures)
        assert {k: v.dtype for k, v in inputs.items()} == {k: np.int32 for k in features}
        assert_outputs_equal(server.predict("serving_default", inputs), expected, atol=0)

    text_expected = server.predict("serve_text", {"text": strings(TEXTS[:2])})
    for body in (
        {"signature_name": "serve_text", "instances": TEXTS[:2]},
        {"signature_name": "serve_text", "instances": [{"text": text} for text in TEXTS[:2]]},
        {"signature_name": "serve_text", "inputs": {"text": TEXTS[:2]}},
        {
            "signature_name": "serve_text",
            "inputs": [{"b64": "VG8gYmUsIG9yIG5vdCB0byBiZSwgdGhhdCBpcyB0aGUgcXVlc3Rpb246"}, ""],
        },
    ):
        inputs = rest_to_inputs(body, signatures)
        assert inputs["text"].tolist() == [text.encode() for text in TEXTS[:2]]
        assert_outputs_equal(server.predict("serve_text", inputs), text_expected, atol=0)


def test_rest_responses_have_the_servers_shapes(server, tokenizer):
    body = {"signature_name": "serve_text", "instances": ["to be", "or not"]}
    rows = server.predict_rest(body)
    assert list(rows) == ["predictions"] and len(rows["predictions"]) == 2
    assert set(rows["predictions"][0]) == {"pooled_output", "sequence_output"}
    assert np.shape(rows["predictions"][0]["sequence_output"]) == (SEQ_LEN, 128)

    columns = server.predict_rest({"signature_name": "serve_text", "inputs": ["to be", "or not"]})
    assert list(columns) == ["outputs"]
    assert np.shape(columns["outputs"]["pooled_output"]) == (2, 128)
    np.testing.assert_array_equal(
        columns["outputs"]["pooled_output"][1], rows["predictions"][1]["pooled_output"]
    )
    # One output: bare values instead of objects, as TF Serving writes them.
    # Floats as the server writes float32: %g if it reads back exactly, else %.9g.
    pooled = np.array([[0.5, -2.0], [0.1, 0.123456789]], np.float32)
    assert outputs_to_rest({"pooled_output": pooled}, row_format=True) == {
        "predictions": [[0.5, -2.0], [0.1, 0.123456791]]
    }
    assert outputs_to_rest({"pooled_output": pooled}, row_format=False) == {
        "outputs": [[0.5, -2.0], [0.1, 0.123456791]]
    }


@pytest.mark.parametrize(
    "body, message",
    [
        ({"instances": [{"text": "a"}]}, "text"),  # serving_default has three inputs
        ({"inputs": {"token_ids": [[1.0]], "segment_ids": [[0]], "padding_mask": [[1]]}}, "int32"),
        (
            {"inputs": {"token_ids": [[2**31]], "segment_ids": [[0]], "padding_mask": [[1]]}},
            "int32",
        ),
        ({"inputs": {"token_ids": [[True]], "segment_ids": [[0]], "padding_mask": [[1]]}}, "int32"),
        (
            {"inputs": {"token_ids": [[1, 2], [3]], "segment_ids": [[0]], "padding_mask": [[1]]}},
            "size",
        ),
        ({"inputs": {"token_ids": [[1]], "segment_ids": [[0]]}}, "padding_mask"),
        ({"signature_name": "serve_text", "instances": [1]}, "string"),
        ({"signature_name": "serve_text", "instances": [{"b64": "not base64!"}]}, "base64"),
        ({"signature_name": "serve_text", "instances": ["a"], "inputs": ["a"]}, "exactly one"),
        ({"signature_name": "serve_text", "instances": []}, "No values"),
        ({"signature_name": "nope", "instances": ["a"]}, "not found"),
    ],
)
def test_rest_bodies_are_checked_strictly(export_dir, body, message):
    with pytest.raises(RestRequestError, match=message):
        rest_to_inputs(body, read_signature_defs(export_dir))


def test_lone_surrogates_and_deep_nesting_are_bad_requests_not_crashes():
    dtypes = {"text": tf.string}
    with pytest.raises(RestRequestError) as raised:
        rest_to_inputs('{"instances": ["ok", "\\ud800"]}', dtypes)
    assert "The surrogate pair in string is invalid" in str(raised.value)
    assert str(raised.value).isascii()  # printable in any locale
    for depth in (300, 100_000):
        text = '{"instances": ' + "[" * depth + '"a"' + "]" * depth + "}"
        with pytest.raises(RestRequestError, match="nest"):
            rest_to_inputs(text, dtypes)
    deep = "a"
    for _ in range(5000):
        deep = {"b64": deep} if isinstance(deep, str) else {"x": deep}
    with pytest.raises(RestRequestError, match="nested too deeply to show"):
        rest_to_inputs({"instances": [{"text": deep}]}, dtypes)


# ---------------------------------------------------------------------------- warmup


def test_warmup_file_has_one_predict_request_per_signature(export_dir):
    logs = read_warmup_requests(export_dir)
    requests = [log.predict_log.request for log in logs]
    assert sorted(r.model_spec.signature_name for r in requests) == sorted(
        ["serving_default", "serve_text", "serve_text_pair"]
    )
    assert {r.model_spec.name for r in requests} == {"bert"}
    by_name = {r.model_spec.signature_name: r for r in requests}
    assert set(by_name["serving_default"].inputs) == {"token_ids", "segment_ids", "padding_mask"}
    assert by_name["serving_default"].inputs["token_ids"].dtype == tf.int32.as_datatype_enum
    assert by_name["serve_text_pair"].inputs["text_pair"].dtype == tf.string.as_datatype_enum


def test_warmup_requests_replay(export_dir, server):
    replayed = replay_warmup(export_dir, server)
    assert sorted(name for name, _ in replayed) == sorted(
        ["serving_default", "serve_text", "serve_text_pair"]
    )
    for _, outputs in replayed:
        assert outputs["sequence_output"].shape == (1, SEQ_LEN, 128)
        assert outputs["pooled_output"].dtype == np.float32


# ---------------------------------------------------------------------------- mixed precision


def test_mixed_bfloat16_model_serves_float32(tmp_path, tokenizer):
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy("mixed_bfloat16")
    try:
        model = small_encoder(tokenizer.vocabulary_size)
    finally:
        keras.config.set_dtype_policy(previous)
    assert (
        model({k: tf.constant(v) for k, v in reference_pack(tokenizer, TEXTS[:1]).items()})[
            "pooled_output"
        ].dtype
        == tf.bfloat16
    )
    path = export_saved_model(tmp_path / "bert", model, tokenizer, SEQ_LEN, warmup=False)
    for signature in read_signature_defs(path).values():
        assert {tf.as_dtype(info.dtype) for info in signature.outputs.values()} == {tf.float32}
    outputs = run_tf1_loader(path, "serve_text", {"text": strings(TEXTS)})
    expected = text_outputs(model, reference_pack(tokenizer, TEXTS))
    assert_outputs_close_in_bfloat16(outputs, expected)


# ------------------------------------------------------------------- the serving guide


def readme_serving_section():
    """docs/serving.md, the guide that holds the README's former Serving section."""
    text = SERVING_GUIDE.read_text("utf-8")
    assert text.startswith("# Export and serving\n")
    return text


def test_readme_curl_examples_run_against_an_export(server):
    section = readme_serving_section()
    assert (
        'docker run -p 8501:8501 -v "$PWD/serving/bert:/models/bert" -e MODEL_NAME=bert '
        "tensorflow/serving" in section
    )
    examples = re.findall(
        r"curl -d '(.*?)' \\\n +-X POST (\S+)\n```\n\n```json\n(.*?)```", section, re.S
    )
    formats = set()
    for body, url, response in examples:
        assert url == "http://localhost:8501/v1/models/bert:predict"
        body, response = json.loads(body), json.loads(response)
        ours = server.predict_rest(body)  # the body is valid for the signature it names
        key = "predictions" if "instances" in body else "outputs"
        assert list(response) == list(ours) == [key]
        rows = body["instances"] if key == "predictions" else next(iter(body["inputs"].values()))
        assert len(response[key]) == len(rows)
        formats.add((body.get("signature_name", "serving_default"), key))
    assert formats >= {
        (name, key)
        for name in ("serving_default", "serve_text")
        for key in ("predictions", "outputs")
    }
    assert set(re.findall(r"https?://([^/\s:]+)", section)) == {"localhost"}


def test_a_moved_export_loads_and_serves_the_same(export_dir, tmp_path):
    # No absolute path is kept: a copy elsewhere (another machine's model base path) serves.
    import shutil

    from tensorflow.core.protobuf import saved_model_pb2

    saved_model = saved_model_pb2.SavedModel()
    saved_model.ParseFromString(pathlib.Path(export_dir, "saved_model.pb").read_bytes())
    assert str(pathlib.Path(export_dir).parent) not in str(saved_model)
    moved = tmp_path / "elsewhere" / "1"
    shutil.copytree(export_dir, moved)
    text = {"text": np.array([b"To be, or not to be"], dtype=object)}
    expected = run_tf1_loader(export_dir, "serve_text", text)
    served = run_tf1_loader(str(moved), "serve_text", text)
    for name in expected:
        np.testing.assert_array_equal(served[name], expected[name])


# Server-side batching (--enable_batching), simulated ------------------------------------------


@pytest.fixture(scope="module")
def signatures(export_dir):
    loaded = tf.saved_model.load(export_dir)

    def runner(name):
        function = loaded.signatures[name]
        return lambda inputs: {
            key: value.numpy()
            for key, value in function(**{k: tf.constant(v) for k, v in inputs.items()}).items()
        }

    return runner


def assert_batching(run, requests, equal, **server):
    singles = [run(request) for request in requests]
    batched = batched_outputs(run, requests, **server)
    same = all(
        one[name].shape == many[name].shape and np.allclose(one[name], many[name], atol=1e-5)
        for one, many in zip(singles, batched, strict=True)
        for name in one
    )
    assert same == equal


def test_text_signatures_are_safe_to_batch(signatures):
    run = signatures("serve_text")
    requests = [
        {"text": strings(TEXTS[:1])},
        {"text": strings(TEXTS[1:4])},
        {"text": strings([""])},
    ]
    assert_batching(run, requests, equal=True)
    assert_batching(run, requests, equal=True, allowed_batch_sizes=[2, 8])  # rows filled up
    pairs = [
        {"text": strings(TEXTS[:2]), "text_pair": strings(PAIRS[:2])},
        {"text": strings(TEXTS[2:3]), "text_pair": strings(PAIRS[1:2])},
    ]
    assert_batching(signatures("serve_text_pair"), pairs, equal=True)


def test_text_signatures_run_the_model_on_the_requests_longest_text(tmp_path, tokenizer):
    # A model that reports the length it runs at, and a per-position output.
    inputs = {
        name: keras.Input(shape=(None,), dtype="int32", name=name)
        for name in ("token_ids", "segment_ids", "padding_mask")
    }
    ids = keras.ops.cast(inputs["token_ids"], "float32")
    length = keras.layers.Lambda(
        lambda x: keras.ops.ones_like(x[:, :1]) * keras.ops.cast(keras.ops.shape(x)[1], x.dtype),
        output_shape=(1,),
    )
    model = keras.Model(inputs, {"length": length(ids), "positions": ids[:, :, None] + 1.0})
    path = export_saved_model(tmp_path, model, tokenizer, SEQ_LEN, warmup=False)
    serve_text = tf.saved_model.load(path).signatures["serve_text"]
    short = ["to be", "or not to be"]  # [CLS] 2 [SEP] and [CLS] 4 [SEP] word pieces at most
    outputs = serve_text(text=tf.constant(short))
    packed = reference_pack(tokenizer, short)
    longest = int(packed["padding_mask"].sum(axis=1).max())
    assert longest < SEQ_LEN
    np.testing.assert_array_equal(outputs["length"].numpy(), [[longest], [longest]])
    # Per-position outputs: the model's at real positions, zero at padding, seq_len long.
    expected = (packed["token_ids"] + 1.0) * packed["padding_mask"]
    np.testing.assert_array_equal(outputs["positions"].numpy()[:, :, 0], expected)
    long = serve_text(text=tf.constant([" ".join(["question"] * 40)]))
    assert long["length"].numpy()[0, 0] == SEQ_LEN  # cut to seq_len as before


def test_a_request_of_many_texts_runs_in_length_groups_and_keeps_its_order(signatures):
    from lmpipe.serving.export import LENGTH_GROUP

    sentence = "whether tis nobler in the mind to suffer the slings and arrows"
    words = sentence.split(" ")
    texts = [" ".join(words[: 1 + (7 * index) % len(words)]) for index in range(LENGTH_GROUP + 5)]
    run = signatures("serve_text")
    together = run({"text": strings(texts)})
    for index, text in enumerate(texts):
        alone = run({"text": strings([text])})
        for name, value in alone.items():
            np.testing.assert_allclose(together[name][index], value[0], atol=1e-5, err_msg=name)
    assert run({"text": strings([])})["pooled_output"].shape[0] == 0  # an empty request


def test_a_model_of_fixed_length_is_served_at_seq_len(tmp_path, tokenizer):
    inputs = {
        name: keras.Input(shape=(SEQ_LEN,), dtype="int32", name=name)
        for name in ("token_ids", "segment_ids", "padding_mask")
    }
    flat = keras.ops.cast(inputs["token_ids"], "float32")  # [B, SEQ_LEN]: needs every position
    model = keras.Model(inputs, {"scores": keras.layers.Dense(2)(flat)})
    path = export_saved_model(tmp_path, model, tokenizer, SEQ_LEN, warmup=False)
    served = tf.saved_model.load(path).signatures["serve_text"](text=tf.constant(["to be"]))
    features = reference_pack(tokenizer, ["to be"])
    np.testing.assert_allclose(
        served["scores"], keras_outputs(model, features)["scores"], atol=1e-5
    )


def test_id_signatures_batch_safely_only_at_one_length(signatures, tokenizer):
    # The server pads a shorter request with its first element: [CLS] ids and padding_mask 1,
    # extra positions the model then reads as real tokens.
    run = signatures("serving_default")
    packed = reference_pack(tokenizer, strings(TEXTS))
    short = {name: value[:1, :5] for name, value in packed.items()}
    long = {name: value[2:3] for name, value in packed.items()}
    assert_batching(run, [short, long], equal=False)
    # Requests padded by the client to one length (padding_mask 0) batch safely.
    assert_batching(run, [{n: v[:1] for n, v in packed.items()}, long], equal=True)
    with pytest.raises(ValueError, match="padding is turned off"):
        batched_outputs(run, [short, long], pad_variable_length_inputs=False)
