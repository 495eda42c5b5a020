"""The `Pipeline` base: one loader for every family, checks before any data is read, seeding
that leaves the caller's random state alone, and validation during `fit`."""

import itertools
import json
import random

import keras
import numpy as np
import pytest

from lmpipe import pipelines
from lmpipe.datasets.corpora.corpus import TextCorpus
from lmpipe.layers.initializers import seeded
from lmpipe.models.gpt import GptConfig
from lmpipe.pipelines.saved_pipeline import PIPELINE_FILE
from lmpipe.tokenizers.wordpiece import WordPieceTokenizer
from tests.pipelines.test_training_options import Untouchable

VOCABULARY = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "to", "be", "or", "not", "."]


def gpt_pipeline(seed=1):
    tokenizer = WordPieceTokenizer(VOCABULARY)
    config = GptConfig.tiny(vocabulary_size=len(VOCABULARY), hidden_dim=8, num_heads=2)
    return pipelines.GptPretraining(tokenizer, config, seq_len=8, seed=seed)


def saved(tmp_path):
    pipe = gpt_pipeline()
    pipe.model = pipe.build_model()
    pipe.model({"token_ids": np.zeros([1, 8], np.int32), "padding_mask": np.ones([1, 8], np.int32)})
    pipe.save(str(tmp_path))
    return pipe


def test_one_loader_reads_the_family_and_refuses_what_it_cannot_load(tmp_path):
    pipe = saved(tmp_path)
    loaded = pipelines.load(str(tmp_path))
    assert type(loaded) is pipelines.GptPretraining and loaded.options == pipe.options
    assert loaded.config == pipe.config
    description = json.loads((tmp_path / PIPELINE_FILE).read_text())
    assert description["pipeline"] == "GptPretraining"
    assert description["options"] == {
        "seed": 1,
        "seq_len": 8,
        "group_size": 64,
        "document_attention": True,
    }
    for change, message in (
        ({"pipeline": "LlamaPretraining"}, "describes a 'LlamaPretraining' pipeline"),
        ({"options": {**description["options"], "colour": 1}}, "unknown option.*colour"),
        ({"config": {**description["config"], "class": "Nope"}}, "unknown model configuration"),
        ({"options": {**description["options"], "seq_len": 0}}, "seq_len"),
    ):
        (tmp_path / PIPELINE_FILE).write_text(json.dumps({**description, **change}))
        with pytest.raises(ValueError, match=message):
            pipelines.load(str(tmp_path))


def test_fit_checks_its_arguments_before_reading_any_data():
    pipe = gpt_pipeline()
    for arguments, message in (
        ({"batch_size": 0}, "batch_size"),
        ({"epochs": 1.5}, "epochs"),
        ({"steps_per_epoch": -1}, "steps_per_epoch"),
        ({"learning_rate": float("nan")}, "learning_rate"),
    ):
        with pytest.raises(ValueError, match=message):
            pipe.fit(Untouchable(), **arguments)
    with pytest.raises(ValueError, match="batch_size"):
        pipe.evaluate(Untouchable(), batch_size=0)


def test_seeded_builds_the_same_weights_and_gives_the_caller_its_random_state_back():
    def weights(seed):
        with seeded(seed):
            layer = keras.layers.Dense(4)
            layer.build((None, 3))
        return layer.kernel.numpy()

    random.seed(5)
    expected = random.random()
    random.seed(5)
    first = weights(1)
    assert random.random() == expected  # the caller's sequence goes on as if untouched
    np.testing.assert_array_equal(weights(1), first)
    assert not np.array_equal(weights(2), first)


def test_validation_data_is_evaluated_at_every_epoch(comedies, bert_tokenizer):
    config = GptConfig.tiny(vocabulary_size=bert_tokenizer.vocabulary_size, hidden_dim=16)
    pipe = pipelines.GptPretraining(bert_tokenizer, config, seq_len=16, seed=0)
    documents = itertools.islice(comedies.iter_documents(), 3)
    held_out = TextCorpus.from_documents([document[:20] for document in documents])
    history = pipe.fit(
        comedies, batch_size=4, epochs=2, steps_per_epoch=2, validation=held_out, verbose=0
    )
    losses = history.history["val_next_token_loss"]
    assert len(losses) == 2 and all(np.isfinite(losses))
    results = pipe.evaluate(held_out, batch_size=4)  # one pass, as validation runs it
    assert results["next_token_loss"] == pytest.approx(losses[-1], rel=1e-5)


