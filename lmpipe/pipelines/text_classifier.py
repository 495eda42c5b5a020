"""`TextClassifier`: fine-tune a pretrained encoder to classify texts and text pairs."""

import dataclasses

import keras
import numpy as np
import tensorflow as tf

from lmpipe.arguments import check_choice, check_dropout, check_number, check_positive_int
from lmpipe.contract import ENCODER_FEATURES, LABELS
from lmpipe.datasets.examples.length_groups import bucket_lengths, cut_to_bucket
from lmpipe.datasets.examples.packing import min_sequence_length, pack_texts
from lmpipe.datasets.labelled.labelled_examples import (
    LabelledExamples,
    check_pairs_fit,
    labelled_examples,
    text_array,
)
from lmpipe.models.sequence_classifier import POOLINGS, SequenceClassifier
from lmpipe.pipelines.fine_tuning import FineTuningPipeline
from lmpipe.pipelines.pipeline import PipelineOptions


@dataclasses.dataclass(frozen=True)
class TextClassifierOptions(PipelineOptions):
    """The options of `TextClassifier`.

    Attributes:
        num_classes: number of classes (at least 2); labels are `0 .. num_classes - 1`.
        seq_len: length of every example, special tokens included.
        labels: optional class names, one per class; examples may then give their label by
            name, and `classify` returns names.
        dropout: dropout rate on the pooled vector.
        pooling: the vector the head reads: "pooled", the encoder's `pooled_output` (`[CLS]`
            through BERT's pooler; what Hugging Face's `...ForSequenceClassification` reads);
            "mean", the mean of its `sequence_output` over the real tokens.
        seed: seed of the head's initialization, dropout and the shuffling.
    """

    num_classes: int = None
    seq_len: int = 128
    labels: tuple = None
    dropout: float = 0.1
    pooling: str = "pooled"

    def check(self):
        super().check()
        check_number("num_classes", self.num_classes, minimum=2, integer=True)
        check_number("seq_len", self.seq_len, minimum=min_sequence_length(1), integer=True)
        check_dropout("dropout", self.dropout)
        self.resolve("dropout", float(self.dropout))
        check_choice("pooling", self.pooling, POOLINGS)
        labels = self.labels
        if labels is None:
            return
        if isinstance(labels, str):
            raise ValueError(f"`labels` must be a list of class names, got {labels!r}.")
        labels = tuple(labels)
        if len(labels) != self.num_classes:
            raise ValueError(
                f"`labels` has {len(labels)} names for num_classes={self.num_classes}; it "
                "needs one per class."
            )
        for name in labels:
            if not isinstance(name, str) or not name:
                raise ValueError(f"`labels` must be non-empty strings, got {name!r}.")
        if len(set(labels)) != len(labels):
            raise ValueError(f"`labels` has duplicate names: {list(labels)!r}.")
        self.resolve("labels", labels)


