import pathlib

import keras
import numpy as np
import pytest
import tensorflow as tf

from lmpipe.models.xlnet import XLNetConfig, xlnet
from lmpipe.models.xlnet_pretrainer import XLNetPretrainer
from tests.fresh_process import json_from_fresh_process, run_script

FIXTURE = pathlib.Path(__file__).parent / "fixtures" / "xlnet_reference.npz"
BI_DATA_FIXTURE = FIXTURE.with_name("xlnet_bi_data_reference.npz")
TINY = XLNetConfig(
    vocabulary_size=60,
    hidden_dim=16,
    num_layers=2,
    num_heads=2,
    intermediate_dim=32,
    dropout=0.0,
    attention_dropout=0.0,
)
PAD, SEP, CLS = 0, 3, 4


# ---------------------------------------------------------------- parity with Hugging Face


def load_reference_weights(model, reference):
    """Copy the Hugging Face XLNet weights of the fixture into an lmpipe XLNet model."""

    def hf(name):
        return reference[f"weights/transformer.{name}"]

    model.get_layer("word_embedding").embeddings.assign(hf("word_embedding.weight"))
    if any(layer.name == "mask_embedding" for layer in model.layers):
        model.get_layer("mask_embedding").embeddings.assign(hf("mask_emb")[0])
    names = {
        "query_kernel": "q",
        "key_kernel": "k",
        "value_kernel": "v",
        "position_kernel": "r",
        "output_kernel": "o",
        "content_bias": "r_w_bias",
        "position_bias": "r_r_bias",
        "segment_bias": "r_s_bias",
        "segment_embedding": "seg_embed",
    }
    for index in range(2):
        block, prefix = model.get_layer(f"block_{index}"), f"layer.{index}."
        for mine, theirs in names.items():
            getattr(block.attention, mine).assign(hf(prefix + "rel_attn." + theirs))
        for norm, theirs in (
            (block.attention_layer_norm, "rel_attn.layer_norm"),
            (block.output_layer_norm, "ff.layer_norm"),
        ):
            norm.gamma.assign(hf(prefix + theirs + ".weight"))
            norm.beta.assign(hf(prefix + theirs + ".bias"))
        for dense, theirs in (
            (block.intermediate_dense, "layer_1"),
            (block.output_dense, "layer_2"),
        ):
            dense.kernel.assign(hf(prefix + f"ff.{theirs}.weight").T)  # torch: [out, in]
            dense.bias.assign(hf(prefix + f"ff.{theirs}.bias"))


@pytest.fixture(scope="module")
def reference():
    return dict(np.load(FIXTURE))


def reference_config():
    return XLNetConfig(
        vocabulary_size=100,
        hidden_dim=16,
        num_layers=2,
        num_heads=2,
        intermediate_dim=32,
        dropout=0.0,
        attention_dropout=0.0,
    )


def test_two_stream_model_matches_hugging_face_with_perm_mask_segments_padding_and_memory(
    reference,
):
    model = xlnet(reference_config(), two_stream=True, mem_len=6, reuse_len=5)
    load_reference_weights(model, reference)
    names = ("token_ids", "segment_ids", "padding_mask", "perm_mask", "target_mapping", "memory")
    inputs = {name: reference[name] for name in names}
    inputs["memory_mask"] = np.ones((2, 4), "int32")  # HF shows every memory position
    outputs = {k: keras.ops.convert_to_numpy(v) for k, v in model(inputs).items()}
    np.testing.assert_allclose(outputs["query_output"], reference["query_output"], atol=1e-5)
    np.testing.assert_allclose(
        outputs["sequence_output"], reference["content_output_two_stream"], atol=1e-5
    )
    np.testing.assert_allclose(outputs["new_memory"], reference["new_memory"], atol=1e-5)
    # HF's LM head is tied to the word embedding: logits = g E^T + b.
    table = reference["weights/transformer.word_embedding.weight"]
    logits = outputs["query_output"] @ table.T + reference["weights/lm_loss.bias"]
    np.testing.assert_allclose(logits, reference["lm_logits"], atol=1e-5)


