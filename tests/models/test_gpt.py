import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from lmpipe.models.gpt import GptCausalLM, GptConfig, gpt, position_ids, self_attention_mask
from lmpipe.models.samplers import TopKSampler, TopPSampler, generate
from tests.fresh_process import json_from_fresh_process

VOCAB = 61


@pytest.fixture(scope="module")
def model():
    keras.utils.set_random_seed(7)
    return gpt(GptConfig.tiny(vocabulary_size=VOCAB, dropout=0.0, max_sequence_length=40))


def full_logits(model, ids):
    ids = np.asarray([ids], np.int32)
    return model({"token_ids": ids, "padding_mask": np.ones_like(ids)}).numpy()[0]


PROMPTS = np.array([[5, 6, 7, 8, 9], [0, 0, 11, 12, 13], [14, 15, 16, 0, 0]], np.int32)
MASKS = (PROMPTS > 0).astype(np.int32)


def real_prompt(row):
    return PROMPTS[row][MASKS[row] == 1].tolist()


def test_perturbing_a_token_changes_no_logit_before_it(model):
    rng = np.random.default_rng(0)
    ids = rng.integers(5, VOCAB, (2, 12)).astype(np.int32)
    mask = np.ones_like(ids)
    mask[1, 10:] = 0
    base = model({"token_ids": ids, "padding_mask": mask}).numpy()
    for t in (0, 4, 9):
        changed = ids.copy()
        changed[:, t] = (changed[:, t] + 1 - 5) % (VOCAB - 5) + 5
        logits = model({"token_ids": changed, "padding_mask": mask}).numpy()
        np.testing.assert_allclose(logits[:, :t], base[:, :t], atol=1e-6)
        assert np.abs(logits[:, t:] - base[:, t:]).max() > 1e-3


SEP = 3


def packed(*documents, length=None):
    """A row `[SEP] doc [SEP] doc ...` padded to `length`, with its `document_ids`."""
    ids, owners = [], []
    for number, document in enumerate(documents, start=1):
        ids += [SEP, *document]
        owners += [number] * (1 + len(document))
    padding = (length or len(ids)) - len(ids)
    mask = [1] * len(ids) + [0] * padding
    return ids + [0] * padding, mask, owners + [0] * padding


def test_no_position_of_a_packed_row_attends_across_a_document_boundary(comedies, bert_tokenizer):
    from lmpipe.datasets import TextCorpus
    from lmpipe.datasets.examples.causal_lm import causal_lm_examples

    # Real text, short documents: the first speeches of 40 scenes, several to a row.
    scenes = [scene[:2] for scene in list(comedies.iter_documents())[:40]]
    dataset = causal_lm_examples(
        TextCorpus.from_documents(scenes),
        bert_tokenizer,
        seq_len=64,
        batch_size=32,
        seed=0,
        epochs=1,
        document_ids=True,
    )
    features, _ = next(iter(dataset))
    documents = features["document_ids"].numpy()
    padding = features["padding_mask"].numpy()
    mask = self_attention_mask(features["padding_mask"], features["document_ids"]).numpy()
    real = padding == 1
    same = documents[:, :, None] == documents[:, None, :]
    earlier = np.tril(np.ones(mask.shape[1:], bool))[None]
    # A real query sees exactly the real keys of its document up to itself.
    expected = same & earlier & real[:, None, :]
    np.testing.assert_array_equal(mask[real], expected[real])
    assert np.sum(documents.max(axis=1) > 1) >= 10  # rows that pack several documents
    # Positions restart at each document's opening [SEP].
    positions = position_ids(features["padding_mask"], features["document_ids"]).numpy()
    starts = np.concatenate([np.ones_like(documents[:, :1]), np.diff(documents, axis=1)], 1)
    np.testing.assert_array_equal(positions[real & (starts == 1)], 0)
    np.testing.assert_array_equal(np.diff(positions, axis=1)[(real & (starts == 0))[:, 1:]], 1)


def test_a_documents_logits_do_not_change_with_its_neighbours(model):
    rng = np.random.default_rng(3)
    document = rng.integers(5, VOCAB, 9).tolist()
    rows = [
        packed(document, length=30),
        packed(rng.integers(5, VOCAB, 4).tolist(), document, [7, 8, 9], length=30),
        packed(rng.integers(5, VOCAB, 11).tolist(), document, rng.integers(5, VOCAB, 7).tolist()),
    ]
    starts = [0, 5, 12]
    batch = {
        name: np.array([row[index] for row in rows], np.int32)
        for index, name in enumerate(("token_ids", "padding_mask", "document_ids"))
    }
    logits = model(batch).numpy()
    alone = logits[0, : 1 + len(document)]
    for row, start in enumerate(starts[1:], start=1):
        np.testing.assert_allclose(logits[row, start : start + len(alone)], alone, atol=1e-5)
    # Without document_ids the row is one document: the neighbours before it are read.
    across = model({"token_ids": batch["token_ids"], "padding_mask": batch["padding_mask"]})
    seen = across.numpy()[1, starts[1] : starts[1] + len(alone)]
    assert np.abs(seen - alone).max() > 1e-3


