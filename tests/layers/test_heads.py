import keras
import numpy as np
import pytest
import tensorflow as tf
from scipy.special import erf

from lmpipe.layers import (
    BertEmbedding,
    ClassificationHead,
    MaskedLMHead,
    MaskedMeanPooling,
    SpanHead,
    TokenClassificationHead,
)
from tests.layer_checks import check_layer

RNG = np.random.default_rng(7)
VOCAB, EMBED, HIDDEN = 23, 8, 12


def normal(*shape):
    return RNG.normal(size=shape).astype("float32")


def numpy_of(tensor):
    return np.asarray(keras.ops.convert_to_numpy(tensor))


def layer_norm(x, gamma, beta, epsilon):
    mean = x.mean(-1, keepdims=True)
    variance = x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + epsilon) * gamma + beta


def gelu(x):
    return 0.5 * x * (1 + erf(x / np.sqrt(2)))


def randomize_weights(layer):
    """Random values everywhere, so that biases and LayerNorm scales count in the checks."""
    layer.set_weights([0.3 * RNG.normal(size=w.shape) for w in layer.get_weights()])


def numpy_transform(head, sequence_output, mask_positions):
    """BERT's masked-LM transform: gather, dense, gelu, LayerNorm -> [B, P, E] in float64."""
    kernel, bias = (numpy_of(w).astype("float64") for w in head.transform_dense.weights)
    gamma, beta = (numpy_of(w).astype("float64") for w in head.transform_layer_norm.weights)
    gathered = np.take_along_axis(sequence_output.astype("float64"), mask_positions[..., None], 1)
    return layer_norm(gelu(gathered @ kernel + bias), gamma, beta, head.layer_norm_epsilon)


def numpy_masked_lm(head, table, sequence_output, mask_positions):
    """logits = transform(h) E^T + b for the `[V, E]` output table."""
    x = numpy_transform(head, sequence_output, mask_positions)
    return x @ table.astype("float64").T + numpy_of(head.output_bias)


def tied_model(embedding_dim=None):
    """token_ids -> BertEmbedding -> MaskedLMHead tied to its token table."""
    embedding = BertEmbedding(
        VOCAB, HIDDEN, max_sequence_length=16, embedding_dim=embedding_dim, dropout=0.0
    )
    token_ids = keras.Input((6,), dtype="int32", name="token_ids")
    mask_positions = keras.Input((3,), dtype="int32", name="mask_positions")
    embedding.build((None, 6))
    head = MaskedLMHead(VOCAB, token_embedding=embedding.token_embedding)
    logits = head(embedding(token_ids), mask_positions)
    return keras.Model([token_ids, mask_positions], logits), embedding, head


# Standard checks.


def test_masked_lm_head_passes_the_standard_checks_tied_and_untied(tmp_path):
    inputs = {
        "sequence_output": normal(2, 6, HIDDEN),
        "mask_positions": np.array([[0, 3, 5], [1, 1, 4]], "int32"),
    }
    untied = check_layer(
        MaskedLMHead,
        {"vocabulary_size": VOCAB},
        inputs,
        expected_output_shape=(2, 3, VOCAB),
        tmp_path=tmp_path,
    )
    assert untied.output_kernel.shape == (HIDDEN, VOCAB)
    embedding = keras.layers.Embedding(VOCAB, EMBED)
    tied = check_layer(
        MaskedLMHead,
        {"vocabulary_size": VOCAB, "token_embedding": embedding},
        inputs,
        expected_output_shape=(2, 3, VOCAB),
        tmp_path=tmp_path,
    )
    assert tied.token_embedding is embedding