def test_pretrainer_logits_match_hugging_face_lm_head(reference):
    pretrainer = XLNetPretrainer(
        reference_config(), max_predictions=3, mem_len=6, reuse_len=5, batch_size=2
    )
    load_reference_weights(pretrainer.network, reference)
    pretrainer.lm_bias.assign(reference["weights/lm_loss.bias"])
    # Memory comes from the model's own state: put the fixture's memory there.
    pretrainer._memory.assign(
        np.concatenate([np.zeros((2, 2, 2, 16), "float32"), reference["memory"]], axis=2)
    )
    pretrainer._memory_mask.assign(np.array([[0, 0, 1, 1, 1, 1]] * 2, "int32"))
    names = ("token_ids", "segment_ids", "padding_mask", "perm_mask", "target_mapping")
    logits = pretrainer({name: reference[name] for name in names})["lm_logits"]
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(logits), reference["lm_logits"], atol=1e-5
    )
    memory, _ = pretrainer.memory
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(memory), reference["new_memory"], atol=1e-5
    )


def test_content_stream_matches_hugging_face_xlnet_model(reference):
    model = xlnet(reference_config(), mem_len=6, reuse_len=5)
    load_reference_weights(model, reference)
    names = ("token_ids", "segment_ids", "padding_mask", "memory")
    inputs = {name: reference[name] for name in names}
    inputs["memory_mask"] = np.ones((2, 4), "int32")
    outputs = model(inputs)
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(outputs["sequence_output"]),
        reference["content_output"],
        atol=1e-5,
    )


@pytest.fixture(scope="module")
def bi_data_reference():
    return dict(np.load(BI_DATA_FIXTURE))


TWO_STREAM_INPUTS = ("token_ids", "segment_ids", "padding_mask", "perm_mask", "target_mapping")


def test_bi_data_model_matches_hugging_face_over_three_segments_with_memory(bi_data_reference):
    """Rows 0-1 read forward, rows 2-3 backward; each segment reads the memory the previous
    one returned (none for the first), as Hugging Face's `mems`."""
    reference = bi_data_reference
    model = xlnet(reference_config(), two_stream=True, mem_len=6, reuse_len=5, bi_data=True)
    forward_only = xlnet(reference_config(), two_stream=True, mem_len=6, reuse_len=5)
    for network in (model, forward_only):
        load_reference_weights(network, reference)
    for step in range(3):
        inputs = {name: reference[f"step{step}/{name}"] for name in TWO_STREAM_INPUTS}
        inputs["memory"] = reference[f"step{step}/memory"]  # [4, L, 0 / 5 / 6, H]
        inputs["memory_mask"] = np.ones(inputs["memory"].shape[:1] + inputs["memory"].shape[2:3])
        outputs = {k: keras.ops.convert_to_numpy(v) for k, v in model(inputs).items()}
        for mine, theirs in (
            ("query_output", "query_output"),
            ("sequence_output", "content_output_two_stream"),
            ("new_memory", "new_memory"),
        ):
            np.testing.assert_allclose(
                outputs[mine], reference[f"step{step}/{theirs}"], atol=1e-5, rtol=1e-5
            )
        # Without bi_data the forward rows are the same and the backward rows are not.
        plain = keras.ops.convert_to_numpy(forward_only(inputs)["query_output"])
        np.testing.assert_allclose(plain[:2], outputs["query_output"][:2], atol=1e-5)
        assert np.abs(plain[2:] - outputs["query_output"][2:]).max() > 0.1


