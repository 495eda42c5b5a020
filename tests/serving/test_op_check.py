"""The TF Serving op check: an export's ops against those of the supported server releases."""

import os

import pytest
import tensorflow as tf
import tensorflow_text as text

from lmpipe.serving import versions
from lmpipe.serving.op_check import (
    SUPPORTED_RELEASES,
    check_serving_ops,
    missing_serving_ops,
    saved_model_ops,
    serving_releases,
)


def save(tmp_path, name, function):
    module = tf.Module()
    module.serve = tf.function(function, input_signature=[tf.TensorSpec([None], tf.string)])
    path = str(tmp_path / name)
    tf.saved_model.save(module, path, signatures={"serving_default": module.serve})
    return path


def trim(texts):
    # tensorflow-text's round-robin trimmer: the TFText>RoundRobinTrim op, added after 2.12.1.
    pieces = tf.strings.split(texts)
    trimmed = text.RoundRobinTrimmer(max_seq_length=3).trim([pieces, pieces])
    return {"first": trimmed[0].to_tensor("")}


def test_the_releases_and_what_they_link():
    releases = serving_releases()
    assert tuple(releases) == SUPPORTED_RELEASES
    assert releases["2.19"]["tensorflow_text"] == "2.12.1"
    assert releases["2.20"]["tensorflow_text"] == "2.20.0"
    for release in releases.values():
        # What lmpipe's exports use: core ops, WordPiece and SentencePiece ops.
        assert {"MatMul", "StatefulPartitionedCall", "FastWordpieceTokenizeWithOffsets"} <= (
            release["ops"]
        )
        assert {"SentencepieceOp", "SentencepieceTokenizeOp", "NormalizeUTF8"} <= release["ops"]
    assert "TFText>RoundRobinTrim" not in releases["2.19"]["ops"]
    assert "TFText>RoundRobinTrim" in releases["2.20"]["ops"]


def test_an_export_with_an_op_an_older_server_lacks_is_refused_naming_both(tmp_path):
    path = save(tmp_path, "trim", trim)
    assert "TFText>RoundRobinTrim" in saved_model_ops(path)
    assert missing_serving_ops(path) == {
        "2.18": ["TFText>RoundRobinTrim"],
        "2.19": ["TFText>RoundRobinTrim"],
    }
    with pytest.raises(
        ValueError,
        match=r"TF Serving 2.18 \(TensorFlow 2.18.0, tensorflow-text 2.12.1\) lacks "
        r"TFText>RoundRobinTrim",
    ):
        check_serving_ops(path)
    check_serving_ops(path, releases=["2.20"])  # 2.20 links tensorflow-text 2.20.0


def test_a_core_op_newer_than_every_server_is_refused(tmp_path):
    def decode(data):
        return {"image": tf.raw_ops.DecodeJxl(contents=data[0])}  # new in TensorFlow 2.21

    path = save(tmp_path, "jxl", decode)
    assert missing_serving_ops(path) == {release: ["DecodeJxl"] for release in SUPPORTED_RELEASES}


def test_publish_refuses_it_and_leaves_no_version(tmp_path):
    base_dir = str(tmp_path / "model")
    os.makedirs(base_dir)
    refused = pytest.raises(ValueError, match="lacks TFText>RoundRobinTrim")
    with refused, versions.temporary_directory(base_dir) as temporary:
        module = tf.Module()
        module.serve = tf.function(trim, input_signature=[tf.TensorSpec([None], tf.string)])
        tf.saved_model.save(module, temporary, signatures={"serving_default": module.serve})
        versions.publish(temporary, base_dir)
    assert versions.model_versions(base_dir) == {}
    assert os.listdir(base_dir) == []
