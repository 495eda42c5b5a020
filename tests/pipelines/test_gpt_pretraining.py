import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from lmpipe.datasets.examples.stream import StreamPosition
from lmpipe.models.gpt import GptConfig
from lmpipe.models.samplers import generate
from lmpipe.pipelines.gpt_pretraining import GptPretraining

SEQ_LEN = 32


def tiny_config(tokenizer, **overrides):
    sizes = dict(vocabulary_size=tokenizer.vocabulary_size, dropout=0.0, max_sequence_length=64)
    return GptConfig.tiny(**{**sizes, **overrides})


@pytest.fixture(scope="module")
def trained(comedies, bert_tokenizer):
    pipe = GptPretraining(
        bert_tokenizer, seq_len=SEQ_LEN, config=tiny_config(bert_tokenizer), seed=1
    )
    history = pipe.fit(
        comedies, batch_size=16, epochs=3, steps_per_epoch=10, learning_rate=5e-3, verbose=0
    )
    return pipe, history


@pytest.mark.slow
def test_pretraining_on_real_text_lowers_the_loss(trained):
    pipe, history = trained
    losses = history.history["next_token_loss"]
    # From about log(30522) = 10.3 at initialization to far lower within 30 steps.
    assert losses[0] > losses[-1] + 1.0, losses
    assert losses[-1] < 0.8 * math.log(pipe.tokenizer.vocabulary_size)


@pytest.mark.slow
def test_evaluate_reports_loss_and_its_perplexity(trained, comedies):
    pipe, _ = trained
    results = pipe.evaluate(comedies, batch_size=16, steps=3, verbose=0)
    assert results["perplexity"] == pytest.approx(math.exp(results["next_token_loss"]))
    assert results["perplexity"] < pipe.tokenizer.vocabulary_size / 4


@pytest.mark.slow
def test_generate_returns_text_and_the_export_serves_the_same_text(trained, tmp_path):
    from lmpipe.serving.emulator.compat import ServingProcess

    pipe, _ = trained
    prompts = ["What say you, my lord", "I pray thee"]
    texts = pipe.generate(prompts, max_new_tokens=8)
    assert len(texts) == 2 and all(isinstance(t, str) and t for t in texts)
    # Greedy text is what the model's greedy tokens detokenize to.
    assert pipe.generate(prompts[:1], max_new_tokens=8) == texts[:1]
    path = pipe.export(str(tmp_path / "gpt"), max_new_tokens=8)
    with ServingProcess(path) as server:
        inputs = server.signatures["serving_default"]["inputs"]
        assert list(inputs) == ["text"]
        served = server.predict(
            "serving_default", {"text": np.array([p.encode() for p in prompts], dtype=object)}
        )
    assert [t.decode("utf-8") for t in served["text"].tolist()] == texts


@pytest.mark.slow
def test_save_and_load_generate_the_same_text(trained, tmp_path):
    pipe, _ = trained
    pipe.save(str(tmp_path / "saved"))
    restored = GptPretraining.load(str(tmp_path / "saved"))
    assert restored.config == pipe.config and restored.options.seq_len == SEQ_LEN
    prompts = ["Good morrow"]
    for strategy in ("greedy", "top_p"):
        assert restored.generate(prompts, max_new_tokens=6, strategy=strategy) == pipe.generate(
            prompts, max_new_tokens=6, strategy=strategy
        )


@pytest.fixture(scope="module")
def eos_prone(bert_tokenizer):
    """An untrained pipeline whose final LayerNorm bias adds 11 to the `[SEP]` logit (and a
    little to the others): `[SEP]`, the end of a document, comes after a few tokens."""
    keras.utils.set_random_seed(2)
    pipe = GptPretraining(bert_tokenizer, seq_len=SEQ_LEN, config=tiny_config(bert_tokenizer))
    pipe.model = pipe.build_model()
    embeddings = keras.ops.convert_to_numpy(pipe.model.token_embedding.embeddings)
    sep_embedding = embeddings[bert_tokenizer.sep_id]
    norm = pipe.model.final_layer_norm
    norm.beta.assign(norm.beta + 11.0 * sep_embedding / (sep_embedding @ sep_embedding))
    return pipe


