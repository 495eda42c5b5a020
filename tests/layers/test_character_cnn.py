import keras
import numpy as np
import pytest

from lmpipe.layers.character_cnn import PUBLISHED_FILTERS, CharacterCNN
from lmpipe.layers.token_spelling import TokenSpelling
from tests.layer_checks import check_layer

RNG = np.random.default_rng(21)


def character_ids(batch=2, tokens=3, characters=6):
    ids = RNG.integers(1, 20, (batch, tokens, characters)).astype(np.int32)
    ids[:, :, -2:] = 19  # padding characters after the end of word, as in bilm-tf
    ids[1, 2] = 0  # a padding token: no characters
    return ids


def test_character_cnn_equals_a_numpy_reference_on_hand_set_weights():
    cnn = CharacterCNN(3, filters=((1, 2), (3, 4)), num_highway_layers=1, num_characters=20)
    ids = character_ids()
    cnn.build(ids.shape)
    weights = {w.path.removeprefix("character_cnn/"): w for w in cnn.weights}
    values = {path: RNG.normal(size=w.shape).astype(np.float32) for path, w in weights.items()}
    for path, value in values.items():
        weights[path].assign(value)

    def dense(x, name):
        return x @ values[f"{name}/kernel"] + values.get(f"{name}/bias", 0.0)

    e = values["character_embedding/embeddings"][ids]  # [B, S, C, 16]
    pooled = []
    for index, (width, _) in enumerate(((1, 2), (3, 4))):
        kernel = values[f"convolution_{index}/kernel"][0]  # [width, 16, count]
        windows = [
            np.einsum("bswe,wen->bsn", e[:, :, t : t + width], kernel)
            for t in range(ids.shape[-1] - width + 1)
        ]
        convolved = np.stack(windows, axis=2) + values[f"convolution_{index}/bias"]
        pooled.append(np.maximum(convolved.max(axis=2), 0.0))
    y = np.concatenate(pooled, axis=-1)  # [B, S, 6]
    gate = 1.0 / (1.0 + np.exp(-dense(y, "highway_0_gate")))
    y = gate * np.maximum(dense(y, "highway_0_transform"), 0.0) + (1.0 - gate) * y
    expected = dense(y, "projection")

    np.testing.assert_allclose(cnn(ids), expected, rtol=1e-4, atol=1e-4)


def test_published_character_cnn_has_bilm_tfs_parameter_count():
    cnn = CharacterCNN(512)
    cnn.build((None, None, 50))
    # char_embed [262, 16]; W_cnn_k [1, w, 16, n] and b_cnn_k [n]; per highway layer W_carry,
    # W_transform [2048, 2048] and their biases; W_proj [2048, 512], b_proj [512].
    convolutions = sum(width * 16 * count + count for width, count in PUBLISHED_FILTERS)
    highways = 2 * 2 * (2048 * 2048 + 2048)
    assert cnn.num_filters == 2048
    assert cnn.count_params() == 262 * 16 + convolutions + highways + 2048 * 512 + 512
    assert cnn.count_params() == 18_037_856
    bias = keras.ops.convert_to_numpy(cnn.highways[0][0].bias)
    np.testing.assert_array_equal(bias, np.full(2048, -2.0))  # the gates carry the input


def test_character_cnn_passes_the_standard_layer_checks(tmp_path):
    check_layer(
        CharacterCNN,
        {"output_dim": 5, "filters": [[1, 3], [2, 4]], "num_characters": 20},
        {"character_ids": character_ids()},
        expected_output_shape=(2, 3, 5),
        tmp_path=tmp_path,
        expected_num_trainable_weights=1 + 2 * 2 + 2 * 2 * 2 + 2,
    )


def test_token_spelling_looks_up_the_table_it_saves(tmp_path):
    table = RNG.integers(0, 262, (7, 4)).astype(np.int32)
    spelling = TokenSpelling(7, 4)
    spelling.set_spellings(table)
    ids = np.array([[3, 0, 6], [1, 1, 2]], np.int32)
    np.testing.assert_array_equal(spelling(ids), table[ids])
    inputs = keras.Input((None,), dtype="int32")
    model = keras.Model(inputs, spelling(inputs))
    model.save(str(tmp_path / "spelling.keras"))
    restored = keras.models.load_model(str(tmp_path / "spelling.keras"))
    np.testing.assert_array_equal(restored(ids), table[ids])
    assert not spelling.trainable_weights and len(spelling.non_trainable_weights) == 1


def test_bad_arguments_are_rejected_with_their_name():
    with pytest.raises(ValueError, match="filters"):
        CharacterCNN(4, filters=[[1, 2, 3]])
    with pytest.raises(ValueError, match=r"filters\[1\] count"):
        CharacterCNN(4, filters=[[1, 2], [2, 0]])
    with pytest.raises(ValueError, match="num_highway_layers"):
        CharacterCNN(4, num_highway_layers=-1)
    with pytest.raises(ValueError, match="widest filter spans 7 characters"):
        CharacterCNN(4)(np.zeros((1, 2, 5), np.int32))
    with pytest.raises(ValueError, match="spellings"):
        TokenSpelling(3, 4).set_spellings(np.zeros((3, 5), np.int32))