@pytest.mark.parametrize(
    "init_kwargs, shape",
    [
        ({"num_classes": 3}, (2, 6, HIDDEN)),
        ({"num_classes": 2, "pooler_dim": 10, "dropout": 0.1, "cls_index": -1}, (2, 6, HIDDEN)),
        ({"num_classes": 4}, (2, HIDDEN)),
    ],
)
def test_classification_head_passes_the_standard_checks(tmp_path, init_kwargs, shape):
    check_layer(
        ClassificationHead,
        init_kwargs,
        {"inputs": normal(*shape)},
        expected_output_shape=(2, init_kwargs["num_classes"]),
        tmp_path=tmp_path,
    )


def test_span_head_passes_the_standard_checks(tmp_path):
    padding = np.array([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]], "int32")
    check_layer(
        SpanHead,
        {},
        {"sequence_output": normal(2, 6, HIDDEN), "padding_mask": padding},
        expected_output_shape=(2, 6),
        tmp_path=tmp_path,
    )


def test_token_classification_head_passes_the_standard_checks(tmp_path):
    check_layer(
        TokenClassificationHead,
        {"num_classes": 5, "dropout": 0.2},
        {"sequence_output": normal(2, 6, HIDDEN)},
        expected_output_shape=(2, 6, 5),
        tmp_path=tmp_path,
    )


# Masked LM head: tied weights.


def test_tied_head_uses_the_embedding_variable_itself_and_no_kernel_of_its_own():
    model, embedding, head = tied_model(embedding_dim=EMBED)
    table = embedding.token_embedding.embeddings
    assert head.token_embedding.embeddings is table
    assert head.output_kernel is None
    owned = [w for w in head.weights if w.shape in ((VOCAB, EMBED), (EMBED, VOCAB))]
    assert len(owned) == 1 and owned[0] is table and owned[0].path == table.path
    assert sum(w is table for w in model.trainable_weights) == 1
    assert len({id(w) for w in model.trainable_weights}) == len(model.trainable_weights)


def test_gradients_of_masked_lm_loss_flow_into_the_one_tied_variable():
    embedding = BertEmbedding(VOCAB, HIDDEN, embedding_dim=EMBED, max_sequence_length=16)
    embedding.build((None, 6))
    head = MaskedLMHead(VOCAB, token_embedding=embedding.token_embedding)
    randomize_weights(head)
    # The sequence output does not come from the table: the only path to it is the output layer.
    sequence_output, positions = normal(2, 6, HIDDEN), np.array([[0, 2, 5], [4, 4, 1]], "int32")
    upstream = normal(2, 3, VOCAB)
    table = embedding.token_embedding.embeddings
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(head(sequence_output, positions) * upstream)
    gradient = numpy_of(tape.gradient(loss, table))
    # d/dW sum(G * (X W^T)) = G^T X, summed over batch and predictions.
    x = numpy_transform(head, sequence_output, positions)
    expected = np.einsum("bpv,bpe->ve", upstream, x)
    np.testing.assert_allclose(gradient, expected, atol=1e-4, rtol=1e-4)


def test_changing_the_embedding_changes_the_tied_logits():
    model, embedding, head = tied_model(embedding_dim=EMBED)
    token_ids = RNG.integers(0, VOCAB, size=(2, 6)).astype("int32")
    positions = np.array([[1, 2, 3], [0, 5, 5]], "int32")
    sequence_output = numpy_of(embedding(token_ids))
    before = numpy_of(head(sequence_output, positions))
    new_table = normal(VOCAB, EMBED)
    embedding.token_embedding.embeddings.assign(new_table)
    after = numpy_of(head(sequence_output, positions))
    assert np.abs(after - before).max() > 1e-2
    expected = numpy_masked_lm(head, new_table, sequence_output, positions)
    np.testing.assert_allclose(after, expected, atol=1e-5, rtol=1e-5)


def test_untied_head_owns_an_embedding_width_by_vocabulary_kernel():
    head = MaskedLMHead(VOCAB)
    head(normal(2, 6, HIDDEN), np.zeros((2, 3), "int32"))
    assert head.token_embedding is None
    assert tuple(head.output_kernel.shape) == (HIDDEN, VOCAB)
    assert [w.path for w in head.weights if w.shape == (HIDDEN, VOCAB)] == [head.output_kernel.path]


