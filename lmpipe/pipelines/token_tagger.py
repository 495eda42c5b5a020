"""`TokenTagger`: fine-tune a pretrained encoder to tag words (named entities, BIO chunks)."""

import dataclasses
import warnings

import keras
import numpy as np
import tensorflow as tf

from lmpipe.arguments import check_dropout, check_number, check_positive_int, check_texts
from lmpipe.contract import ENCODER_FEATURES, LABELS
from lmpipe.datasets.examples.packing import min_sequence_length
from lmpipe.datasets.labelled.tagged_files import TaggedSentences
from lmpipe.datasets.labelled.word_pieces import pack_words, split_text_words
from lmpipe.models.entity_scores import are_chunk_tags, entity_scores
from lmpipe.models.samplers import traced_function
from lmpipe.models.token_classifier import TokenClassifier
from lmpipe.pipelines.fine_tuning import FineTuningPipeline
from lmpipe.pipelines.pipeline import PipelineOptions

SERVE_TAGS = "serve_tags"
OUTSIDE = "O"


@dataclasses.dataclass(frozen=True)
class TokenTaggerOptions(PipelineOptions):
    """The options of `TokenTagger`.

    Attributes:
        tags: the tag names (at least 2, e.g. `("B-PER", "I-PER", "O")`); tag `i` is
            `tags[i]`. Entity scores are computed when they are chunk tags (`O` and `B-`,
            `I-`, `E-`, `S-` with a type), and a word cut off by `seq_len` then counts as `O`.
        seq_len: length of every example, `[CLS]` and `[SEP]` included.
        dropout: dropout rate on the encoder's sequence output.
        seed: seed of the head's initialization, dropout and the shuffling.
    """

    tags: tuple = None
    seq_len: int = 128
    dropout: float = 0.1

    def check(self):
        super().check()
        check_number("seq_len", self.seq_len, minimum=min_sequence_length(1), integer=True)
        check_dropout("dropout", self.dropout)
        self.resolve("dropout", float(self.dropout))
        tags = self.tags
        if tags is None or isinstance(tags, str):
            raise ValueError(f"`tags` must be a list of tag names, got {tags!r}.")
        tags = tuple(tags)
        if len(tags) < 2:
            raise ValueError(f"`tags` must name at least 2 tags, got {list(tags)!r}.")
        for name in tags:
            if not isinstance(name, str) or not name.strip():
                raise ValueError(f"`tags` must be non-empty strings, got {name!r}.")
        if len(set(tags)) != len(tags):
            raise ValueError(f"`tags` has duplicate names: {list(tags)!r}.")
        self.resolve("tags", tags)


class TaggedExamples:
    """Checked sentences: the words and tag ids (lists of lists), and a Dataset of dicts
    `{"words": string [W], "tags": int32 [W]}`, one sentence per element."""

    def __init__(self, sentences, tag_ids):
        self.sentences = sentences
        self.tag_ids = tag_ids
        self.size = len(sentences)
        self.in_memory = True
        lengths = np.array([len(words) for words in sentences], np.int64)
        flat_words = np.array([word for words in sentences for word in words], dtype=object)
        flat_tags = np.array([tag for tags in tag_ids for tag in tags], np.int32)
        self.dataset = tf.data.Dataset.from_tensor_slices(
            {
                "words": tf.RaggedTensor.from_row_lengths(flat_words, lengths),
                "tags": tf.RaggedTensor.from_row_lengths(flat_tags, lengths),
            }
        )