def test_a_row_without_document_ids_is_one_document(model):
    ids, mask, _ = packed([5, 6, 7], [8, 9], length=9)
    ids, mask = np.array([ids], np.int32), np.array([mask], np.int32)
    without = model({"token_ids": ids, "padding_mask": mask}).numpy()
    one = model({"token_ids": ids, "padding_mask": mask, "document_ids": mask}).numpy()
    np.testing.assert_array_equal(without, one)


def test_output_is_float32_logits_over_the_vocabulary(model):
    ids = np.ones((3, 9), np.int32)
    logits = model({"token_ids": ids, "padding_mask": ids})
    assert logits.dtype == "float32" and tuple(logits.shape) == (3, 9, VOCAB)


def test_cached_greedy_generation_equals_running_the_full_model_again(model):
    out = generate(model, PROMPTS, MASKS, max_new_tokens=6, return_logits=True)
    for row in range(len(PROMPTS)):
        sequence = real_prompt(row)
        for step in range(6):
            logits = full_logits(model, sequence)[-1]
            np.testing.assert_allclose(out.logits[row, step], logits, atol=1e-4)
            sequence.append(int(np.argmax(logits)))
        assert out.token_ids[row].numpy().tolist() == sequence[-6:]
    assert np.all(out.padding_mask.numpy() == 1)


@pytest.mark.parametrize("strategy", ["top_k", "top_p"])
def test_sampled_steps_see_the_logits_of_the_full_model(model, strategy):
    out = generate(
        model, PROMPTS, MASKS, max_new_tokens=5, strategy=strategy, k=5, seed=3, return_logits=True
    )
    for row in range(len(PROMPTS)):
        sequence = real_prompt(row) + out.token_ids[row].numpy().tolist()
        logits = full_logits(model, sequence)
        prompt_length = len(real_prompt(row))
        np.testing.assert_allclose(
            out.logits[row], logits[prompt_length - 1 : prompt_length + 4], atol=1e-4
        )


MANY_PROMPTS, MANY_MASKS = np.tile(PROMPTS, (4, 1)), np.tile(MASKS, (4, 1))


def test_top_k_never_emits_a_token_outside_the_k_best(model):
    k = 3
    out = generate(
        model,
        MANY_PROMPTS,
        MANY_MASKS,
        max_new_tokens=8,
        strategy="top_k",
        k=k,
        temperature=3.0,
        seed=1,
        return_logits=True,
    )
    logits, tokens = out.logits.numpy(), out.token_ids.numpy()
    ranks = (logits > np.take_along_axis(logits, tokens[..., None], -1)).sum(-1)
    assert ranks.max() < k
    # With a high temperature the sampler does use more than the best token.
    assert (ranks > 0).any()


def test_top_p_never_emits_a_token_outside_the_nucleus(model):
    p = 0.5
    out = generate(
        model,
        MANY_PROMPTS,
        MANY_MASKS,
        max_new_tokens=8,
        strategy="top_p",
        p=p,
        temperature=4.0,
        seed=1,
        return_logits=True,
    )
    logits = out.logits.numpy() / 4.0
    tokens = out.token_ids.numpy()
    probabilities = np.exp(logits - logits.max(-1, keepdims=True))
    probabilities /= probabilities.sum(-1, keepdims=True)
    chosen = np.take_along_axis(probabilities, tokens[..., None], -1)
    # The probability mass of strictly better tokens is below p for a nucleus token.
    mass_before = np.where(probabilities > chosen, probabilities, 0.0).sum(-1)
    assert mass_before.max() < p
    assert (mass_before > 0).any()


def test_filter_logits_keeps_exactly_the_nucleus():
    logits = np.log(np.array([[0.5, 0.3, 0.15, 0.05]], np.float32))
    kept = np.isfinite(TopPSampler(p=0.8).filter(logits).numpy())
    assert kept.tolist() == [[True, True, False, False]]
    kept = np.isfinite(TopPSampler(p=0.81).filter(logits).numpy())
    assert kept.tolist() == [[True, True, True, False]]
    kept = np.isfinite(TopKSampler(k=1).filter(logits).numpy())
    assert kept.tolist() == [[True, False, False, False]]