# Masked LM head: values.


@pytest.mark.parametrize("embedding_dim", [None, EMBED])
def test_tied_masked_lm_logits_equal_numpy_reference(embedding_dim):
    embedding = BertEmbedding(VOCAB, HIDDEN, embedding_dim=embedding_dim, max_sequence_length=16)
    embedding.build((None, 6))
    head = MaskedLMHead(VOCAB, token_embedding=embedding.token_embedding)
    sequence_output, positions = normal(2, 6, HIDDEN), np.array([[0, 3, 5], [2, 2, 1]], "int32")
    head(sequence_output, positions)
    randomize_weights(head)
    logits = numpy_of(head(sequence_output, positions))
    table = numpy_of(embedding.token_embedding.embeddings)
    assert table.shape == (VOCAB, embedding_dim or HIDDEN)
    expected = numpy_masked_lm(head, table, sequence_output, positions)
    np.testing.assert_allclose(logits, expected, atol=1e-5, rtol=1e-5)


def test_untied_masked_lm_logits_equal_numpy_reference():
    head = MaskedLMHead(VOCAB)
    sequence_output, positions = normal(2, 6, HIDDEN), np.array([[4, 0, 1], [5, 3, 3]], "int32")
    head(sequence_output, positions)
    randomize_weights(head)
    logits = numpy_of(head(sequence_output, positions))
    table = numpy_of(head.output_kernel).T
    expected = numpy_masked_lm(head, table, sequence_output, positions)
    np.testing.assert_allclose(logits, expected, atol=1e-5, rtol=1e-5)


def test_masked_lm_head_config_rebuilds_an_embedding_of_the_same_shape():
    embedding = keras.layers.Embedding(VOCAB, EMBED, name="token_embedding")
    head = MaskedLMHead(VOCAB, token_embedding=embedding, activation="relu")
    clone = MaskedLMHead.from_config(head.get_config())
    assert clone.token_embedding is not embedding
    assert (clone.token_embedding.input_dim, clone.token_embedding.output_dim) == (VOCAB, EMBED)
    assert clone.get_config() == head.get_config()


# Classification, span and token heads: values.


@pytest.mark.parametrize("cls_index", [0, 2, -1])
def test_classification_head_reads_only_the_cls_position(cls_index):
    head = ClassificationHead(3, pooler_dim=7, cls_index=cls_index)
    x = normal(2, 5, HIDDEN)
    reference = numpy_of(head(x))
    changed = normal(2, 5, HIDDEN)
    changed[:, cls_index] = x[:, cls_index]
    np.testing.assert_allclose(numpy_of(head(changed)), reference, atol=1e-6)
    changed[:, cls_index] += 1.0
    assert np.abs(numpy_of(head(changed)) - reference).max() > 1e-5
    pooler_kernel, pooler_bias = (numpy_of(w) for w in head.pooler_dense.weights)
    kernel, bias = (numpy_of(w) for w in head.output_dense.weights)
    expected = np.tanh(x[:, cls_index] @ pooler_kernel + pooler_bias) @ kernel + bias
    np.testing.assert_allclose(reference, expected, atol=1e-5)


def test_classification_head_on_pooled_input_is_one_dense_layer():
    head = ClassificationHead(4, dropout=0.5)
    pooled = normal(3, HIDDEN)
    head(pooled)
    randomize_weights(head)
    kernel, bias = (numpy_of(w) for w in head.output_dense.weights)
    np.testing.assert_allclose(numpy_of(head(pooled)), pooled @ kernel + bias, atol=1e-5)
    assert [w.shape for w in head.weights] == [(HIDDEN, 4), (4,)]