class TokenTagger(FineTuningPipeline):
    """Fine-tuning for token classification: a pretrained encoder + a tag head on every piece,
    trained on sentences of tagged words (named entities as in CoNLL-2003, or any tag per
    word), with data, training, evaluation, prediction, save/load and export.

    Words become pieces in the TensorFlow graph (see `lmpipe.datasets.labelled.word_pieces`): each
    word is tokenized alone by the WordPiece tokenizer, its tag goes on its first piece, and the
    other pieces, `[CLS]`, `[SEP]` and padding are ignored by the loss and the metrics.
    Sentences longer than `seq_len` pieces are cut; the words cut off are not trained on, are
    predicted `O` (when the tags have it) and are scored as such by `evaluate`, which counts
    them (`truncated_words`). Batches are `(features, labels)`: features `token_ids`,
    `segment_ids`, `padding_mask` int32 `[B, seq_len]`, labels `{"labels": int32 [B, seq_len]}`
    (-1 where ignored).

    The model (`TokenClassifier`) is a copy of `encoder` with a dropout + dense head on its
    `sequence_output`; `encoder` itself is never changed. Loss: sparse categorical
    cross-entropy over the labelled pieces; metric `accuracy` over them. `evaluate` adds the
    entity precision, recall and F1 of conlleval over every word of the data.

    Args:
        tokenizer: the `WordPieceTokenizer` the encoder was pretrained with.
        encoder: a trained encoder `keras.Model` (inputs `token_ids`, `segment_ids`,
            `padding_mask`; outputs with `sequence_output`), e.g. `BertPretraining.encoder` or
            `lmpipe.interop.hf.bert_from_pretrained(directory)`.
        tags: the tag names; see `TokenTaggerOptions`.
        **options: the other fields of `TokenTaggerOptions` (`seq_len`, `dropout`, `seed`).

    Example:

        train = lmpipe.datasets.read_tagged("eng.train")
        pipe = TokenTagger.from_pretrained(folder, tags=train.tag_names)
        pipe.fit(train.examples, batch_size=32, epochs=3)
        pipe.tag(["Othello loves Desdemona."])
        # [[("Othello", "B-PER"), ("loves", "O"), ("Desdemona", "B-PER"), (".", "O")]]

    Reference: Devlin et al., "BERT", 2019, section 5.3; Tjong Kim Sang and De Meulder,
    "Introduction to the CoNLL-2003 Shared Task", 2003 (the entity F1).
    """

    options_class = TokenTaggerOptions
    predictions = ("tag", "embed")
    evaluation_data = "tagged"
    training_defaults = {"learning_rate": 5e-5}
    default_epochs = 3
    data_name = "the sentences"

    wordpiece_words = True

    def __init__(self, tokenizer, encoder, tags=None, **options):
        super().__init__(tokenizer, encoder, tags=tags, **options)
        self._tag_ids = {name: index for index, name in enumerate(self.options.tags)}

    # Data -------------------------------------------------------------------------------------

    @property
    def has_entities(self):
        """Whether the tags are chunk tags with `O`: then `evaluate` gives entity scores."""
        return OUTSIDE in self._tag_ids and are_chunk_tags(self.options.tags)

    def encode(self, words, labels=None):
        """Model inputs for ragged string `[N, (words)]` (and ragged int `[N, (words)]` tag
        ids), in graph ops: see `lmpipe.datasets.labelled.word_pieces.pack_words`."""
        return pack_words(self.tokenizer, words, self.options.seq_len, labels)

    def dataset(
        self,
        sentences,
        batch_size,
        shuffle=True,
        epochs=None,
        input_context=None,
        drop_remainder=None,
    ):
        """Batches `(features, {"labels": int32 [B, seq_len]})` of tagged sentences.

        Args:
            sentences: `(sentences, tags)`: lists of equal length, each sentence a list of
                words (str) and its tags a list of tag names (or indices) of the same length;
                or a `TaggedSentences` (`read_tagged`).
            batch_size: sentences per batch (per replica with an `input_context`).
            shuffle: shuffle the sentences, again at every epoch (deterministic given `seed`).
            epochs: passes over the sentences; None repeats forever.
            input_context: a `tf.distribute.InputContext`: each input pipeline reads its own
                shard of the sentences.
            drop_remainder: drop the last incomplete batch; by default only when repeating
                forever.
        """
        check_positive_int("batch_size", batch_size)
        source = self.check_data(sentences, "sentences")
        return self.batches(source, batch_size, shuffle, epochs, input_context, drop_remainder)

    def check_data(self, data, name="data"):
        """`data` checked, as `TaggedExamples`; a ValueError naming the first bad sentence."""
        if isinstance(data, TaggedExamples):
            return data
        if name == "data":
            name = "train_sentences"
        if isinstance(data, TaggedSentences):
            data, name = data.examples, data.path
        if not isinstance(data, (tuple, list)) or len(data) != 2:
            raise ValueError(
                f"`{name}` must be (sentences, tags) or a TaggedSentences, got "
                f"{type(data).__name__}."
            )
        sentences, tags = (list(part) for part in data)
        if len(sentences) != len(tags):
            raise ValueError(
                f"`{name}` has {len(sentences)} sentences and {len(tags)} tag lists; they must "
                "be of equal length."
            )
        if not sentences:
            raise ValueError(f"`{name}` has no sentences.")
        checked_words, tag_ids = [], []
        for index, (words, labels) in enumerate(zip(sentences, tags, strict=True)):
            where = f"`{name}` sentence {index}"
            if isinstance(words, str) or isinstance(labels, str):
                raise ValueError(f"{where}: words and tags must be lists, not strings.")
            words, labels = list(words), list(labels)
            if not words:
                raise ValueError(f"{where} has no words.")
            if len(words) != len(labels):
                raise ValueError(f"{where} has {len(words)} words but {len(labels)} tags.")
            for word in words:
                if not isinstance(word, str) or not word.strip():
                    raise ValueError(f"{where} has the word {word!r}; words must be non-empty.")
            tag_ids.append([self._tag_id(label, where) for label in labels])
            checked_words.append(words)
        return TaggedExamples(checked_words, tag_ids)

    def _tag_id(self, label, where):
        if isinstance(label, str):
            if label not in self._tag_ids:
                raise ValueError(
                    f"{where} has the tag {label!r}, not one of the pipeline's `tags` "
                    f"({', '.join(self.options.tags)})."
                )
            return self._tag_ids[label]
        integer = isinstance(label, (int, np.integer)) and not isinstance(label, (bool, np.bool_))
        if integer and 0 <= label < len(self.options.tags):
            return int(label)
        raise ValueError(
            f"{where} has the tag {label!r}; tags are names of `tags` or indices below "
            f"{len(self.options.tags)}."
        )

    def batch_examples(self, dataset, batch_size, drop_remainder):
        """Sentences of different lengths: ragged batches."""
        return dataset.ragged_batch(batch_size, drop_remainder=drop_remainder)

    def model_inputs(self, batch):
        packed = self.encode(batch["words"], batch["tags"])
        features = {name: packed[name] for name in ENCODER_FEATURES}
        return features, {LABELS: packed[LABELS]}

    # Model ------------------------------------------------------------------------------------

    def build_model(self):
        """A new `TokenClassifier`: a copy of the starting encoder and a fresh head (made where
        this is called, so inside a strategy's scope its variables are the strategy's)."""
        encoder = self.encoder_copy()
        for layer in encoder.layers:
            if layer.name == "pooler":  # BERT's [CLS] layer: tagging does not use it
                layer.trainable = False
        return TokenClassifier(
            encoder,
            len(self.options.tags),
            dropout=self.options.dropout,
            kernel_initializer=self.head_initializer(),
            name="token_tagger",
        )

    # Evaluation -------------------------------------------------------------------------------

    def evaluate(self, data, batch_size=None, steps=None, verbose=0):
        """The loss and piece `accuracy` (over the labelled first pieces, as in training) of the
        trained model on `data`, and `truncated_words`, the words cut off by `seq_len`; with
        chunk tags (see `has_entities`) and `steps=None`, also `entity_precision`,
        `entity_recall` and `entity_f1` over every word of `data` (conlleval's, a cut-off
        word predicted `O`). Arguments as `Pipeline.evaluate`."""
        data = self.check_data(data)
        results = super().evaluate(data, batch_size=batch_size, steps=steps, verbose=verbose)
        if steps is not None:
            return results
        batch_size = self.default_batch_size if batch_size is None else batch_size
        predicted, truncated = self._predict_word_tags(data.sentences, batch_size)
        results["truncated_words"] = float(truncated)
        if self.has_entities:
            names = self.options.tags
            gold = [[names[index] for index in tags] for tags in data.tag_ids]
            results.update(entity_scores(gold, predicted).as_metrics())
        return results

    # Prediction -------------------------------------------------------------------------------

    def tag_words(self, sentences, batch_size=64):
        """The tag of each word of pre-split `sentences` (a list of lists of words), as a list
        of lists of tag names. A word cut off by `seq_len` gets `O` (or, without an `O`
        tag, None), with a warning that counts them."""
        check_positive_int("batch_size", batch_size)
        if isinstance(sentences, (str, bytes)) or not isinstance(sentences, (list, tuple)):
            raise ValueError(f"`sentences` must be a list of lists of words, got {sentences!r}.")
        for index, words in enumerate(sentences):
            if isinstance(words, str) or not all(
                isinstance(word, str) and word.strip() for word in words
            ):
                raise ValueError(
                    f"`sentences[{index}]` must be a list of non-empty words, got {words!r}."
                )
        tags, truncated = self._predict_word_tags([list(words) for words in sentences], batch_size)
        self._warn_truncated(truncated)
        return tags

    def tag(self, texts, batch_size=64):
        """Tag raw `texts`: for each text, its words (split as the tokenizer splits text:
        whitespace, and each punctuation character alone) paired with their tags, a list of
        `(word, tag)`. A word cut off by `seq_len` gets `O`, with a warning."""
        texts = check_texts("texts", texts)
        check_positive_int("batch_size", batch_size)
        words = [
            [word.decode("utf-8") for word in sentence]
            for sentence in split_text_words(tf.constant(texts, tf.string)).to_list()
        ]
        tags, truncated = self._predict_word_tags(words, batch_size)
        self._warn_truncated(truncated)
        return [
            list(zip(sentence, labels, strict=True))
            for sentence, labels in zip(words, tags, strict=True)
        ]

    def tag_function(self):
        """The `tf.function` of the `serve_tags` signature: raw `text` (string `[N]`) ->

        - `words` string `[N, seq_len]`: the text's words (as `tag` splits them, as written),
          "" after the last (a text has at most `seq_len - 2` words that fit);
        - `word_tags` string `[N, seq_len]`: each word's tag, the tag of its first piece; ""
          for the words cut off and after the last;
        - `word_scores` float32 `[N, seq_len]`: the probability of each word's tag;
        - `word_count` int32 `[N]`: the words of each text; `tagged_word_count` int32 `[N]`:
          those that fit in `seq_len` and have a tag;
        - per piece, `[N, seq_len]` aligned with the model's input: `piece_tags` string (the
          most likely tag of every piece, "" on `[CLS]`, `[SEP]`, padding), `first_piece`
          int32 (1 on a word's first piece, the one whose tag is the word's), `word_index`
          int32 (the word of each piece, -1 on special tokens and padding), `tag_ids` int32
          (the most likely tag index, -1 on special tokens and padding).

        Traced once per model."""
        model = self.require_model()
        tokenizer, seq_len = self.tokenizer, self.options.seq_len
        tags = tf.constant(list(self.options.tags), tf.string)

        def make():
            @tf.function(
                input_signature=[tf.TensorSpec([None], tf.string, name="text")],
                jit_compile=False,
                autograph=False,
            )
            def serve_tags(text):
                words = split_text_words(text)  # [N, (W)]
                return _tag_outputs(model, tokenizer, seq_len, tags, words, with_words=True)

            return serve_tags

        return traced_function(model, ("serve_tags", seq_len), make)

    def _words_function(self):
        """`serve_tags`' outputs for pre-split words (ragged string `[N, (W)]`)."""
        model = self.require_model()
        tokenizer, seq_len = self.tokenizer, self.options.seq_len
        tags = tf.constant(list(self.options.tags), tf.string)

        def make():
            @tf.function(
                input_signature=[tf.RaggedTensorSpec([None, None], tf.string, 1, tf.int64)],
                jit_compile=False,
                autograph=False,
            )
            def tag_words(words):
                return _tag_outputs(model, tokenizer, seq_len, tags, words, with_words=False)

            return tag_words

        return traced_function(model, ("tag_words", seq_len), make)

    def _predict_word_tags(self, sentences, batch_size):
        """`(tags of each word of each sentence, words cut off)`: names; a cut-off word's tag
        is `O` (None when there is no `O` tag)."""
        function = self._words_function()
        fallback = OUTSIDE if OUTSIDE in self._tag_ids else None
        results, truncated = [], 0
        for start in range(0, len(sentences), batch_size):
            batch = sentences[start : start + batch_size]
            words = tf.RaggedTensor.from_row_lengths(
                np.array([word for words in batch for word in words], dtype=object),
                np.array([len(words) for words in batch], np.int64),
            )
            output = function(words)
            word_tags = output["word_tags"].numpy()
            tagged = output["tagged_word_count"].numpy()
            for row, words in enumerate(batch):
                kept = [tag.decode("utf-8") for tag in word_tags[row, : tagged[row]]]
                results.append(kept + [fallback] * (len(words) - tagged[row]))
                truncated += len(words) - int(tagged[row])
        return results, truncated

    def _warn_truncated(self, truncated):
        if truncated:
            warnings.warn(
                f"{truncated} word(s) did not fit in seq_len={self.options.seq_len} pieces and "
                f"were tagged {OUTSIDE!r} without a prediction.",
                stacklevel=3,
            )

    # Save, load, export -----------------------------------------------------------------------

    def class_names(self):
        """The tags: a Hugging Face folder's `id2label`, each word's tag on its first piece."""
        return self.options.tags

    @classmethod
    def from_parts(cls, saved, config, options):
        model = saved.keras_model()
        pipeline = cls(saved.tokenizer(), model.encoder, **options.to_dict())
        pipeline.model = model
        return pipeline

    def serving_model(self):
        """The model to serve: from int32 `token_ids`, `segment_ids`, `padding_mask` `[B, S]` to
        `{"probabilities": float32 [B, S, C], "logits": float32 [B, S, C]}`, per piece."""
        model = self.evaluation_model(None)
        inputs = {
            name: keras.Input(shape=(None,), dtype="int32", name=name) for name in ENCODER_FEATURES
        }
        logits = model(inputs)["logits"]
        probabilities = keras.layers.Softmax(dtype="float32", name="probabilities")(logits)
        return keras.Model(
            inputs, {"probabilities": probabilities, "logits": logits}, name=f"{model.name}_serving"
        )

    def write_export(self, base_dir, version, overwrite, outputs=None):
        """Signatures: `serving_default` (token ids in) and `serve_text` (raw text, packed as
        `[CLS] text [SEP]`), both giving per-piece `probabilities` and `logits`
        `[B, seq_len, tags]`; and `serve_tags` (`tag_function`): raw text to words, their
        tags and the per-piece tags with the first-piece mask. `export` takes `outputs`: the
        outputs of the first two (None: all)."""
        example = np.array([b"Othello loves Desdemona."], dtype=object)
        tag = (self.tag_function(), {"text": example}, self.model.variables)
        return self.export_encoder(
            self.serving_model(),
            base_dir,
            version,
            overwrite,
            outputs,
            pairs=False,
            extra_signatures={SERVE_TAGS: tag},
        )


