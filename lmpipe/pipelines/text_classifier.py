"""`TextClassifier`: fine-tune a pretrained encoder to classify texts and text pairs."""

import json
import math
import os
import pathlib

import keras
import numpy as np
import tensorflow as tf

from lmpipe.datasets.packing import min_sequence_length, pack_texts
from lmpipe.datasets.shuffling import by_epoch, window_shuffle
from lmpipe.datasets.wordpiece import WordPieceTokenizer
from lmpipe.models.pretrained import bert_from_pretrained
from lmpipe.models.sequence_classifier import ENCODER_INPUTS, SequenceClassifier
from lmpipe.pipelines.saved_pipeline import SavedPipeline, save_pipeline
from lmpipe.pipelines.training import check_training_options, train

HF_TOKENIZER_CONFIG = "tokenizer_config.json"

# Examples held in memory are shuffled all together; a tf.data.Dataset of examples through a
# buffer of this many.
SHUFFLE_BUFFER = 10_000


class TextClassifier:
    """Fine-tuning: a pretrained encoder + a classification head on `[CLS]`, trained on labelled
    texts (or text pairs), with data, training, evaluation, prediction, save/load and export.

    Texts are tokenized and packed in the TensorFlow graph (tensorflow-text): `[CLS] A [SEP]`,
    or `[CLS] A [SEP] B [SEP]` for pairs with segment ids 0 for `[CLS] A [SEP]` and 1 for
    `B [SEP]`; a pair too long for `seq_len` loses tokens from the end of its longer side first
    (BERT's rule), a single text from its end; then padding to `seq_len`. Batches are
    `(features, labels)`: features `token_ids`, `segment_ids`, `padding_mask` int32
    `[B, seq_len]`, labels `{"labels": int32 [B]}`.

    The model (`SequenceClassifier`) is a copy of `encoder` with a dropout + dense head on its
    `pooled_output`; `encoder` itself is never changed. Loss: sparse categorical
    cross-entropy; metric: accuracy.

    Args:
        tokenizer: the `WordPieceTokenizer` the encoder was pretrained with.
        encoder: a trained encoder `keras.Model` (inputs `token_ids`, `segment_ids`,
            `padding_mask`; outputs with `pooled_output`), e.g. `BertPretraining.encoder` or
            `lmpipe.models.bert_from_pretrained(directory)`.
        num_classes: number of classes (at least 2); labels are `0 .. num_classes - 1`.
        seq_len: length of every example, special tokens included.
        labels: optional class names, one per class; examples may then give their label by
            name, and `classify` returns names.
        dropout: dropout rate on the pooled vector.
        seed: seed of the head's initialization and of the shuffling.

    Example:

        pipe = TextClassifier.from_pretrained(folder, num_classes=2, labels=["neg", "pos"])
        pipe.fit((texts, labels), batch_size=32, epochs=3)
        pipe.classify(["What a wonderful play."])  # ["pos"]

    Reference: Devlin et al., "BERT", 2019, section 4.1 and appendix A.3.
    """

    def __init__(
        self, tokenizer, encoder, num_classes, seq_len=128, labels=None, dropout=0.1, seed=0
    ):
        if not isinstance(tokenizer, WordPieceTokenizer):
            raise ValueError(
                f"`tokenizer` must be a WordPieceTokenizer, got {type(tokenizer).__name__}."
            )
        if not isinstance(encoder, keras.Model):
            raise ValueError(
                f"`encoder` must be a keras.Model (e.g. BertPretraining.encoder), got "
                f"{type(encoder).__name__}."
            )
        if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 2:
            raise ValueError(
                f"`num_classes` must be an integer >= 2, got num_classes={num_classes!r}."
            )
        if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 3:
            raise ValueError(
                "`seq_len` must be an integer >= 3 ([CLS], one token, [SEP]), got "
                f"seq_len={seq_len!r}."
            )
        if not isinstance(dropout, (int, float)) or not 0.0 <= dropout < 1.0:
            raise ValueError(f"`dropout` must be in [0, 1), got dropout={dropout!r}.")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"`seed` must be an int, got seed={seed!r}.")
        if labels is not None:
            if isinstance(labels, str):
                raise ValueError(f"`labels` must be a list of class names, got {labels!r}.")
            labels = list(labels)
            if len(labels) != num_classes:
                raise ValueError(
                    f"`labels` has {len(labels)} names for num_classes={num_classes}; it needs "
                    "one per class."
                )
            for name in labels:
                if not isinstance(name, str) or not name:
                    raise ValueError(f"`labels` must be non-empty strings, got {name!r}.")
            if len(set(labels)) != len(labels):
                raise ValueError(f"`labels` has duplicate names: {labels!r}.")
        _check_encoder(encoder, tokenizer, seq_len)
        self.tokenizer = tokenizer
        self.num_classes = num_classes
        self.seq_len = seq_len
        self.labels = labels
        self.dropout = float(dropout)
        self.seed = seed
        self.model = None
        self._initial_encoder = encoder

    # Constructors -----------------------------------------------------------------------------

    @classmethod
    def from_pretraining(cls, pipeline, num_classes, seq_len=None, **kwargs):
        """Fine-tune the encoder of a trained (or loaded) `BertPretraining` / `AlbertPretraining`
        with its tokenizer; `seq_len` defaults to the pipeline's. Other arguments are those of
        `TextClassifier`."""
        seq_len = pipeline.seq_len if seq_len is None else seq_len
        return cls(pipeline.tokenizer, pipeline.encoder, num_classes, seq_len=seq_len, **kwargs)

    @classmethod
    def from_pretrained(cls, directory, num_classes, **kwargs):
        """Fine-tune a Hugging Face BERT checkpoint folder (`config.json`, `model.safetensors`,
        `vocab.txt`): the encoder of `bert_from_pretrained(directory)` and the WordPiece
        tokenizer of its `vocab.txt`, lower-casing as `tokenizer_config.json` says
        (`do_lower_case`, True when absent). Other arguments are those of `TextClassifier`."""
        folder = pathlib.Path(os.fspath(directory))
        encoder = bert_from_pretrained(folder)
        vocabulary = folder / "vocab.txt"
        if not vocabulary.is_file():
            raise ValueError(f"{vocabulary} not found: the checkpoint folder needs its vocab.txt.")
        lower_case = True
        config_path = folder / HF_TOKENIZER_CONFIG
        if config_path.is_file():
            try:
                config = json.loads(config_path.read_text(encoding="utf-8"))
            except json.JSONDecodeError as error:
                raise ValueError(
                    f"{config_path} is not valid JSON (line {error.lineno}): {error.msg}."
                ) from error
            lower_case = config.get("do_lower_case", True) if isinstance(config, dict) else True
            if not isinstance(lower_case, bool):
                raise ValueError(
                    f"{config_path}: `do_lower_case` must be true or false, got {lower_case!r}."
                )
        tokenizer = WordPieceTokenizer.from_vocab_file(vocabulary, lower_case=lower_case)
        return cls(tokenizer, encoder, num_classes, **kwargs)

    # Data -------------------------------------------------------------------------------------

    def encode(self, texts, text_pairs=None):
        """Model inputs for `[N]` texts (and `[N]` second texts), in graph ops.

        Returns `token_ids`, `segment_ids`, `padding_mask` int32 `[N, seq_len]`: `[CLS] A [SEP]`
        or `[CLS] A [SEP] B [SEP]` (segment 1 from B on), truncated from the end of the longer
        side first, padded with `[PAD]` (mask 0).
        """
        if text_pairs is not None and self.seq_len < 5:
            raise ValueError(
                "`seq_len` must be at least 5 for text pairs ([CLS] A [SEP] B [SEP] with one "
                f"token each), got seq_len={self.seq_len}."
            )
        return pack_texts(self.tokenizer, texts, self.seq_len, text_pairs)

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
                (and `"text_pair"`), one example per element. Python examples are checked
                here; a Dataset's labels are checked in the graph as batches are made.
            batch_size: examples per batch (per replica with an `input_context`).
            shuffle: shuffle the examples, again at every epoch (deterministic given `seed`).
            epochs: passes over the examples; None repeats forever.
            input_context: a `tf.distribute.InputContext`: each input pipeline reads its own
                shard of the examples.
            drop_remainder: drop the last incomplete batch; by default only when repeating
                forever.
        """
        _check_batch_size(batch_size)
        source = self._examples(examples)
        return self._batches(source, batch_size, shuffle, epochs, input_context, drop_remainder)

    def _examples(self, examples, name="examples"):
        """`examples` checked, as an `_Examples`: one dict per example, and their number."""
        if isinstance(examples, tf.data.Dataset):
            return _dataset_examples(examples, name, self.seq_len)
        return _memory_examples(examples, name, self.num_classes, self.labels, self.seq_len)

    def _batches(self, source, batch_size, shuffle, epochs, input_context, drop_remainder, skip=0):
        if epochs is not None and (
            isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1
        ):
            raise ValueError(f"`epochs` must be a positive integer or None, got {epochs!r}.")
        if drop_remainder is None:
            drop_remainder = epochs is None
        num_pipelines, pipeline_id = 1, 0
        if input_context is not None:
            num_pipelines = input_context.num_input_pipelines
            pipeline_id = input_context.input_pipeline_id
        dataset = source.dataset
        if num_pipelines > 1:
            dataset = dataset.shard(num_pipelines, pipeline_id)
        if shuffle:
            buffer = min(source.size, SHUFFLE_BUFFER) if source.in_memory else SHUFFLE_BUFFER
            examples = dataset

            def epoch_examples(epoch):
                seed = tf.random.experimental.stateless_fold_in(
                    tf.constant([self.seed, pipeline_id], tf.int64), epoch
                )
                return window_shuffle(examples, max(buffer, 1), seed)

            dataset = by_epoch(epoch_examples, epochs)
        else:
            dataset = dataset.repeat(epochs)
        dataset = dataset.batch(batch_size, drop_remainder=drop_remainder)
        if skip:
            dataset = dataset.skip(skip)  # before tokenization: skipping costs little
        num_classes = self.num_classes

        def to_model_inputs(batch):
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
            return features, {"labels": labels}

        dataset = dataset.map(to_model_inputs, num_parallel_calls=tf.data.AUTOTUNE)
        return dataset.prefetch(tf.data.AUTOTUNE)

    # Model ------------------------------------------------------------------------------------

    @property
    def encoder(self):
        """The fine-tuned encoder once the pipeline is trained or loaded, else the encoder it
        starts from."""
        return self.model.encoder if self.model is not None else self._initial_encoder

    def build_model(self):
        """A new `SequenceClassifier`: a copy of the starting encoder and a fresh head.

        The copy is made where this is called, so that inside a distribution strategy's scope
        its variables are the strategy's; the starting encoder keeps its weights.
        """
        source = self._initial_encoder
        encoder = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(source))
        encoder.set_weights(source.get_weights())
        return SequenceClassifier(
            encoder,
            self.num_classes,
            dropout=self.dropout,
            kernel_initializer=keras.initializers.TruncatedNormal(stddev=0.02, seed=self.seed),
            name="text_classifier",
        )

    def _run_config(self):
        encoder = self._initial_encoder
        return {
            "pipeline": type(self).__name__,
            "encoder": {
                "name": encoder.name,
                "weight_shapes": [list(weight.shape) for weight in encoder.weights],
            },
            "vocabulary_size": self.tokenizer.vocabulary_size,
            **self._options(),
        }

    def _options(self):
        return {
            "num_classes": self.num_classes,
            "seq_len": self.seq_len,
            "labels": self.labels,
            "dropout": self.dropout,
            "seed": self.seed,
        }

    # BERT's fine-tuning learning rates are 2e-5 to 5e-5 (appendix A.3).
    training_defaults = {"learning_rate": 2e-5}

    def fit(
        self,
        train_examples,
        batch_size=32,
        epochs=3,
        steps_per_epoch=None,
        validation=None,
        **training_options,
    ):
        """Fine-tune on `train_examples`; return the Keras `History`.

        The examples (and `validation`) are checked before anything trains. A pipeline that
        already has a model (from an earlier `fit` or `load`) keeps training it, unless
        `checkpoint_dir` is given.

        Args:
            train_examples: labelled examples, as for `dataset`.
            batch_size: global batch size (divided among the replicas).
            epochs: number of epochs of `steps_per_epoch` steps.
            steps_per_epoch: defaults to `ceil(number of examples / batch_size)`.
            validation: labelled examples evaluated at the end of every epoch; their `loss`
                and `accuracy` appear in the history as `val_loss` and `val_accuracy`.
            **training_options: the training options of `lmpipe.pipelines.training.train`
                (`strategy`, `checkpoint_dir`, `learning_rate`, ..., `verbose`), with
                `learning_rate=2e-5` by default.
        """
        options = check_training_options(
            f"{type(self).__name__}.fit", training_options, self.training_defaults
        )
        _check_batch_size(batch_size)
        source = self._examples(train_examples, "train_examples")
        validation_source = None
        if validation is not None:
            validation_source = self._examples(validation, "validation")
        if steps_per_epoch is None:
            steps_per_epoch = max(1, math.ceil(source.size / batch_size))
        previous = self.model if options.get("checkpoint_dir") is None else None

        def make_dataset(per_replica, input_context, skip):
            return self._batches(
                source, per_replica, True, None, input_context, drop_remainder=True, skip=skip
            )

        if validation_source is not None:
            validation_data = self._batches(
                validation_source, batch_size, False, 1, None, drop_remainder=False
            )
            callbacks = options.get("callbacks") or []
            options["callbacks"] = [_ValidationCallback(validation_data), *callbacks]
        self.model, history = train(
            self.build_model,
            make_dataset,
            run_config=json.loads(json.dumps(self._run_config())),
            batch_size=batch_size,
            epochs=epochs,
            steps_per_epoch=steps_per_epoch,
            model=previous,
            **options,
        )
        return history

    def _trained_model(self):
        if self.model is None:
            raise ValueError("The pipeline has no model yet: call fit() or load() first.")
        if not self.model.compiled:
            # A loaded model may come without an optimizer; evaluation needs none.
            self.model.compile(optimizer="sgd")
        return self.model

    def evaluate(self, examples, batch_size=32, verbose=0):
        """`{"loss": mean cross-entropy, "accuracy": ...}` over `examples` (as for `dataset`)."""
        dataset = self.dataset(examples, batch_size, shuffle=False, epochs=1)
        model = self._trained_model()
        results = model.evaluate(dataset, return_dict=True, verbose=verbose)
        return {"loss": float(results["loss"]), "accuracy": float(results["accuracy"])}

    def predict(self, texts, text_pairs=None, batch_size=64):
        """Class probabilities, a float32 numpy array `[N, num_classes]`, for `[N]` texts (and
        `[N]` second texts)."""
        _check_batch_size(batch_size)
        texts = _text_array(texts, "texts")
        columns = {"text": texts}
        if text_pairs is not None:
            columns["text_pair"] = _text_array(text_pairs, "text_pairs")
            if len(columns["text_pair"]) != len(texts):
                raise ValueError(
                    f"`texts` has {len(texts)} entries and `text_pairs` "
                    f"{len(columns['text_pair'])}; they must be of equal length."
                )
        model = self._trained_model()
        dataset = tf.data.Dataset.from_tensor_slices(columns).batch(batch_size)
        dataset = dataset.map(
            lambda batch: self.encode(batch["text"], batch.get("text_pair")),
            num_parallel_calls=tf.data.AUTOTUNE,
        )
        logits = model.predict(dataset, verbose=0)["logits"].astype(np.float64)
        logits -= logits.max(axis=-1, keepdims=True)
        probabilities = np.exp(logits)
        return (probabilities / probabilities.sum(axis=-1, keepdims=True)).astype(np.float32)

    def classify(self, texts, text_pairs=None, batch_size=64):
        """The most probable class of each text: its name if the pipeline has `labels`, else
        its index."""
        predicted = self.predict(texts, text_pairs, batch_size=batch_size).argmax(axis=-1)
        if self.labels is None:
            return [int(index) for index in predicted]
        return [self.labels[index] for index in predicted]

    # Save, load, export -----------------------------------------------------------------------

    def save(self, directory):
        """Write the tokenizer, the pipeline's options and the fine-tuned model to
        `directory`."""
        save_pipeline(directory, self, self.model, self._options(), {"tokenizer": self.tokenizer})

    @classmethod
    def load(cls, directory):
        """A pipeline saved with `save`, with its fine-tuned model."""
        saved = SavedPipeline(directory, cls)
        model = saved.model()
        pipeline = cls(saved.tokenizer(), model.encoder, **saved.description)
        pipeline.model = model
        return pipeline

    def serving_model(self):
        """The model to serve: from int32 `token_ids`, `segment_ids`, `padding_mask` `[B, S]` to
        `{"probabilities": float32 [B, C], "logits": float32 [B, C]}`."""
        model = self._trained_model()
        inputs = {
            name: keras.Input(shape=(None,), dtype="int32", name=name) for name in ENCODER_INPUTS
        }
        logits = model(inputs)["logits"]
        probabilities = keras.layers.Softmax(dtype="float32", name="probabilities")(logits)
        outputs = {"probabilities": probabilities, "logits": logits}
        return keras.Model(inputs, outputs, name=f"{model.name}_serving")

    def export(self, base_dir, version=None, overwrite=False):
        """Export a SavedModel for TensorFlow Serving to `<base_dir>/<version>/`; return its
        path. Signatures: `serving_default` (token ids in) and raw-text ones (see README)."""
        from lmpipe.serving import export_saved_model

        return export_saved_model(
            base_dir,
            self.serving_model(),
            self.tokenizer,
            self.seq_len,
            version=version,
            overwrite=overwrite,
            # Text pairs only where a pair fits with a token of each text, as in training.
            pairs=self.seq_len >= min_sequence_length(2),
        )


class _ValidationCallback(keras.callbacks.Callback):
    """Evaluate on validation batches at each epoch's end; add `val_loss`, `val_accuracy`.

    It runs before Keras' `History` and progress bar (which come last), so both see the values.
    """

    def __init__(self, dataset):
        super().__init__()
        self.dataset = dataset

    def on_epoch_end(self, epoch, logs=None):
        results = self.model.evaluate(self.dataset, return_dict=True, verbose=0)
        if logs is not None:
            logs.update({f"val_{name}": value for name, value in results.items()})


class _Examples:
    """Examples as a Dataset of dicts `{"text", "label"}` (+ `"text_pair"`), one per element."""

    def __init__(self, dataset, size, in_memory):
        self.dataset = dataset
        self.size = size
        self.in_memory = in_memory


def _check_batch_size(batch_size):
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"`batch_size` must be a positive integer, got {batch_size!r}.")


def _check_encoder(encoder, tokenizer, seq_len):
    """The encoder's vocabulary must be the tokenizer's and its positions cover `seq_len`."""
    try:
        embedding = encoder.get_layer("embedding")
    except ValueError:
        return  # not an lmpipe encoder: nothing more to check
    vocabulary_size = getattr(embedding, "vocabulary_size", None)
    if vocabulary_size is not None and vocabulary_size != tokenizer.vocabulary_size:
        raise ValueError(
            f"The encoder's vocabulary_size ({vocabulary_size}) differs from the tokenizer's "
            f"({tokenizer.vocabulary_size}): use the tokenizer the encoder was trained with."
        )
    max_length = getattr(embedding, "max_sequence_length", None)
    if max_length is not None and seq_len > max_length:
        raise ValueError(
            f"`seq_len`={seq_len} exceeds the encoder's max_sequence_length ({max_length})."
        )


def _text_array(texts, name):
    """`texts` as a numpy array of `str`; ValueError naming the first entry that is not text."""
    if isinstance(texts, (str, bytes)):
        raise ValueError(f"`{name}` must be a list of texts, got a single string: {texts!r}.")
    if isinstance(texts, np.ndarray) and texts.dtype.kind in "US":
        if texts.ndim != 1:
            raise ValueError(f"`{name}` must be 1-D, got shape {texts.shape}.")
        array = texts
    else:
        try:
            items = list(texts)
        except TypeError:
            raise ValueError(
                f"`{name}` must be a list of texts, got {type(texts).__name__}."
            ) from None
        for index, item in enumerate(items):
            if not isinstance(item, (str, bytes)):
                raise ValueError(
                    f"`{name}[{index}]` must be a string, got {type(item).__name__}: {item!r}."
                )
        array = np.array(items, dtype=object)
    if len(array) == 0:
        raise ValueError(f"`{name}` is empty.")
    return array


def _memory_examples(examples, name, num_classes, class_names, seq_len):
    """Checked `(texts, labels)` / `(texts, text_pairs, labels)` as a `_Examples`."""
    if not isinstance(examples, (tuple, list)) or len(examples) not in (2, 3):
        raise ValueError(
            f"`{name}` must be (texts, labels), (texts, text_pairs, labels) or a "
            f"tf.data.Dataset of dicts, got {type(examples).__name__}"
            + (f" of {len(examples)} items." if isinstance(examples, (tuple, list)) else ".")
        )
    texts = _text_array(examples[0], f"{name} texts")
    columns = {"text": texts}
    if len(examples) == 3:
        if seq_len < 5:
            raise ValueError(
                "`seq_len` must be at least 5 for text pairs ([CLS] A [SEP] B [SEP] with one "
                f"token each), got seq_len={seq_len}."
            )
        columns["text_pair"] = _text_array(examples[1], f"{name} text_pairs")
    labels = _label_array(examples[-1], f"{name} labels", num_classes, class_names)
    lengths = {key: len(column) for key, column in columns.items()}
    lengths["label"] = len(labels)
    if len(set(lengths.values())) > 1:
        described = ", ".join(f"{count} {key}s" for key, count in lengths.items())
        raise ValueError(f"`{name}` has {described}: texts and labels must be of equal length.")
    columns["label"] = labels
    return _Examples(tf.data.Dataset.from_tensor_slices(columns), len(labels), True)


def _label_array(labels, name, num_classes, class_names):
    """int32 class indices; ValueError naming the first example whose label is bad."""
    if isinstance(labels, (str, bytes)):
        raise ValueError(f"`{name}` must be a list of labels, got a single string.")
    if isinstance(labels, np.ndarray):
        array = labels
    else:
        try:
            array = np.asarray(labels)
        except ValueError:  # ragged
            array = np.asarray(labels, dtype=object)
    if array.dtype.kind not in "iu":
        array = np.asarray(labels, dtype=object)  # mixed, names or bad values: checked one by one
    if array.ndim != 1:
        raise ValueError(f"`{name}` must be a 1-D list of labels, got shape {array.shape}.")
    if len(array) == 0:
        raise ValueError(f"`{name}` is empty: there are no examples.")
    allowed = f"[0, {num_classes})" + (f" or one of {class_names}" if class_names else "")
    if array.dtype.kind in "iu":
        bad = np.flatnonzero((array < 0) | (array >= num_classes))
        if bad.size:
            index = int(bad[0])
            raise ValueError(
                f"`{name}[{index}]` (example {index}) is {int(array[index])}, outside {allowed}."
            )
        return array.astype(np.int32)
    indices = {name_: index for index, name_ in enumerate(class_names or [])}
    result = np.empty(len(array), np.int32)
    for index, label in enumerate(array.tolist()):
        if isinstance(label, str) and label in indices:
            result[index] = indices[label]
        elif (
            isinstance(label, (int, np.integer))
            and not isinstance(label, bool)
            and 0 <= label < num_classes
        ):
            result[index] = label
        else:
            raise ValueError(
                f"`{name}[{index}]` (example {index}) is {label!r}, outside {allowed}."
            )
    return result


def _dataset_examples(dataset, name, seq_len):
    """A Dataset of example dicts, checked for its structure (labels are checked in the graph)."""
    spec = dataset.element_spec
    if not isinstance(spec, dict) or "text" not in spec or "label" not in spec:
        raise ValueError(
            f"`{name}` as a tf.data.Dataset must yield dicts with 'text' and 'label' (and "
            f"optionally 'text_pair'), got elements of spec {spec}."
        )
    unknown = set(spec) - {"text", "text_pair", "label"}
    if unknown:
        raise ValueError(f"`{name}` yields unknown keys {sorted(unknown)}.")
    for key in ("text", "text_pair"):
        if key in spec and (spec[key].dtype != tf.string or spec[key].shape.rank != 0):
            raise ValueError(
                f"`{name}` element {key!r} must be a scalar string (one example per element), "
                f"got {spec[key]}."
            )
    if not spec["label"].dtype.is_integer or spec["label"].shape.rank != 0:
        raise ValueError(
            f"`{name}` element 'label' must be a scalar integer class index, got {spec['label']}."
        )
    if "text_pair" in spec and seq_len < 5:
        raise ValueError(
            "`seq_len` must be at least 5 for text pairs ([CLS] A [SEP] B [SEP] with one "
            f"token each), got seq_len={seq_len}."
        )
    size = int(dataset.cardinality().numpy())
    if size == tf.data.INFINITE_CARDINALITY:
        raise ValueError(f"`{name}` is an infinite Dataset; give a finite one (it is repeated).")
    if size < 0:  # unknown: count it
        size = int(dataset.reduce(np.int64(0), lambda count, _: count + 1).numpy())
    if size == 0:
        raise ValueError(f"`{name}` is empty: there are no examples.")
    return _Examples(dataset, size, False)