def test_span_head_never_ranks_a_padded_position_highest():
    head = SpanHead(kernel_initializer="ones")
    # Padded positions hold the largest hidden values, so unmasked they would win the argmax.
    sequence_output = np.abs(normal(3, 7, HIDDEN))
    padding = np.array([[1, 1, 1, 1, 1, 0, 0], [1, 1, 0, 0, 0, 0, 0], [1] * 7], "int32")
    sequence_output[padding == 0] += 100.0
    logits = head(sequence_output, padding_mask=padding)
    for name in ("start_logits", "end_logits"):
        values = numpy_of(logits[name])
        assert values.dtype == np.float32
        best = values.argmax(-1)
        assert all(padding[b, best[b]] == 1 for b in range(3))
        np.testing.assert_array_equal(values[padding == 0], np.float32(-1e9))


def test_span_head_logits_equal_numpy_reference():
    head = SpanHead()
    sequence_output = normal(2, 6, HIDDEN)
    padding = np.array([[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1]], "int32")
    head(sequence_output)
    randomize_weights(head)
    kernel, bias = (numpy_of(w) for w in head.span_dense.weights)
    expected = sequence_output @ kernel + bias  # [B, S, 2]
    logits = head(sequence_output, padding_mask=padding)
    real = padding == 1
    np.testing.assert_allclose(
        numpy_of(logits["start_logits"]), np.where(real, expected[..., 0], -1e9), atol=1e-5
    )
    np.testing.assert_allclose(
        numpy_of(logits["end_logits"]), np.where(real, expected[..., 1], -1e9), atol=1e-5
    )
    unmasked = head(sequence_output)
    np.testing.assert_allclose(numpy_of(unmasked["end_logits"]), expected[..., 1], atol=1e-5)


def test_token_classification_logits_equal_numpy_reference_and_dropout_only_in_training():
    head = TokenClassificationHead(5, dropout=0.5)
    sequence_output = normal(2, 6, HIDDEN)
    head(sequence_output)
    randomize_weights(head)
    kernel, bias = (numpy_of(w) for w in head.output_dense.weights)
    expected = sequence_output @ kernel + bias
    np.testing.assert_allclose(numpy_of(head(sequence_output)), expected, atol=1e-5)
    trained = numpy_of(head(sequence_output, training=True))
    assert np.abs(trained - expected).max() > 1e-3


# Mixed precision.


def mixed_precision_heads():
    embedding = keras.layers.Embedding(VOCAB, EMBED)
    positions = np.array([[0, 1, 5], [2, 3, 4]], "int32")
    padding = np.ones((2, 6), "int32")
    return [
        (MaskedLMHead(VOCAB, dtype="mixed_bfloat16"), {"mask_positions": positions}),
        (
            MaskedLMHead(VOCAB, token_embedding=embedding, dtype="mixed_bfloat16"),
            {"mask_positions": positions},
        ),
        (ClassificationHead(2, pooler_dim=8, dtype="mixed_bfloat16"), {}),
        (SpanHead(dtype="mixed_bfloat16"), {"padding_mask": padding}),
        (TokenClassificationHead(3, dtype="mixed_bfloat16"), {}),
    ]


@pytest.mark.parametrize("index", range(5))
def test_logits_are_float32_under_mixed_bfloat16(index):
    head, extra = mixed_precision_heads()[index]
    sequence_output = normal(2, 6, HIDDEN)
    assert head.compute_dtype == "bfloat16"
    for output in tf.nest.flatten(head(sequence_output, **extra)):
        assert keras.backend.standardize_dtype(output.dtype) == "float32"
        assert np.isfinite(numpy_of(output)).any()
    symbolic = {
        name: keras.Input(value.shape[1:], dtype=str(value.dtype)) for name, value in extra.items()
    }
    symbolic_outputs = head(keras.Input((6, HIDDEN)), **symbolic)
    for output in tf.nest.flatten(symbolic_outputs):
        assert output.dtype == "float32"