def _tag_outputs(model, tokenizer, seq_len, tags, words, with_words):
    """The outputs of `TokenTagger.tag_function` for ragged words `[N, (W)]`."""
    packed = pack_words(tokenizer, words, seq_len)
    features = {name: packed[name] for name in ENCODER_FEATURES}
    logits = tf.cast(model(features, training=False)["logits"], tf.float32)  # [N, S, C]
    probabilities = tf.nn.softmax(logits)
    tag_ids = tf.argmax(logits, axis=-1, output_type=tf.int32)  # [N, S]
    real = packed["word_index"] >= 0
    first = packed["first_piece"] > 0
    # Word k's tag is its first piece's: first pieces, in order, are the words that fit.
    word_ids = tf.ragged.boolean_mask(tag_ids, first)  # [N, (tagged words)]
    word_scores = tf.ragged.boolean_mask(tf.reduce_max(probabilities, axis=-1), first)
    outputs = {
        "word_tags": tf.gather(tags, word_ids).to_tensor("", shape=[None, seq_len]),
        "word_scores": word_scores.to_tensor(0.0, shape=[None, seq_len]),
        "word_count": packed["word_count"],
        "tagged_word_count": packed["tagged_words"],
        "piece_tags": tf.where(real, tf.gather(tags, tag_ids), ""),
        "first_piece": packed["first_piece"],
        "word_index": packed["word_index"],
        "tag_ids": tf.where(real, tag_ids, -1),
    }
    if with_words:
        outputs["words"] = words[:, :seq_len].to_tensor("", shape=[None, seq_len])
    return outputs