def test_the_same_seed_gives_the_same_samples_and_another_seed_others(model):
    def sample(seed):
        out = generate(
            model,
            PROMPTS,
            MASKS,
            max_new_tokens=8,
            strategy="top_k",
            k=20,
            temperature=5.0,
            seed=seed,
        )
        return out.token_ids.numpy()

    np.testing.assert_array_equal(sample(11), sample(11))
    assert not np.array_equal(sample(11), sample(12))


def test_padding_side_does_not_change_the_generated_tokens(model):
    left = generate(model, PROMPTS, MASKS, max_new_tokens=4).token_ids.numpy()
    for row in range(len(PROMPTS)):
        alone = generate(model, [real_prompt(row)], max_new_tokens=4).token_ids.numpy()
        np.testing.assert_array_equal(left[row], alone[0])


def test_generation_stops_each_row_at_eos(model):
    first = generate(model, PROMPTS, MASKS, max_new_tokens=6).token_ids.numpy()
    eos = int(first[0, 1])  # row 0 emits it at step 1 (or earlier)
    out = generate(model, PROMPTS, MASKS, max_new_tokens=6, eos_id=eos, pad_id=0)
    tokens, mask = out.token_ids.numpy(), out.padding_mask.numpy()
    for row in range(len(PROMPTS)):
        hits = np.nonzero(first[row] == eos)[0]
        end = hits[0] + 1 if len(hits) else 6
        assert mask[row].tolist() == [1] * end + [0] * (6 - end)
        assert tokens[row, :end].tolist() == first[row, :end].tolist()
        assert np.all(tokens[row, end:] == 0)


EOS = 4


@pytest.fixture(scope="module")
def eos_prone():
    """A tiny GPT whose final LayerNorm bias adds 3 to the EOS logit (and a little to the
    others): greedy decoding ends at once and sampling ends after a few tokens."""
    keras.utils.set_random_seed(8)
    eos_prone = gpt(GptConfig.tiny(vocabulary_size=VOCAB, dropout=0.0, max_sequence_length=40))
    eos_embedding = keras.ops.convert_to_numpy(eos_prone.token_embedding.embeddings)[EOS]
    norm = eos_prone.final_layer_norm
    norm.beta.assign(norm.beta + 3.0 * eos_embedding / (eos_embedding @ eos_embedding))
    return eos_prone


@pytest.mark.parametrize("strategy", ["greedy", "top_k", "top_p"])
def test_nothing_but_padding_follows_an_early_eos(eos_prone, strategy):
    steps, pad_id = 8, 0
    out = generate(
        eos_prone,
        MANY_PROMPTS,
        MANY_MASKS,
        max_new_tokens=steps,
        strategy=strategy,
        k=5,
        p=0.9,
        eos_id=EOS,
        pad_id=pad_id,
        seed=4,
    )
    tokens, mask = out.token_ids.numpy(), out.padding_mask.numpy()
    ends = [np.flatnonzero(row == EOS)[:1] for row in tokens]
    ends = [end[0] if len(end) else steps for end in ends]  # steps: no EOS
    assert sum(end < steps - 1 for end in ends) >= len(tokens) // 2  # most rows end early
    if strategy != "greedy":
        assert len(set(ends)) > 2  # sampled rows end at different steps
    for row, end in enumerate(ends):
        length = min(end + 1, steps)
        assert np.all(tokens[row, length:] == pad_id), tokens[row]
        assert mask[row].tolist() == [1] * length + [0] * (steps - length)


def test_generation_runs_in_a_tf_function_with_unknown_shapes(model):
    function = tf.function(
        lambda ids, mask: generate(model, ids, mask, max_new_tokens=4, strategy="top_p", seed=2),
        input_signature=[tf.TensorSpec([None, None], tf.int32)] * 2,
        jit_compile=False,
    )
    eager = generate(model, PROMPTS, MASKS, max_new_tokens=4, strategy="top_p", seed=2)
    traced = function(tf.constant(PROMPTS), tf.constant(MASKS))
    np.testing.assert_array_equal(traced.token_ids, eager.token_ids)


def test_save_and_load_keep_the_logits(model, tmp_path):
    path = str(tmp_path / "gpt.keras")
    model.save(path)
    restored = keras.models.load_model(path)
    assert isinstance(restored, GptCausalLM) and restored.config == model.config
    ids = np.array([[5, 6, 7]], np.int32)
    np.testing.assert_allclose(full_logits(restored, [5, 6, 7]), full_logits(model, [5, 6, 7]))
    # The head is the token embedding itself, not a copy.
    assert len(restored.token_embedding.weights) == 1
    assert ids.shape == (1, 3)


