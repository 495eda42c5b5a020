import keras
import numpy as np
import pytest

from lmpipe.layers.scalar_mix import ScalarMix
from lmpipe.models.elmo import ElmoConfig, ElmoLanguageModel, elmo, reverse_real_tokens
from tests.layer_checks import check_layer

VOCAB = 53
D = 16


@pytest.fixture(scope="module")
def model():
    keras.utils.set_random_seed(3)
    return elmo(
        ElmoConfig.tiny(
            vocabulary_size=VOCAB, embedding_dim=D, lstm_units=24, projection_dim=D, dropout=0.0
        )
    )


def inputs():
    rng = np.random.default_rng(1)
    ids = rng.integers(5, VOCAB, (2, 10)).astype(np.int32)
    mask = np.ones_like(ids)
    mask[1, 7:] = 0
    return ids, mask


def run(model, ids, mask):
    out = model({"token_ids": ids, "padding_mask": mask})
    return {name: value.numpy() for name, value in out.items()}


def test_forward_lm_never_sees_right_and_backward_never_left_tokens(model):
    ids, mask = inputs()
    base = run(model, ids, mask)
    for t in (0, 3, 6):
        changed = ids.copy()
        changed[:, t] = (changed[:, t] - 5 + 1) % (VOCAB - 5) + 5
        out = run(model, changed, mask)
        layers, before = out["layers"][:, 1:], base["layers"][:, 1:]  # [B, L, S, 2D]
        # Forward features (first D) and logits: unchanged before t, changed from t on.
        np.testing.assert_allclose(layers[:, :, :t, :D], before[:, :, :t, :D], atol=1e-6)
        np.testing.assert_allclose(
            out["forward_logits"][:, :t], base["forward_logits"][:, :t], atol=1e-5
        )
        assert np.abs(layers[:, :, t:, :D] - before[:, :, t:, :D]).max() > 1e-4
        # Backward features and logits: unchanged after t (up to each row's real length).
        for row, length in enumerate(mask.sum(1)):
            np.testing.assert_allclose(
                layers[row, :, t + 1 : length, D:], before[row, :, t + 1 : length, D:], atol=1e-6
            )
            np.testing.assert_allclose(
                out["backward_logits"][row, t + 1 : length],
                base["backward_logits"][row, t + 1 : length],
                atol=1e-5,
            )
            assert np.abs(layers[row, :, : t + 1, D:] - before[row, :, : t + 1, D:]).max() > 1e-4


def test_layer_zero_is_the_shared_embedding_twice(model):
    ids, mask = inputs()
    out = run(model, ids, mask)
    assert out["layers"].shape == (2, 3, 10, 2 * D)
    embedding = keras.ops.convert_to_numpy(model.get_layer("token_embedding").embeddings)[ids]
    np.testing.assert_allclose(out["layers"][:, 0, :, :D], embedding, atol=1e-6)
    np.testing.assert_allclose(out["layers"][:, 0, :, D:], embedding, atol=1e-6)


def test_reversing_real_tokens_keeps_end_padding_and_undoes_itself():
    x = np.arange(12, dtype=np.float32).reshape(2, 6, 1)
    mask = np.array([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]])
    reversed_x = keras.ops.convert_to_numpy(reverse_real_tokens(x, mask))
    assert reversed_x[..., 0].tolist() == [[5, 4, 3, 2, 1, 0], [9, 8, 7, 6, 10, 11]]
    np.testing.assert_array_equal(reverse_real_tokens(reversed_x, mask), x)


def test_projections_appear_when_sizes_differ():
    config = ElmoConfig.tiny(vocabulary_size=VOCAB, embedding_dim=12, projection_dim=None)
    model = ElmoLanguageModel(config)
    ids = np.ones((1, 4), np.int32)
    out = model({"token_ids": ids, "padding_mask": ids})
    assert tuple(out["layers"].shape) == (1, 3, 4, 2 * config.lstm_units)
    assert model.get_layer("softmax_projection").kernel.shape == (config.lstm_units, 12)


def test_save_and_load_keep_the_outputs(model, tmp_path):
    ids, mask = inputs()
    path = str(tmp_path / "elmo.keras")
    model.save(path)
    restored = keras.models.load_model(path)
    assert restored.config == model.config
    for name, value in run(restored, ids, mask).items():
        np.testing.assert_allclose(value, run(model, ids, mask)[name], atol=1e-6)


def test_scalar_mix_passes_the_layer_checks(tmp_path):
    rng = np.random.default_rng(0)
    check_layer(
        ScalarMix,
        {"layer_norm": True, "initial_scale": 0.5},
        {
            "inputs": rng.normal(size=(2, 3, 5, 4)).astype(np.float32),
            "padding_mask": np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], np.int32),
        },
        expected_output_shape=(2, 5, 4),
        tmp_path=tmp_path,
    )


def test_scalar_mix_is_gamma_times_the_softmax_weighted_sum():
    rng = np.random.default_rng(2)
    layers = rng.normal(size=(2, 3, 4, 5)).astype(np.float32)
    mix = ScalarMix(initial_scale=2.0)
    mix.build(layers.shape)
    mix.layer_weights.assign([0.5, -1.0, 2.0])
    weights = np.exp([0.5, -1.0, 2.0]) / np.exp([0.5, -1.0, 2.0]).sum()
    expected = 2.0 * np.einsum("l,blsd->bsd", weights, layers)
    np.testing.assert_allclose(mix(layers), expected, rtol=1e-5)


def test_scalar_mix_layer_norm_ignores_padding():
    rng = np.random.default_rng(4)
    layers = rng.normal(3.0, 2.0, size=(1, 2, 6, 8)).astype(np.float32)
    mask = np.array([[1, 1, 1, 1, 0, 0]])
    padded = layers.copy()
    padded[:, :, 4:] = 1000.0  # padding content must not move the statistics
    mix = ScalarMix(layer_norm=True)
    out, out_padded = mix(layers, padding_mask=mask), mix(padded, padding_mask=mask)
    np.testing.assert_allclose(out[:, :4], out_padded[:, :4], rtol=1e-5, atol=1e-5)
    # Each normalized layer has mean 0 and variance 1 over its real positions.
    real = layers[0, :, :4]
    normalized = (real - real.mean(axis=(1, 2), keepdims=True)) / real.std(
        axis=(1, 2), keepdims=True
    )
    np.testing.assert_allclose(out[0, :4], normalized.mean(0), rtol=1e-4, atol=1e-5)


def test_bad_config_and_mix_arguments_are_rejected_with_their_name():
    with pytest.raises(ValueError, match="lstm_units"):
        ElmoConfig.tiny(lstm_units=0)
    with pytest.raises(ValueError, match="projection_dim"):
        ElmoConfig.tiny(projection_dim=-1)
    with pytest.raises(ValueError, match="dropout"):
        ElmoConfig.tiny(dropout=1.5)
    with pytest.raises(ValueError, match="layer_norm"):
        ScalarMix(layer_norm="yes")
    with pytest.raises(ValueError, match="layers stacked on axis 1"):
        ScalarMix()(np.zeros((2, 3), np.float32))