@pytest.mark.parametrize("strategy", ["greedy", "top_k", "top_p", "beam"])
def test_generated_text_ends_at_the_first_sep(eos_prone, strategy):
    pipe, steps = eos_prone, 8
    tokenizer = pipe.tokenizer
    prompts = ["What say you, my lord", "I pray thee", "Good morrow", "Come, sir"] * 2
    settings = dict(max_new_tokens=steps, strategy=strategy, k=50, p=0.9, seed=3, beam_width=3)
    texts = pipe.generate(prompts, **settings)
    # The tokens behind the text: the prompts as `generate_texts` builds them, [SEP] first.
    pieces = tokenizer.tokenize(tf.constant(prompts))
    separators = tf.fill([len(prompts), 1], tf.constant(tokenizer.sep_id, tf.int32))
    prompt_ids = tf.concat([separators, pieces], axis=1)
    out = generate(
        pipe.model,
        prompt_ids.to_tensor(default_value=tokenizer.pad_id),
        tf.ones_like(prompt_ids, tf.int32).to_tensor(),
        eos_id=tokenizer.sep_id,
        pad_id=tokenizer.pad_id,
        **settings,
    )
    ended = 0
    for text, tokens in zip(texts, out.token_ids.numpy(), strict=True):
        end = np.flatnonzero(tokens == tokenizer.sep_id)
        end = end[0] if len(end) else steps
        ended += end < steps - 1
        assert np.all(tokens[end + 1 :] == tokenizer.pad_id), tokens
        before = tokenizer.detokenize(tokens[None, :end], skip_special_tokens=True)
        assert text == before[0].numpy().decode("utf-8")
    assert ended >= len(prompts) // 2


def batches_of(dataset, count):
    return [
        {name: value.numpy() for name, value in {**features, **labels}.items()}
        for features, labels in dataset.take(count)
    ]


def test_dataset_from_after_a_batch_gives_the_batches_after_it(comedies, bert_tokenizer):
    pipe = GptPretraining(
        bert_tokenizer, seq_len=SEQ_LEN, config=tiny_config(bert_tokenizer), group_size=2
    )
    whole = batches_of(pipe.dataset(comedies, 16), 16)
    windows = {tuple(row[:2]) for batch in whole for row in batch["stream_position"]}
    assert len(windows) >= 3
    for done, make in (
        (5, lambda after: pipe.dataset(comedies, 16, start=after)),
        (11, lambda after: pipe.training_batches(comedies, 16, None, start=after)),
    ):
        after = StreamPosition.after({"stream_position": whole[done - 1]["stream_position"]})
        resumed = batches_of(make(after), 16 - done)
        for batch, expected in zip(resumed, whole[done:], strict=True):
            assert sorted(batch) == sorted(expected)
            for name in batch:
                assert batch[name].tobytes() == expected[name].tobytes(), name


def test_document_attention_gives_document_ids_and_can_be_turned_off(comedies, bert_tokenizer):
    config = tiny_config(bert_tokenizer)
    on = GptPretraining(bert_tokenizer, seq_len=SEQ_LEN, config=config)
    off = GptPretraining(bert_tokenizer, seq_len=SEQ_LEN, config=config, document_attention=False)
    assert on.options.document_attention is True
    (features_on, labels_on), (features_off, labels_off) = (
        next(iter(pipe.dataset(comedies, 8))) for pipe in (on, off)
    )
    assert sorted(features_on) == ["document_ids", "padding_mask", "stream_position", "token_ids"]
    assert sorted(features_off) == ["padding_mask", "stream_position", "token_ids"]
    for name in features_off:
        np.testing.assert_array_equal(features_on[name], features_off[name])
    with pytest.raises(ValueError, match="document_attention"):
        GptPretraining(bert_tokenizer, seq_len=SEQ_LEN, config=config, document_attention="no")


def test_bad_pipeline_arguments_are_rejected_with_their_name(bert_tokenizer, comedies):
    with pytest.raises(ValueError, match="seq_len"):
        GptPretraining(bert_tokenizer, seq_len=1, config=tiny_config(bert_tokenizer))
    with pytest.raises(ValueError, match="max_sequence_length"):
        GptPretraining(bert_tokenizer, seq_len=65, config=tiny_config(bert_tokenizer))
    with pytest.raises(ValueError, match="vocabulary_size"):
        GptPretraining(bert_tokenizer, seq_len=8, config=GptConfig.tiny(vocabulary_size=100))
    pipe = GptPretraining(bert_tokenizer, seq_len=8, config=tiny_config(bert_tokenizer))
    with pytest.raises(ValueError, match="batch_size"):
        pipe.fit(comedies, batch_size=0, steps_per_epoch=1)
    with pytest.raises(ValueError, match="no model yet"):
        pipe.generate(["hello"])
    with pytest.raises(ValueError, match="max_new_tokens"):
        pipe.generation_function(max_new_tokens=0)