def test_bi_data_pretrainer_matches_hugging_face_carrying_its_own_memory(bi_data_reference):
    reference = bi_data_reference
    pretrainer = XLNetPretrainer(
        reference_config(), max_predictions=3, mem_len=6, reuse_len=5, batch_size=4, bi_data=True
    )
    load_reference_weights(pretrainer.network, reference)
    pretrainer.lm_bias.assign(reference["weights/lm_loss.bias"])
    for step in range(3):  # the memory starts empty and is the model's own from then on
        inputs = {name: reference[f"step{step}/{name}"] for name in TWO_STREAM_INPUTS}
        logits = keras.ops.convert_to_numpy(pretrainer(inputs)["lm_logits"])
        np.testing.assert_allclose(logits, reference[f"step{step}/lm_logits"], atol=1e-5, rtol=1e-5)
        memory, memory_mask = (keras.ops.convert_to_numpy(t) for t in pretrainer.memory)
        expected = reference[f"step{step}/new_memory"]  # 5 positions after the first step
        np.testing.assert_allclose(
            memory[:, :, -expected.shape[2] :], expected, atol=1e-5, rtol=1e-5
        )
        np.testing.assert_array_equal(memory_mask.sum(1), [expected.shape[2]] * 4)


# ---------------------------------------------------------------- config


@pytest.mark.slow
def test_base_parameter_count_matches_hugging_face():
    # transformers 5.23: XLNetModel(XLNetConfig(vocab_size=32000, d_model=768, n_layer=12,
    # n_head=12, d_inner=3072)) has 116,718,336 parameters (the published xlnet-base-cased);
    # they include `mask_emb` (768, query stream only). lmpipe adds the sequence summary
    # projection that HF puts in its classification heads (768 x 768 + 768).
    hugging_face, mask_emb, summary = 116_718_336, 768, 768 * 768 + 768
    script = (
        "from lmpipe.models.bert import count_parameters\n"
        "from lmpipe.models.xlnet import XLNetConfig, xlnet, xlnet_content_stream\n"
        "model = xlnet(XLNetConfig.base(), two_stream=True)\n"
        "content = xlnet_content_stream(model, XLNetConfig.base())  # shares the weights\n"
        "print([count_parameters(model), count_parameters(content)])"
    )
    counts = json_from_fresh_process(script)
    assert counts == [hugging_face + summary, hugging_face - mask_emb + summary]


@pytest.mark.parametrize(
    "overrides, field",
    [
        ({"hidden_dim": 30, "num_heads": 4}, "hidden_dim"),
        ({"num_layers": 0}, "num_layers"),
        ({"dropout": 1.0}, "dropout"),
        ({"clamp_len": 0}, "clamp_len"),
    ],
)
def test_config_rejects_bad_values(overrides, field):
    with pytest.raises(ValueError, match=field):
        XLNetConfig.tiny(**overrides)


def test_builder_rejects_bad_memory_arguments():
    with pytest.raises(ValueError, match="mem_len"):
        xlnet(TINY, mem_len=-1)
    with pytest.raises(ValueError, match="reuse_len"):
        xlnet(TINY, mem_len=2, reuse_len=0)
    with pytest.raises(ValueError, match="bi_data"):
        xlnet(TINY, bi_data=1)


# ---------------------------------------------------------------- data obeying the contract


