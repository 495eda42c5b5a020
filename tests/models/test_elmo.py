import keras
import numpy as np
import pytest

from lmpipe.layers.projected_lstm_cell import ProjectedLSTMCell
from lmpipe.layers.scalar_mix import ScalarMix
from lmpipe.models import count_parameters
from lmpipe.models.configs import config_from_dict, config_to_dict
from lmpipe.models.elmo import ElmoConfig, ElmoLanguageModel, elmo, reverse_real_tokens
from tests.fresh_process import json_from_fresh_process
from tests.layer_checks import check_layer

VOCAB = 53
D = 16
CHARACTERS = dict(
    token_encoder="characters",
    character_filters=((1, 4), (2, 6), (3, 6)),
    num_highway_layers=1,
    max_characters_per_token=6,
)


def spellings():
    """A spelling of each of the VOCAB tokens: distinct rows of bilm-tf's character ids."""
    rng = np.random.default_rng(9)
    table = np.full((VOCAB, 6), 261, np.int32)
    table[:, 0] = 259
    table[:, 1:4] = rng.integers(98, 123, (VOCAB, 3))
    table[:, 4] = 260
    table[0] = 0  # the padding token
    return table


@pytest.fixture(scope="module", params=["embedding", "characters"])
def model(request):
    keras.utils.set_random_seed(3)
    sizes = dict(vocabulary_size=VOCAB, embedding_dim=D, lstm_units=24, projection_dim=D)
    if request.param == "embedding":
        return elmo(ElmoConfig.tiny(**sizes, dropout=0.0))
    return elmo(ElmoConfig.tiny(**sizes, **CHARACTERS, dropout=0.0), spellings())


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


def test_layer_zero_is_the_shared_token_encoding_twice(model):
    ids, mask = inputs()
    out = run(model, ids, mask)
    assert out["layers"].shape == (2, 3, 10, 2 * D)
    if model.config.token_encoder == "characters":
        embedding = model.get_layer("character_cnn")(spellings()[ids])
    else:
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
    if model.config.token_encoder == "characters":  # the spellings come back with the weights
        spelling = restored.get_layer("token_spelling").spellings
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(spelling), spellings())
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


def test_every_lstm_is_an_lstmp_whose_projection_is_the_recurrent_state(model):
    cells = [layer.cell for layer in model.layers if isinstance(layer, keras.layers.RNN)]
    assert len(cells) == 4 and all(isinstance(cell, ProjectedLSTMCell) for cell in cells)
    for cell in cells:
        assert (cell.cell_clip, cell.proj_clip) == (3.0, 3.0)
        assert tuple(cell.recurrent_kernel.shape) == (D, 4 * 24)  # fed back: h, not m
        assert tuple(cell.projection_kernel.shape) == (24, D)


def lstm_parameters(model):
    return sum(
        layer.count_params() for layer in model.layers if isinstance(layer, keras.layers.RNN)
    )


def test_small_preset_has_lstmp_parameter_counts():
    config = ElmoConfig.small(vocabulary_size=10)
    model = ElmoLanguageModel(config)
    # Per layer and direction 4U (E + P) + 4U + U P with U = 1024, E = P = 128; four of
    # them: 4,734,976 (a full-width LSTM followed by a projection had 19,415,040).
    per_layer = 4 * 1024 * (128 + 128) + 4 * 1024 + 1024 * 128
    assert lstm_parameters(model) == 4 * per_layer == 4_734_976
    assert config.parameter_count() == {
        "token_encoder": 10 * 128,
        "lstm": 4_734_976,
        "softmax": 0,  # tied to the token embedding
    }
    assert count_parameters(model) == sum(config.parameter_count().values())


@pytest.mark.slow
def test_published_preset_has_bilm_tfs_parameter_count():
    config = ElmoConfig.original(vocabulary_size=100)
    # bilm-tf's options.json for the published ("original", 5.5B) model.
    assert config.character_filters == (
        (1, 32), (2, 32), (3, 64), (4, 128), (5, 256), (6, 512), (7, 1024)
    )  # fmt: skip
    assert (config.num_highway_layers, config.embedding_dim, config.character_dim) == (2, 512, 16)
    assert (config.lstm_units, config.projection_dim, config.num_layers) == (4096, 512, 2)
    assert (config.cell_clip, config.proj_clip, config.max_characters_per_token) == (3, 3, 50)
    # The model's counts, built in a fresh process (its 109M weights would stay with this one).
    script = (
        "import json, keras\n"
        "from lmpipe.models import count_parameters\n"
        "from lmpipe.models.elmo import ElmoConfig, ElmoLanguageModel\n"
        "model = ElmoLanguageModel(ElmoConfig.original(vocabulary_size=100))\n"
        "lstm = sum(l.count_params() for l in model.layers if isinstance(l, keras.layers.RNN))\n"
        "cnn = count_parameters(model.get_layer('character_cnn'))\n"
        "print(json.dumps([lstm, cnn, count_parameters(model)]))"
    )
    model_lstm, model_encoder, model_total = json_from_fresh_process(script)
    # bilm-tf's variables: LSTMCell W_0 [512 + 512, 4 * 4096], B [4 * 4096], W_P_0
    # [4096, 512], for 2 layers x 2 directions: 75,563,008, the "75.6M".
    lstm = 4 * ((512 + 512) * 4 * 4096 + 4 * 4096 + 4096 * 512)
    # char_embed [262, 16], W_cnn_k [1, w, 16, n] + b_cnn_k [n], 2 highway layers of
    # W_carry, W_transform [2048, 2048] + biases, W_proj [2048, 512] + b_proj: 18,037,856.
    filters = sum(width * 16 * count + count for width, count in config.character_filters)
    encoder = 262 * 16 + filters + 2 * 2 * (2048 * 2048 + 2048) + 2048 * 512 + 512
    softmax = 100 * 512 + 100  # softmax W [V, 512], b [V]
    assert model_lstm == lstm == 75_563_008
    assert model_encoder == encoder == 18_037_856
    # The biLM without its softmax: AllenNLP's "93.6M parameters" for this model.
    assert model_total - softmax == lstm + encoder == 93_600_864
    assert config.parameter_count() == {"token_encoder": encoder, "lstm": lstm, "softmax": softmax}


def test_configuration_survives_json_and_checks_its_new_fields():
    config = ElmoConfig.original()
    assert config_from_dict(config_to_dict(config)) == config  # filters back as tuples
    with pytest.raises(ValueError, match="token_encoder"):
        ElmoConfig.tiny(token_encoder="words")
    with pytest.raises(ValueError, match="cell_clip"):
        ElmoConfig.tiny(cell_clip=0)
    with pytest.raises(ValueError, match=r"character_filters\[0\] width"):
        ElmoConfig.tiny(character_filters=[[0, 3]])
    with pytest.raises(ValueError, match="more than `max_characters_per_token`"):
        ElmoConfig.tiny(max_characters_per_token=5)  # the published filters reach 7
    with pytest.raises(ValueError, match="token_characters"):
        ElmoLanguageModel(ElmoConfig.tiny(vocabulary_size=VOCAB), token_characters=spellings())
    with pytest.raises(ValueError, match="spellings"):
        ElmoLanguageModel(
            ElmoConfig.tiny(vocabulary_size=VOCAB, **CHARACTERS), token_characters=spellings().T
        )


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