def test_initial_weights_have_gpt2s_measured_scales():
    config = GptConfig.tiny(
        vocabulary_size=1000, hidden_dim=256, num_heads=4, intermediate_dim=1024, num_layers=4
    )
    keras.utils.set_random_seed(0)
    model = gpt(config)
    residual = 0.02 / math.sqrt(2 * config.num_layers)  # 0.00707 for 4 layers
    groups = {0.02: [], 0.01: [], residual: []}
    for weight in model.weights:
        path, values = weight.path, keras.ops.convert_to_numpy(weight).ravel()
        if path.endswith(("/bias", "/beta")):
            np.testing.assert_array_equal(values, 0.0, err_msg=path)
        elif path.endswith("/gamma"):
            np.testing.assert_array_equal(values, 1.0, err_msg=path)
        elif path.startswith("position_embedding/"):
            groups[0.01].append(values)
        elif path.endswith(("attention_output/kernel", "output_dense/kernel")):
            groups[residual].append(values)
        else:  # the token embedding, the query, key, value and FFN W_1 kernels
            groups[0.02].append(values)
    # Sizes: 256,000 + 1,048,576 at 0.02, 32,768 at 0.01, 1,310,720 at the residual scale.
    for stddev, arrays in groups.items():
        values = np.concatenate(arrays)
        n = values.size
        # A sample of n normal draws: its mean has the standard error stddev / sqrt(n), its
        # standard deviation the relative one 1 / sqrt(2n); allow 6 of each (< 2.4% here).
        assert abs(values.mean()) < 6 * stddev / math.sqrt(n)
        assert values.std() == pytest.approx(stddev, rel=6 / math.sqrt(2 * n))
        # A plain normal, not a truncated one (0.88 times as wide, nothing beyond 2 stddev):
        # 4.55% of its draws lie beyond 2 standard deviations.
        beyond = np.mean(np.abs(values) > 2 * stddev)
        tail = math.erfc(math.sqrt(2.0))
        assert abs(beyond - tail) < 6 * math.sqrt(tail * (1 - tail) / n)


def test_bert_keeps_its_truncated_normal():
    from lmpipe.models.bert import BertConfig, bert

    keras.utils.set_random_seed(0)
    encoder = bert(BertConfig.tiny(vocabulary_size=1000))
    kernels = [w for w in encoder.weights if w.path.endswith(("/kernel", "/embeddings"))]
    values = np.concatenate([keras.ops.convert_to_numpy(w).ravel() for w in kernels])
    assert np.abs(values).max() <= 2 * 0.02  # truncated at 2 standard deviations
    assert values.std() == pytest.approx(0.02 * 0.8796, rel=0.03)


@pytest.mark.slow
def test_gpt2_small_has_124_million_parameters():
    assert GptConfig.small() == GptConfig.base()
    script = (
        "from lmpipe.models.bert import count_parameters\n"
        "from lmpipe.models.gpt import GptConfig, gpt\n"
        "print(count_parameters(gpt(GptConfig.small())))"
    )
    assert json_from_fresh_process(script) == 124_439_808


def test_bad_generation_arguments_are_rejected_with_their_name(model):
    def run(**overrides):
        arguments = dict(max_new_tokens=3)
        arguments.update(overrides)
        return generate(model, PROMPTS, MASKS, **arguments)

    for name, value in (
        ("max_new_tokens", 0),
        ("k", 0),
        ("p", 0.0),
        ("p", 1.5),
        ("temperature", 0.0),
        ("strategy", "sample"),
        ("beam_width", 0),
        ("length_penalty", "long"),
        ("seed", None),
    ):
        with pytest.raises(ValueError, match=name):
            run(**{"strategy": "top_p", name: value})
    with pytest.raises(ValueError, match="return_logits"):
        run(strategy="beam", return_logits=True)
    with pytest.raises(ValueError, match="prompt_mask"):
        generate(model, PROMPTS, MASKS[:2], max_new_tokens=3)  # batch size mismatch
    with pytest.raises(ValueError, match="max_sequence_length"):
        generate(model, PROMPTS, MASKS, max_new_tokens=36)


def test_bad_config_values_are_rejected_with_their_name():
    with pytest.raises(ValueError, match="num_heads"):
        GptConfig.tiny(hidden_dim=30, num_heads=4)
    with pytest.raises(ValueError, match="num_layers"):
        GptConfig.tiny(num_layers=0)
    with pytest.raises(ValueError, match="dropout"):
        GptConfig.tiny(dropout=1.0)