def make_batch(rng, batch=4, length=12, predictions=3, vocabulary=60, padded_rows=1):
    """A batch of the XLNet contract: A <sep> B <sep> <cls>, pads at the end of some rows,
    `predictions` targets per row that come last in a random factorization order."""
    token_ids = np.full((batch, length), PAD, "int32")
    segment_ids = np.zeros((batch, length), "int32")
    padding_mask = np.zeros((batch, length), "int32")
    perm_mask = np.zeros((batch, length, length), "float32")
    target_mapping = np.zeros((batch, predictions, length), "float32")
    target_ids = np.zeros((batch, predictions), "int32")
    target_mask = np.zeros((batch, predictions), "float32")
    for b in range(batch):
        real = length - 2 if b < padded_rows else length
        a_length = (real - 3) // 2
        b_length = real - 3 - a_length
        # Learnable text: each row counts upwards from a random start.
        start = rng.integers(5, vocabulary)
        words = (start + np.arange(a_length + b_length) - 5) % (vocabulary - 5) + 5
        token_ids[b, :real] = np.concatenate(
            [words[:a_length], [SEP], words[a_length:], [SEP, CLS]]
        )
        segment_ids[b, :real] = [0] * (a_length + 1) + [1] * (b_length + 1) + [2]
        padding_mask[b, :real] = 1
        candidates = [i for i in range(real) if token_ids[b, i] not in (SEP, CLS)]
        count = predictions - 1 if b == batch - 1 else predictions  # one padded prediction
        targets = rng.choice(candidates, size=count, replace=False)
        rank = np.full(length, -1)
        rank[targets] = rng.permutation(count)
        for i in range(length):
            for j in range(real):
                # Context tokens see each other; a target sees the context and the targets
                # before it in the order.
                perm_mask[b, i, j] = float(rank[j] < rank[i] or (rank[i] < 0 and rank[j] < 0))
        for p, position in enumerate(targets):
            target_mapping[b, p, position] = 1.0
            target_ids[b, p] = token_ids[b, position]
            target_mask[b, p] = 1.0
    features = {
        "token_ids": token_ids,
        "segment_ids": segment_ids,
        "padding_mask": padding_mask,
        "perm_mask": perm_mask,
        "target_mapping": target_mapping,
        "masked_tokens": target_mapping.sum(1).astype("int32"),
        "stream_start": np.ones((batch,), "int32"),
    }
    return features, {"target_ids": target_ids, "target_mask": target_mask}


def two_stream_outputs(model, features):
    names = ("token_ids", "segment_ids", "padding_mask", "perm_mask", "target_mapping")
    outputs = model({name: features[name] for name in names})
    return {k: keras.ops.convert_to_numpy(v) for k, v in outputs.items()}


def test_two_stream_model_never_leaks_a_target_into_its_own_prediction():
    rng = np.random.default_rng(0)
    features, _ = make_batch(rng)
    model = xlnet(TINY, two_stream=True)
    before = two_stream_outputs(model, features)
    mapping = features["target_mapping"]
    for b in range(2):
        for p in range(mapping.shape[1]):
            position = int(mapping[b, p].argmax())
            changed = {k: v.copy() for k, v in features.items()}
            changed["token_ids"][b, position] = (changed["token_ids"][b, position] + 7) % 55 + 5
            after = two_stream_outputs(model, changed)
            # The content stream sees the token itself, the query stream never does.
            assert (
                np.abs(
                    after["sequence_output"][b, position] - before["sequence_output"][b, position]
                ).max()
                > 1e-4
            )
            np.testing.assert_allclose(
                after["query_output"][b, p], before["query_output"][b, p], atol=1e-5
            )
            # Positions that may not attend to `position` change in neither stream.
            blind = np.flatnonzero(features["perm_mask"][b, :, position] == 0)
            blind = blind[blind != position]
            np.testing.assert_allclose(
                after["sequence_output"][b, blind],
                before["sequence_output"][b, blind],
                atol=1e-5,
            )
            for q in range(mapping.shape[1]):
                if (
                    mapping[b, q].sum()
                    and features["perm_mask"][b, mapping[b, q].argmax(), position] == 0
                ):
                    np.testing.assert_allclose(
                        after["query_output"][b, q], before["query_output"][b, q], atol=1e-5
                    )


# ---------------------------------------------------------------- memory


def memory_inputs(features, memory, memory_mask):
    names = ("token_ids", "segment_ids", "padding_mask", "perm_mask", "target_mapping")
    inputs = {name: features[name] for name in names}
    inputs["memory"], inputs["memory_mask"] = memory, memory_mask
    # Keras wants all tensors or all arrays in one call.
    return {name: tf.convert_to_tensor(value) for name, value in inputs.items()}