def test_a_resumed_fit_says_where_it_resumes_and_a_finished_one_trains_nothing(
    comedies, bert_tokenizer, tmp_path, capsys
):
    config = GptConfig.tiny(vocabulary_size=bert_tokenizer.vocabulary_size, hidden_dim=16)
    arguments = dict(batch_size=4, steps_per_epoch=2, checkpoint_dir=str(tmp_path), verbose=1)
    pipelines.GptPretraining(bert_tokenizer, config, seq_len=16, seed=0).fit(
        comedies, epochs=1, **arguments
    )
    assert "Resuming" not in capsys.readouterr().out
    resumed = pipelines.GptPretraining(bert_tokenizer, config, seq_len=16, seed=0)
    history = resumed.fit(comedies, epochs=3, **arguments)
    assert (
        f"Resuming from step 2 of 6, the latest checkpoint in {str(tmp_path)!r}."
        in capsys.readouterr().out
    )
    assert len(history.history["loss"]) == 2  # the two epochs left
    finished = pipelines.GptPretraining(bert_tokenizer, config, seq_len=16, seed=0)
    assert finished.fit(comedies, epochs=3, **arguments).history == {}
    assert "Training already finished: 6 of 6 steps" in capsys.readouterr().out


def test_tensorboard_gets_loss_learning_rate_and_throughput_at_every_step(
    comedies, bert_tokenizer, tmp_path
):
    config = GptConfig.tiny(vocabulary_size=bert_tokenizer.vocabulary_size, hidden_dim=16)
    arguments = dict(batch_size=4, steps_per_epoch=3, checkpoint_dir=str(tmp_path), verbose=0)
    arguments.update(learning_rate=1e-3, warmup_steps=2)
    pipe = pipelines.GptPretraining(bert_tokenizer, config, seq_len=16, seed=0)
    pipe.fit(comedies, epochs=2, **arguments)
    scalars = step_scalars(tmp_path / "logs" / "steps")
    assert {"loss", "learning_rate", "examples_per_second"} <= set(scalars)
    assert [step for step, _ in scalars["loss"]] == [1, 2, 3, 4, 5, 6]
    # The rate of each update: BERT's warmup over 2 updates, then linear decay to 0 at 6.
    rates = [value for _, value in scalars["learning_rate"]]
    np.testing.assert_allclose(rates, [0.0, 5e-4, 1e-3, 7.5e-4, 5e-4, 2.5e-4], atol=1e-9)
    assert all(value > 0 for _, value in scalars["examples_per_second"])
    # A resumed run (one more epoch) goes on from the step it restored.
    resumed = pipelines.GptPretraining(bert_tokenizer, config, seq_len=16, seed=0)
    resumed.fit(comedies, epochs=3, **arguments)
    steps = [step for step, _ in step_scalars(tmp_path / "logs" / "steps")["loss"]]
    assert steps == [1, 2, 3, 4, 5, 6, 7, 8, 9]


def step_scalars(directory):
    """`{tag: [(step, value)]}` of the TensorBoard scalars in `directory`, by step."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(directory), size_guidance={"tensors": 0})
    events.Reload()
    return {
        tag: sorted((event.step, float(tf_value(event))) for event in events.Tensors(tag))
        for tag in events.Tags()["tensors"]
    }


def tf_value(event):
    import tensorflow as tf

    return tf.make_ndarray(event.tensor_proto)


@pytest.mark.parametrize("family", ["bert", "xlnet"])
def test_embed_is_the_mean_of_the_real_tokens_or_the_pooled_output(family):
    from lmpipe.datasets.examples.packing import pack_texts
    from lmpipe.models import BertConfig, XLNetConfig

    tokenizer = WordPieceTokenizer(VOCABULARY)
    sizes = dict(vocabulary_size=len(VOCABULARY), hidden_dim=8, num_heads=2, intermediate_dim=16)
    if family == "bert":
        config = BertConfig.tiny(**sizes, max_sequence_length=8)
        pipe = pipelines.BertPretraining(tokenizer, config, seq_len=8, seed=0)
    else:
        pipe = pipelines.XLNetPretraining(tokenizer, XLNetConfig.tiny(**sizes), seq_len=8, seed=0)
    with pytest.raises(ValueError, match="no model yet"):
        pipe.embed(["to be"])
    pipe.model = pipe.build_model()
    texts = ["to be or not to be", "not", ""]
    features = pack_texts(tokenizer, np.array(texts, dtype=object), 8, layout=pipe.packing_layout)
    outputs = pipe.encoder(features)
    mask = np.asarray(features["padding_mask"], np.float32)[:, :, None]
    mean = (np.asarray(outputs["sequence_output"]) * mask).sum(1) / mask.sum(1)
    np.testing.assert_allclose(pipe.embed(texts, batch_size=2), mean, rtol=1e-5, atol=1e-6)
    pooled = pipe.embed(texts, pooling="pooled")
    np.testing.assert_allclose(pooled, np.asarray(outputs["pooled_output"]), rtol=1e-5, atol=1e-6)
    assert pipe.embed([]).shape == (0, 8)
    with pytest.raises(ValueError, match="`pooling` must be one of 'mean', 'pooled'"):
        pipe.embed(texts, pooling="max")
