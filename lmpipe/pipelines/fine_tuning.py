"""The base of the fine-tuning pipelines: a given pretrained encoder, a head, and labelled
examples batched the same way for every task (`TextClassifier`, `TokenTagger`,
`SpanAnswerer`)."""

import math

import keras
import tensorflow as tf

from lmpipe.arguments import check_positive_int
from lmpipe.datasets.corpora.shuffling import by_epoch, window_shuffle
from lmpipe.datasets.labelled.length_buckets import CHUNK_BATCHES, length_bucketed
from lmpipe.interop.hf.checkpoint import checkpoint_model_type
from lmpipe.interop.hf.encoders import albert_from_pretrained, bert_from_pretrained
from lmpipe.interop.hf.xlnet import xlnet_from_pretrained
from lmpipe.pipelines.pipeline import EncoderPipeline
from lmpipe.tokenizers.sentence_piece import SentencePieceTokenizer
from lmpipe.tokenizers.wordpiece import WordPieceTokenizer

# Examples held in memory are shuffled all together; a tf.data.Dataset of examples through a
# buffer of this many.
SHUFFLE_BUFFER = 10_000


class FineTuningPipeline(EncoderPipeline):
    """A pipeline that fine-tunes a copy of `encoder` (a trained encoder `keras.Model`:
    `token_ids`, `segment_ids`, `padding_mask` in) with a task's head.

    What every fine-tuning task shares is here, once: the encoder check, the copy of the
    encoder each new model starts from (the encoder given keeps its weights), the run
    configuration checked on resume, and the batches: `check_data` turns the task's examples
    into a source with `size` (and `in_memory`), `examples_dataset(source)` gives one element
    per example; the base shards them among input pipelines, shuffles them again at every epoch
    (deterministically from `seed`, the input pipeline and the epoch), batches them
    (`batch_examples`) and maps each batch to `(features, labels)` (`model_inputs`). For
    training and evaluation it batches examples of similar length together, each batch cut
    to a length bucket (`length_buckets`), and `fit` reports `examples_per_second` at each
    epoch's end.
    """

    default_epochs = 3
    data_name = "the examples"
    # Whether training and evaluation batch examples of similar length together, each batch
    # cut to its length bucket (`lmpipe.datasets.labelled.length_buckets`): the same examples
    # and results, a fraction of the work on short texts. False: every batch padded to
    # `seq_len` (to compare, or for a model that needs one length).
    length_buckets = True
    reports_throughput = True
    # Whether the task splits text into words by WordPiece's rules (each word tokenized alone):
    # with a SentencePiece model that gives other pieces than the text's own ("▁," for ","),
    # so such a task takes a WordPiece tokenizer only.
    wordpiece_words = False

    def __init__(self, tokenizer, encoder, **options):
        if self.wordpiece_words and not isinstance(tokenizer, WordPieceTokenizer):
            raise ValueError(
                f"{type(self).__name__} splits text into words as WordPiece does and needs a "
                f"WordPieceTokenizer, got {type(tokenizer).__name__} (word-level tasks with "
                "SentencePiece models are not supported yet)."
            )
        if not isinstance(encoder, keras.Model):
            raise ValueError(
                f"`encoder` must be a keras.Model (e.g. BertPretraining.encoder), got "
                f"{type(encoder).__name__}."
            )
        super().__init__(tokenizer, None, **options)
        check_encoder(encoder, tokenizer, self.options.seq_len)
        self._initial_encoder = encoder
        # XLNet's texts end with <sep> <cls> and its pooled output reads the <cls>; BERT's and
        # ALBERT's start with [CLS].
        self.packing_layout = encoder_layout(encoder)

    # Constructors -----------------------------------------------------------------------------

    @classmethod
    def from_pretraining(cls, pipeline, *task, seq_len=None, **options):
        """Fine-tune the encoder of a trained (or loaded) `BertPretraining`,
        `AlbertPretraining` or `XLNetPretraining` with its tokenizer; `seq_len` defaults to the
        pipeline's. `task` and `options`: the task's own arguments (a classifier's
        `num_classes`, a tagger's `tags`, ...), as its constructor takes them."""
        if not isinstance(pipeline, EncoderPipeline):
            raise ValueError(
                f"{cls.__name__} fine-tunes a BERT/ALBERT-family or XLNet encoder; the "
                f"pretrained pipeline is a {type(pipeline).__name__}, which has none: pretrain "
                "with BertPretraining, AlbertPretraining or XLNetPretraining (`lmpipe pretrain "
                "bert|albert|xlnet`), or start from a Hugging Face BERT, ALBERT or XLNet folder."
            )
        seq_len = pipeline.options.seq_len if seq_len is None else seq_len
        return cls(pipeline.tokenizer, pipeline.encoder, *task, seq_len=seq_len, **options)

    @classmethod
    def from_pretrained(cls, directory, *task, **options):
        """Fine-tune a Hugging Face BERT, ALBERT or XLNet checkpoint folder (`config.json`,
        `model.safetensors`, and `vocab.txt`, `spiece.model` or a `tokenizer.json`): the encoder of
        `bert_from_pretrained(directory)` and the WordPiece tokenizer of
        `WordPieceTokenizer.from_pretrained(directory)`, or `albert_from_pretrained` /
        `xlnet_from_pretrained` and `SentencePieceTokenizer.from_pretrained`, as config.json's
        `model_type` says. `task` and `options` as for `from_pretraining`."""
        model_type = checkpoint_model_type(directory)
        if model_type in ("albert", "xlnet"):
            load = albert_from_pretrained if model_type == "albert" else xlnet_from_pretrained
            encoder = load(directory)
            tokenizer = SentencePieceTokenizer.from_pretrained(directory)
        else:
            encoder = bert_from_pretrained(directory)
            tokenizer = WordPieceTokenizer.from_pretrained(directory)
        return cls(tokenizer, encoder, *task, **options)

    # Data -------------------------------------------------------------------------------------

    def examples_dataset(self, source):
        """A `tf.data.Dataset`, one element per example of `source` (from `check_data`)."""
        return source.dataset

    def batch_examples(self, dataset, batch_size, drop_remainder):
        """Examples to batches (a task with ragged examples batches them ragged)."""
        return dataset.batch(batch_size, drop_remainder=drop_remainder)

    def model_inputs(self, batch):
        """A batch of examples as `(features, labels)`; not called when a task's examples are
        `(features, labels)` already (the base's)."""
        raise NotImplementedError

    def training_batches(self, source, per_replica, input_context):
        return self.batches(
            source, per_replica, True, None, input_context, True, self.length_buckets
        )

    def evaluation_batches(self, source, batch_size, steps):
        epochs = None if steps else 1
        return self.batches(source, batch_size, False, epochs, None, False, self.length_buckets)

    def steps_in_one_pass(self, source, batch_size):
        """`ceil(number of examples / batch_size)`: the last, partial batch counts."""
        return math.ceil(source.size / batch_size)

    def batches(
        self,
        source,
        batch_size,
        shuffle,
        epochs,
        input_context,
        drop_remainder,
        length_buckets=False,
    ):
        """The batches of `source`: shuffled again every epoch or in order, `epochs` passes
        (None: forever), this input pipeline's shard only; padded to `seq_len`, or with
        `length_buckets` grouped by length and each cut to its length bucket (see
        `lmpipe.datasets.labelled.length_buckets`)."""
        check_positive_int("epochs", epochs, none=True)
        if drop_remainder is None:
            drop_remainder = epochs is None
        num_pipelines, pipeline_id = 1, 0
        if input_context is not None:
            num_pipelines = input_context.num_input_pipelines
            pipeline_id = input_context.input_pipeline_id
        dataset = self.examples_dataset(source)
        if num_pipelines > 1:
            dataset = dataset.shard(num_pipelines, pipeline_id)
        if shuffle:
            in_memory = getattr(source, "in_memory", True)
            buffer = max(min(source.size, SHUFFLE_BUFFER), 1) if in_memory else SHUFFLE_BUFFER
            examples = dataset

            def epoch_examples(epoch):
                seed = tf.random.experimental.stateless_fold_in(
                    tf.constant([self.options.seed, pipeline_id], tf.int64), epoch
                )
                return window_shuffle(examples, buffer, seed)

            dataset = by_epoch(epoch_examples, epochs)
        else:
            dataset = dataset.repeat(epochs)
        if not length_buckets:
            dataset = self.batch_examples(dataset, batch_size, drop_remainder)
            return self.packed(dataset).prefetch(tf.data.AUTOTUNE)
        # Chunks of examples packed together (one vectorized packing of many texts), sorted
        # by length and cut into batches of similar length.
        chunks = self.batch_examples(dataset, batch_size * CHUNK_BATCHES, False)
        seed = None
        if shuffle:
            seed = tf.constant([self.options.seed, pipeline_id], tf.int64)
        dataset = length_bucketed(
            self.packed(chunks), batch_size, self.options.seq_len, drop_remainder, seed
        )
        return dataset.prefetch(tf.data.AUTOTUNE)

    def packed(self, batches):
        """`batches` of examples as `(features, labels)` (`model_inputs`), where the task's
        examples are not `(features, labels)` already."""
        if type(self).model_inputs is FineTuningPipeline.model_inputs:
            return batches
        return batches.map(self.model_inputs, num_parallel_calls=tf.data.AUTOTUNE)

    # Model ------------------------------------------------------------------------------------

    def default_config(self):
        return None  # the model is the encoder given, with a head

    @property
    def encoder(self):
        """The fine-tuned encoder once the pipeline is trained or loaded, else the encoder it
        starts from."""
        return self.model.encoder if self.model is not None else self._initial_encoder

    @property
    def encoder_width(self):
        """The size of the encoder's pooled vector (its hidden width)."""
        return int(self.encoder.output["pooled_output"].shape[-1])

    def encoder_copy(self):
        """A copy of the starting encoder with its weights, for a new model. Made where this is
        called, so that inside a distribution strategy's scope its variables are the
        strategy's; the starting encoder keeps its weights."""
        source = self._initial_encoder
        encoder = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(source))
        encoder.set_weights(source.get_weights())
        return encoder

    def head_initializer(self):
        """BERT's initializer for the task's head, seeded by the pipeline's `seed`."""
        return keras.initializers.TruncatedNormal(stddev=0.02, seed=self.options.seed)

    # Save ---------------------------------------------------------------------------------------

    def class_names(self):
        """The names of the head's classes, written as a Hugging Face config.json's `id2label`
        (None: "0", "1", ...; a span answerer has no classes)."""
        return None

    def save_pretrained(self, directory, heads=None):
        """Write the fine-tuned model and the tokenizer as a Hugging Face folder: with its task
        head (`heads` None or True), `BertForSequenceClassification`,
        `*ForTokenClassification`, `*ForQuestionAnswering` and the ALBERT and XLNet ones, with
        `num_labels`, `id2label` and `label2id` (see `lmpipe.interop.hf.save_task_pretrained`);
        with `heads=False` the fine-tuned encoder alone (`BertModel`, `AlbertModel`,
        `XLNetModel`). A ValueError, before anything is written, names what Hugging Face's
        classes cannot express."""
        from lmpipe.interop.hf.encoder_layers import encoder_config_of
        from lmpipe.interop.hf.tasks import save_task_pretrained
        from lmpipe.interop.hf.writer import save_pretrained

        model = self.require_model()
        if heads is False:
            _, config = encoder_config_of(model.encoder)
            save_pretrained(directory, model.encoder, config, self.tokenizer)
        else:
            save_task_pretrained(directory, model, self.tokenizer, self.class_names())

    def run_config(self):
        encoder = self._initial_encoder
        return {
            "encoder": {
                "name": encoder.name,
                "weight_shapes": [list(weight.shape) for weight in encoder.weights],
            },
            "vocabulary_size": self.tokenizer.vocabulary_size,
            **self.options.to_dict(),
        }


def encoder_layout(encoder):
    """How texts are packed for `encoder`: "xlnet" (`A <sep> B <sep> <cls>`) for an `xlnet()`
    encoder (its `word_embedding` and relative `position_encoding`), else "bert"."""
    names = {layer.name for layer in encoder.layers}
    return "xlnet" if {"word_embedding", "position_encoding"} <= names else "bert"


def check_encoder(encoder, tokenizer, seq_len):
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