@pytest.mark.parametrize("reuse_len", [None, 4])
def test_new_memory_is_the_tail_of_memory_and_this_segments_layer_inputs(reuse_len):
    rng = np.random.default_rng(1)
    features, _ = make_batch(rng, length=12)
    mem_len = 7
    model = xlnet(TINY, two_stream=True, mem_len=mem_len, reuse_len=reuse_len)
    memory = rng.normal(size=(4, 2, 5, 16)).astype("float32")
    memory_mask = np.ones((4, 5), "int32")
    outputs = model(memory_inputs(features, memory, memory_mask))
    new_memory = keras.ops.convert_to_numpy(outputs["new_memory"])
    # Layer 0's inputs are the word embeddings; layer 1's are block 0's content outputs.
    table = keras.ops.convert_to_numpy(model.get_layer("word_embedding").embeddings)
    layer_0 = table[features["token_ids"]]
    block = model.get_layer("block_0")
    encoding = model.get_layer("position_encoding")(layer_0, memory=memory[:, 0])
    layer_1 = keras.ops.convert_to_numpy(
        block(
            layer_0,
            encoding,
            segment_ids=features["segment_ids"],
            padding_mask=features["padding_mask"],
            perm_mask=features["perm_mask"],
            memory=memory[:, 0],
            memory_mask=memory_mask,
        )
    )
    kept = 12 if reuse_len is None else reuse_len
    for index, inputs in enumerate((layer_0, layer_1)):
        expected = np.concatenate([memory[:, index], inputs[:, :kept]], axis=1)[:, -mem_len:]
        np.testing.assert_allclose(new_memory[:, index], expected, atol=1e-5)
    expected_mask = np.concatenate([memory_mask, features["padding_mask"][:, :kept]], 1)
    np.testing.assert_array_equal(outputs["new_memory_mask"], expected_mask[:, -mem_len:])


def test_memory_carries_no_gradient():
    rng = np.random.default_rng(2)
    features, _ = make_batch(rng)
    model = xlnet(TINY, two_stream=True, mem_len=4)
    memory = tf.constant(rng.normal(size=(4, 2, 4, 16)).astype("float32"))
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(memory)
        outputs = model(memory_inputs(features, memory, np.ones((4, 4), "int32")))
        cached = tf.reduce_sum(outputs["new_memory"])
        used = tf.reduce_sum(outputs["query_output"])
    assert tape.gradient(cached, memory) is None
    for variable in model.trainable_variables:
        assert tape.gradient(cached, variable) is None
    # The memory itself is an input of the attention: the outputs do depend on it.
    assert np.abs(tape.gradient(used, memory).numpy()).sum() > 0


def test_pretrainer_memory_follows_segments_and_resets_at_stream_start():
    rng = np.random.default_rng(3)
    first, _ = make_batch(rng, batch=2, length=8, predictions=2, padded_rows=0)
    second, _ = make_batch(rng, batch=2, length=8, predictions=2, padded_rows=0)
    second["stream_start"] = np.array([1, 0], "int32")  # row 0 starts a new text
    model = XLNetPretrainer(TINY, max_predictions=2, mem_len=6, batch_size=2)
    model(first)
    memory, mask = (keras.ops.convert_to_numpy(t) for t in model.memory)
    table = keras.ops.convert_to_numpy(model.network.get_layer("word_embedding").embeddings)
    np.testing.assert_allclose(memory[:, 0], table[first["token_ids"][:, -6:]], atol=1e-6)
    np.testing.assert_array_equal(mask, np.ones((2, 6)))
    carried = keras.ops.convert_to_numpy(model(second)["lm_logits"])
    model.reset_memory()
    model(first)  # the same memory again
    second_no_memory = dict(second, stream_start=np.array([1, 1], "int32"))
    fresh = keras.ops.convert_to_numpy(model(second_no_memory)["lm_logits"])
    np.testing.assert_allclose(carried[0], fresh[0], atol=1e-5)  # row 0 forgot
    assert np.abs(carried[1] - fresh[1]).max() > 1e-4  # row 1 remembered


# ---------------------------------------------------------------- pretrainer


def as_dataset(batches):
    def generator():
        yield from batches

    first = batches[0]
    signature = tf.nest.map_structure(lambda a: tf.TensorSpec(a.shape, tf.as_dtype(a.dtype)), first)
    return tf.data.Dataset.from_generator(generator, output_signature=signature)