def test_mixed_precision_masked_lm_logits_are_close_to_float32():
    embedding = keras.layers.Embedding(VOCAB, EMBED)
    full = MaskedLMHead(VOCAB, token_embedding=embedding)
    mixed = MaskedLMHead(VOCAB, token_embedding=embedding, dtype="mixed_bfloat16")
    sequence_output, positions = normal(2, 6, HIDDEN), np.array([[0, 1, 5], [2, 3, 4]], "int32")
    full(sequence_output, positions)
    mixed(sequence_output, positions)
    mixed.set_weights(full.get_weights())
    np.testing.assert_allclose(
        numpy_of(mixed(sequence_output, positions)),
        numpy_of(full(sequence_output, positions)),
        atol=0.1,
    )
    assert embedding.embeddings.dtype == "float32"


# Bad arguments.


@pytest.mark.parametrize(
    "make, argument",
    [
        (lambda: ClassificationHead(0), "num_classes"),
        (lambda: TokenClassificationHead(0), "num_classes"),
        (lambda: ClassificationHead(2, dropout=-0.1), "dropout"),
        (lambda: TokenClassificationHead(2, dropout=-0.1), "dropout"),
        (lambda: ClassificationHead(2, pooler_dim=0), "pooler_dim"),
        (lambda: ClassificationHead(2, cls_index=0.5), "cls_index"),
        (lambda: MaskedLMHead(0), "vocabulary_size"),
        (lambda: MaskedLMHead(VOCAB + 1, keras.layers.Embedding(VOCAB, EMBED)), "vocabulary_size"),
        (lambda: MaskedLMHead(VOCAB, token_embedding="embedding"), "token_embedding"),
    ],
)
def test_bad_arguments_raise_naming_the_argument(make, argument):
    with pytest.raises(ValueError, match=argument):
        make()


def test_classification_head_rejects_a_pooler_on_pooled_input_and_an_outside_cls_index():
    with pytest.raises(ValueError, match="pooler_dim"):
        ClassificationHead(2, pooler_dim=8)(normal(2, HIDDEN))
    with pytest.raises(ValueError, match="cls_index"):
        ClassificationHead(2, cls_index=6)(normal(2, 6, HIDDEN))


def test_masked_mean_pooling_passes_the_standard_checks(tmp_path):
    padding = np.array([[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1]], "int32")
    check_layer(
        MaskedMeanPooling,
        {},
        {"sequence": normal(2, 6, HIDDEN), "padding_mask": padding},
        expected_output_shape=(2, HIDDEN),
        tmp_path=tmp_path,
    )


def test_masked_mean_pooling_averages_the_real_tokens_only():
    sequence = normal(3, 5, HIDDEN)
    padding = np.array([[1, 1, 0, 0, 0], [1, 1, 1, 1, 1], [0, 0, 0, 0, 0]], "int32")
    pooled = numpy_of(MaskedMeanPooling()(sequence, padding))
    np.testing.assert_allclose(pooled[0], sequence[0, :2].mean(0), rtol=1e-6)
    np.testing.assert_allclose(pooled[1], sequence[1].mean(0), rtol=1e-6)
    np.testing.assert_array_equal(pooled[2], np.zeros(HIDDEN))  # no real token: zeros
    # What padding holds never reaches the result.
    changed = sequence.copy()
    changed[0, 2:] = 1e6
    np.testing.assert_array_equal(numpy_of(MaskedMeanPooling()(changed, padding)), pooled)
    # Under mixed precision the sum runs in float32: bfloat16 rounding of the result only.
    mixed = MaskedMeanPooling(dtype="mixed_bfloat16")(sequence, padding)
    assert keras.backend.standardize_dtype(mixed.dtype) == "bfloat16"
    np.testing.assert_allclose(numpy_of(mixed).astype("float32"), pooled, rtol=1e-2, atol=1e-2)