class TextClassifier(FineTuningPipeline):
    """Fine-tuning: a pretrained encoder + a classification head on `[CLS]`, trained on labelled
    texts (or text pairs), with data, training, evaluation, prediction, save/load and export.

    Texts are tokenized and packed in the TensorFlow graph (tensorflow-text): `[CLS] A [SEP]`,
    or `[CLS] A [SEP] B [SEP]` for pairs with segment ids 0 for `[CLS] A [SEP]` and 1 for
    `B [SEP]` (for an XLNet encoder, XLNet's `A <sep> <cls>` / `A <sep> B <sep> <cls>`); a
    pair too long for `seq_len` loses tokens from the end of its longer side first (BERT's
    rule), a single text from its end; then padding to `seq_len`. Batches are
    `(features, labels)`: features `token_ids`, `segment_ids`, `padding_mask` int32
    `[B, seq_len]`, labels `{"labels": int32 [B]}`. `fit`, `evaluate` and `predict` batch
    texts of similar length together and cut each batch's padding to a length bucket
    (`length_buckets`): the same results with less work on short texts.

    The model (`SequenceClassifier`) is a copy of `encoder` with a dropout + dense head on its
    `pooled_output` (or, with `pooling="mean"`, on the mean of its `sequence_output` over the
    real tokens); `encoder` itself is never changed. Loss: sparse categorical
    cross-entropy; metric: accuracy.

    Args:
        tokenizer: the `WordPieceTokenizer` the encoder was pretrained with.
        encoder: a trained encoder `keras.Model` (inputs `token_ids`, `segment_ids`,
            `padding_mask`; outputs with `pooled_output`), e.g. `BertPretraining.encoder` or
            `lmpipe.interop.hf.bert_from_pretrained(directory)`.
        num_classes: number of classes (at least 2); labels are `0 .. num_classes - 1`.
        **options: the other fields of `TextClassifierOptions` (`seq_len`, `labels`,
            `dropout`, `pooling`, `seed`).

    Example:

        pipe = TextClassifier.from_pretrained(folder, num_classes=2, labels=["neg", "pos"])
        pipe.fit((texts, labels), batch_size=32, epochs=3)
        pipe.classify(["What a wonderful play."])  # ["pos"]

    Reference: Devlin et al., "BERT", 2019, section 4.1 and appendix A.3.
    """

    options_class = TextClassifierOptions
    predictions = ("classify", "embed")
    evaluation_data = "labelled"
    # BERT's fine-tuning learning rates are 2e-5 to 5e-5 (appendix A.3).
    training_defaults = {"learning_rate": 2e-5}

    def __init__(self, tokenizer, encoder, num_classes=None, **options):
        super().__init__(tokenizer, encoder, num_classes=num_classes, **options)

    # Data -------------------------------------------------------------------------------------

    def encode(self, texts, text_pairs=None):
        """Model inputs for `[N]` texts (and `[N]` second texts), in graph ops.

        Returns `token_ids`, `segment_ids`, `padding_mask` int32 `[N, seq_len]`: `[CLS] A [SEP]`
        or `[CLS] A [SEP] B [SEP]` (segment 1 from B on), truncated from the end of the longer
        side first, padded with `[PAD]` (mask 0).
        """
        if text_pairs is not None:
            check_pairs_fit(self.options.seq_len)
        return pack_texts(
            self.tokenizer, texts, self.options.seq_len, text_pairs, layout=self.packing_layout
        )

    def dataset(
        self,
        examples,
        batch_size,
        shuffle=True,
        epochs=None,
        input_context=None,
        drop_remainder=None,
    ):
        """Batches `(features, {"labels": int32 [B]})` of labelled examples.

        Args:
            examples: `(texts, labels)` or `(texts, text_pairs, labels)`, lists or numpy
                arrays of equal length (labels are class indices, or class names when the
                pipeline has `labels`); or a `tf.data.Dataset` of dicts `{"text", "label"}`
                (and `"text_pair"`), one example per element (see
                `lmpipe.datasets.labelled.labelled_examples`). Python examples are checked here; a
                Dataset's labels are checked in the graph as batches are made.
            batch_size: examples per batch (per replica with an `input_context`).
            shuffle: shuffle the examples, again at every epoch (deterministic given `seed`).
            epochs: passes over the examples; None repeats forever.
            input_context: a `tf.distribute.InputContext`: each input pipeline reads its own
                shard of the examples.
            drop_remainder: drop the last incomplete batch; by default only when repeating
                forever.
        """
        check_positive_int("batch_size", batch_size)
        source = self.check_data(examples, "examples")
        return self.batches(source, batch_size, shuffle, epochs, input_context, drop_remainder)

    def check_data(self, examples, name="examples"):
        """`examples` checked, as `LabelledExamples`: one dict per example, and their number."""
        if isinstance(examples, LabelledExamples):
            return examples
        if name == "data":
            name = "train_examples"
        options = self.options
        return labelled_examples(
            examples, name, options.num_classes, options.labels, options.seq_len
        )

    def model_inputs(self, batch):
        """A batch of examples (dicts `text`, `text_pair`, `label`) as `(features, labels)`,
        each label checked in the graph (a Dataset's labels are not checked before)."""
        num_classes = self.options.num_classes
        labels = tf.cast(batch["label"], tf.int32)  # [B]
        checks = [
            tf.debugging.assert_non_negative(
                labels, message="A `label` of the examples is negative."
            ),
            tf.debugging.assert_less(
                labels,
                num_classes,
                message=f"A `label` of the examples is not below num_classes={num_classes}.",
            ),
        ]
        with tf.control_dependencies(checks):
            labels = tf.identity(labels)
        features = self.encode(batch["text"], batch.get("text_pair"))
        return features, {LABELS: labels}

    # Model ------------------------------------------------------------------------------------

    def build_model(self):
        """A new `SequenceClassifier`: a copy of the starting encoder and a fresh head.

        The copy is made where this is called, so that inside a distribution strategy's scope
        its variables are the strategy's; the starting encoder keeps its weights.
        """
        return SequenceClassifier(
            self.encoder_copy(),
            self.options.num_classes,
            dropout=self.options.dropout,
            kernel_initializer=self.head_initializer(),
            pooling=self.options.pooling,
            name="text_classifier",
        )

    # Prediction -------------------------------------------------------------------------------

    def predict(self, texts, text_pairs=None, batch_size=64):
        """Class probabilities, a float32 numpy array `[N, num_classes]`, for `[N]` texts (and
        `[N]` second texts), in their order (they are predicted sorted by length)."""
        check_positive_int("batch_size", batch_size)
        texts = text_array(texts, "texts")
        columns = {"text": texts}
        if text_pairs is not None:
            columns["text_pair"] = text_array(text_pairs, "text_pairs")
            if len(columns["text_pair"]) != len(texts):
                raise ValueError(
                    f"`texts` has {len(texts)} entries and `text_pairs` "
                    f"{len(columns['text_pair'])}; they must be of equal length."
                )
        model = self.evaluation_model(batch_size)
        order = None
        if self.length_buckets:
            # Texts of similar length batched together, each batch cut to its length bucket
            # (the padding mask makes the cut exact); characters sort well enough for that.
            characters = sum(
                np.fromiter(map(len, column), np.int64, len(column)) for column in columns.values()
            )
            order = np.argsort(characters, kind="stable")
            columns = {name: column[order] for name, column in columns.items()}
        lengths = bucket_lengths(self.options.seq_len)

        def features(batch):
            packed = self.encode(batch["text"], batch.get("text_pair"))
            if order is None:
                return packed
            return cut_to_bucket(packed, self.options.seq_len, lengths)

        dataset = tf.data.Dataset.from_tensor_slices(columns).batch(batch_size)
        dataset = dataset.map(features, num_parallel_calls=tf.data.AUTOTUNE)
        logits = model.predict(dataset, verbose=0)["logits"].astype(np.float64)
        if order is not None:
            logits[order] = logits.copy()
        logits -= logits.max(axis=-1, keepdims=True)
        probabilities = np.exp(logits)
        return (probabilities / probabilities.sum(axis=-1, keepdims=True)).astype(np.float32)

    def classify(self, texts, text_pairs=None, batch_size=64):
        """The most probable class of each text: its name if the pipeline has `labels`, else
        its index."""
        predicted = self.predict(texts, text_pairs, batch_size=batch_size).argmax(axis=-1)
        if self.options.labels is None:
            return [int(index) for index in predicted]
        return [self.options.labels[index] for index in predicted]

    # Save, load, export -----------------------------------------------------------------------

    def class_names(self):
        """The `labels` option: the class names a Hugging Face folder's `id2label` holds."""
        return self.options.labels

    @classmethod
    def from_parts(cls, saved, config, options):
        model = saved.keras_model()
        pipeline = cls(saved.tokenizer(), model.encoder, **options.to_dict())
        pipeline.model = model
        return pipeline

    def serving_model(self):
        """The model to serve: from int32 `token_ids`, `segment_ids`, `padding_mask` `[B, S]` to
        `{"probabilities": float32 [B, C], "logits": float32 [B, C]}`."""
        model = self.evaluation_model(None)
        inputs = {
            name: keras.Input(shape=(None,), dtype="int32", name=name) for name in ENCODER_FEATURES
        }
        logits = model(inputs)["logits"]
        probabilities = keras.layers.Softmax(dtype="float32", name="probabilities")(logits)
        outputs = {"probabilities": probabilities, "logits": logits}
        return keras.Model(inputs, outputs, name=f"{model.name}_serving")

    def write_export(self, base_dir, version, overwrite, outputs=None):
        """Signatures: `serving_default` (token ids in) and raw-text ones (see README). `export`
        takes `outputs`: the outputs served (None: all)."""
        # Text pairs only where a pair fits with a token of each text, as in training.
        pairs = self.options.seq_len >= min_sequence_length(2)
        return self.export_encoder(
            self.serving_model(),
            base_dir,
            version,
            overwrite,
            outputs,
            pairs=pairs,
            layout=self.packing_layout,
        )