@pytest.mark.slow
@pytest.mark.parametrize("mem_len", [0, 4])
def test_pretrainer_training_lowers_the_loss(mem_len):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(4)
    batches = [make_batch(rng, batch=4, length=12, predictions=3) for _ in range(4)]
    for features, _ in batches[1:]:
        features["stream_start"] = np.zeros(4, "int32")
    model = XLNetPretrainer(TINY, max_predictions=3, mem_len=mem_len, batch_size=4)
    model.compile(optimizer=keras.optimizers.Adam(1e-2))
    model.optimizer.build(model.trainable_variables)
    dataset = as_dataset(batches)
    before = model.evaluate(dataset, verbose=0, return_dict=True)["plm_loss"]
    model.fit(dataset.repeat(), steps_per_epoch=40, epochs=1, verbose=0, shuffle=False)
    after = model.evaluate(dataset, verbose=0, return_dict=True)["plm_loss"]
    # Evaluation is deterministic (same batches, no dropout): the drop is not noise. At the
    # start the loss is about log(V) = 4.1; 40 steps take it below 3.5.
    assert before > 3.9 and np.isfinite(after) and after < 0.85 * before, (before, after)
    if mem_len:
        _, memory_mask = model.memory
        assert keras.ops.convert_to_numpy(memory_mask).sum() > 0


def test_pretrainer_config_round_trip_and_weights_load_into_a_memory_free_model(tmp_path):
    rng = np.random.default_rng(5)
    features, _ = make_batch(rng, batch=2, length=8, predictions=2)
    model = XLNetPretrainer(TINY, max_predictions=2, mem_len=3, reuse_len=4, batch_size=2)
    clone = XLNetPretrainer.from_config(model.get_config())
    assert clone.get_config() == model.get_config()
    assert clone.xlnet_config == TINY
    model(features)  # fills the memory, which is no weight
    path = str(tmp_path / "xlnet.weights.h5")
    model.save_weights(path)
    memory_free = XLNetPretrainer(TINY, max_predictions=2)
    memory_free.load_weights(path)
    model.reset_memory()  # both start without memory: the same outputs
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(memory_free(features)["lm_logits"]),
        keras.ops.convert_to_numpy(model(features)["lm_logits"]),
        atol=1e-5,
    )
    memory_free.save_weights(path)
    model.load_weights(path)  # and back
    saved = keras.models.load_model(_save_keras(memory_free, tmp_path))
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(saved(features)["lm_logits"]),
        keras.ops.convert_to_numpy(memory_free(features)["lm_logits"]),
        atol=1e-5,
    )


def test_pretrainer_keeps_bi_data_through_config_and_keras_round_trips(tmp_path):
    rng = np.random.default_rng(8)
    features, _ = make_batch(rng, batch=4, length=8, predictions=2)
    model = XLNetPretrainer(TINY, max_predictions=2, bi_data=True)
    assert XLNetPretrainer.from_config(model.get_config()).bi_data is True
    saved = keras.models.load_model(_save_keras(model, tmp_path))
    assert saved.bi_data is True
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(saved(features)["lm_logits"]),
        keras.ops.convert_to_numpy(model(features)["lm_logits"]),
        atol=1e-5,
    )


def test_checkpoint_state_restores_the_memory_and_refuses_another_batch_size(tmp_path):
    rng = np.random.default_rng(9)
    features, _ = make_batch(rng, batch=2, length=8, predictions=2)
    model = XLNetPretrainer(TINY, max_predictions=2, mem_len=3, batch_size=2)
    model(features)
    path = tf.train.Checkpoint(**model.checkpoint_state()).write(str(tmp_path / "state"))
    again = XLNetPretrainer(TINY, max_predictions=2, mem_len=3, batch_size=2)
    tf.train.Checkpoint(**again.checkpoint_state()).read(path).assert_existing_objects_matched()
    for restored, saved in zip(again.memory, model.memory, strict=True):
        assert np.abs(saved.numpy()).sum() > 0
        np.testing.assert_array_equal(restored.numpy(), saved.numpy())
    wider = XLNetPretrainer(TINY, max_predictions=2, mem_len=3, batch_size=3)
    with pytest.raises(ValueError, match="number of replicas and the per-replica batch size"):
        tf.train.Checkpoint(**wider.checkpoint_state()).read(path)
    assert XLNetPretrainer(TINY, max_predictions=2).checkpoint_state() == {}


def _save_keras(model, tmp_path):
    path = str(tmp_path / "xlnet.keras")
    model.save(path)
    return path


def test_encoder_shares_weights_and_reads_the_content_stream():
    rng = np.random.default_rng(6)
    features, _ = make_batch(rng, batch=2, length=8, predictions=2, padded_rows=1)
    model = XLNetPretrainer(TINY, max_predictions=2)
    encoder = model.encoder
    assert set(encoder.input) == {"token_ids", "segment_ids", "padding_mask"}
    model_weights = {id(v) for v in model.weights}
    assert all(id(v) in model_weights for v in encoder.weights)
    names = ("token_ids", "segment_ids", "padding_mask")
    outputs = encoder({name: features[name] for name in names})
    sequence = keras.ops.convert_to_numpy(outputs["sequence_output"])
    # The pooled output summarizes the last real token (<cls>), wherever the padding starts.
    pooler = model.network.get_layer("pooler")
    for b, last in ((0, 5), (1, 7)):
        assert features["token_ids"][b, last] == CLS
        np.testing.assert_allclose(
            keras.ops.convert_to_numpy(outputs["pooled_output"])[b],
            keras.ops.convert_to_numpy(pooler(sequence[b : b + 1, last]))[0],
            atol=1e-6,
        )
    assert not pooler.trainable


def test_pretrainer_rejects_memory_without_batch_size_and_wrong_prediction_count():
    with pytest.raises(ValueError, match="batch_size"):
        XLNetPretrainer(TINY, max_predictions=2, mem_len=4)
    with pytest.raises(ValueError, match="max_predictions"):
        XLNetPretrainer(TINY, max_predictions=0)
    rng = np.random.default_rng(7)
    features, _ = make_batch(rng, batch=2, length=8, predictions=3)
    with pytest.raises(ValueError, match="max_predictions"):
        XLNetPretrainer(TINY, max_predictions=2)(features)
    with pytest.raises(ValueError, match="batch_size"):
        XLNetPretrainer(TINY, max_predictions=3, mem_len=2, batch_size=3)(features)


MIRRORED_SCRIPT = """
import numpy as np
import tensorflow as tf

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import keras

from lmpipe.models.xlnet_pretrainer import XLNetPretrainer
from tests.models.test_xlnet import TINY, as_dataset, make_batch

strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
rng = np.random.default_rng(0)
batches = [make_batch(rng, batch=4, length=12, predictions=3) for _ in range(2)]
with strategy.scope():
    model = XLNetPretrainer(TINY, max_predictions=3, mem_len=4, batch_size=2)
    model.compile(optimizer=keras.optimizers.SGD(0.0))  # weights stay as they are
    model.optimizer.build(model.trainable_variables)
model.fit(as_dataset(batches), steps_per_epoch=2, epochs=1, verbose=0, shuffle=False)
table = model.network.get_layer("word_embedding").embeddings.numpy()
last = batches[-1][0]["token_ids"]
for replica, value in enumerate(model._memory.values):
    # Replica r trained on rows 2r, 2r + 1 of the global batch; layer 0's memory holds their
    # last 4 word embeddings.
    expected = table[last[2 * replica : 2 * replica + 2, -4:]]
    np.testing.assert_allclose(value.numpy()[:, 0], expected, atol=1e-6)
    other = table[last[2 - 2 * replica : 4 - 2 * replica, -4:]]  # the other replica's rows
    assert np.abs(value.numpy()[:, 0] - other).max() > 1e-3
print("OK")
"""


@pytest.mark.slow
def test_each_replica_keeps_its_own_memory_under_mirrored_strategy():
    run_script(MIRRORED_SCRIPT, timeout=600)
