"""The seekable stream: pretraining examples addressed by where they are, so that a run can
restart anywhere without rebuilding the batches before, and on another number of replicas.

The contract (every pretraining family built from text: BERT/ALBERT, XLNet, GPT, ELMo):

- The corpus is read in windows of documents, epoch after epoch, in the keyed order of
  `lmpipe.datasets.corpora.document_order`: `(epoch, window)` names a window's documents.
- A family turns a window's documents into its examples with a function of the documents and
  the window's key alone (`window_key(seed, epoch, window)`): tokenizing, cutting, packing and
  every random draw (sentence pairs, masking, permutations) happen per window, keyed by it.
  The window's examples are then put in a keyed random order.
- The example at offset `o` of window `w` of epoch `e` is therefore a pure function of the
  seed, the corpus and `(e, w, o)`: its `StreamPosition`. Every example carries it, as the
  feature `stream_position` int64 `[3]`.
- The stream is one global sequence: windows in order, each window's examples in order. A
  batch of `B` is `B` consecutive examples of it. Under a strategy with `R` replicas, the
  global batch at step `s` is the same `B` examples for every `R` that divides `B`: a single
  input pipeline (one machine) hands consecutive per-replica batches to replicas 0, 1, ...;
  with several input pipelines (workers), each reads the whole stream and keeps the
  consecutive share of its replicas (its input work is the whole stream's).
- Resuming starts the stream at a position: the window is read directly (its documents and
  nothing before them, see `document_order`), its examples rebuilt, and the `offset` first
  skipped. The training loop keeps the position of the first example of the last batch it
  trained (see `lmpipe.models.trainable`) in the checkpoint, and resumes one batch after it.

A window's examples are all built at once, vectorized: the window is also the unit of work of
the input pipeline's parallel map.
"""

import dataclasses

import tensorflow as tf

from lmpipe.arguments import check_number, check_positive_int
from lmpipe.contract import STREAM_POSITION
from lmpipe.datasets.corpora.document_order import document_windows
from lmpipe.datasets.corpora.sharding import pipeline_position
from lmpipe.datasets.corpora.shuffling import graph_code, key_of, shuffled

DEFAULT_WINDOW_SIZE = 64


@dataclasses.dataclass(frozen=True)
class StreamPosition:
    """Where an example is in the stream: `offset` examples into window `window` of epoch
    `epoch`. An offset past the window's last example continues into the windows after it, so
    `StreamPosition(e, w, o).advanced(n)` is always the example `n` further on.

    Example:

    >>> StreamPosition(2, 7, 30).advanced(32)
    StreamPosition(epoch=2, window=7, offset=62)
    """

    epoch: int = 0
    window: int = 0
    offset: int = 0

    def __post_init__(self):
        for field in dataclasses.fields(self):
            check_number(field.name, getattr(self, field.name), minimum=0, integer=True)

    def advanced(self, examples):
        """The position `examples` examples further on."""
        return dataclasses.replace(self, offset=self.offset + int(examples))

    @classmethod
    def of(cls, values):
        """The position held in a `stream_position` row (a `[3]` tensor, array or list)."""
        epoch, window, offset = (int(value) for value in tf.reshape(values, [3]).numpy())
        return cls(epoch, window, offset)

    @classmethod
    def after(cls, batch):
        """The position of the example after a batch's last: where to start the stream again
        to continue after it (in a loop of one input pipeline).

        Args:
            batch: a batch of the stream: `(features, labels)` or the features, whose
                `stream_position` is int64 `[B, 3]`.
        """
        features = batch[0] if isinstance(batch, tuple) else batch
        if not isinstance(features, dict) or STREAM_POSITION not in features:
            raise ValueError(
                f"`batch` holds no `{STREAM_POSITION}`: give a batch of a pretraining "
                "pipeline's `dataset` (its features, or `(features, labels)`)."
            )
        return cls.of(features[STREAM_POSITION][-1]).advanced(1)

    def as_list(self):
        """`[epoch, window, offset]`, for JSON."""
        return [self.epoch, self.window, self.offset]


def window_key(seed, epoch, window):
    """The `[2]` int64 key of every random draw for window `window` of epoch `epoch`."""
    return key_of(seed, "window", epoch, window)


def stream_examples(corpus, window_examples, *, seed, window_size, start=None, epochs=None):
    """The stream's examples, one by one, from `start` on.

    Args:
        corpus: a `TextCorpus` or `TokenizedCorpus`.
        window_examples: `(documents, key) -> {name: [N, ...] tensor}`, the family's examples
            of a window's documents (`[G, (sentences)]` strings, or `[G, (sentences),
            (tokens)]` int32 ids), every random draw keyed by `key` (a `[2]` int64 tensor);
            `N` may be 0. Traced as graph code (no AutoGraph).
        seed: the int seed of the stream.
        window_size: documents per window.
        start: a `StreamPosition` (None: the beginning).
        epochs: the number of epochs (passes over the corpus), or None to go on forever.

    Returns:
        A `tf.data.Dataset` of `{name: tensor}` examples, each with `stream_position` int64
        `[3]`.
    """
    check_positive_int("window_size", window_size)
    start = StreamPosition() if start is None else start
    if not isinstance(start, StreamPosition):
        raise ValueError(f"`start` must be a StreamPosition or None, got {start!r}.")
    windows = document_windows(
        corpus,
        seed=seed,
        window_size=window_size,
        epoch=start.epoch,
        window=start.window,
        epochs=epochs,
    )
    build = graph_code(window_examples)

    def examples_of(epoch, window, documents):
        key = window_key(seed, epoch, window)
        examples = build(documents, key)
        count = tf.shape(tf.nest.flatten(examples)[0], out_type=tf.int64)[0]
        order = shuffled(tf.range(count), key, 0)
        examples = {name: tf.gather(value, order) for name, value in examples.items()}
        examples[STREAM_POSITION] = tf.stack(
            [tf.fill([count], epoch), tf.fill([count], window), tf.range(count)], axis=1
        )
        return examples

    examples = windows.map(
        graph_code(examples_of), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
    ).unbatch()
    return examples.skip(start.offset) if start.offset else examples


def stream_batches(examples, batch_size, input_context=None, drop_remainder=True):
    """Batches of `batch_size` consecutive examples of the stream, for one input pipeline.

    With several input pipelines (`input_context`: workers), pipeline `i` keeps, of every
    global step's examples, the consecutive share of its replicas, so that replica `r` gets
    the same examples whatever the number of pipelines (see the module docstring).
    """
    check_positive_int("batch_size", batch_size)
    num_pipelines, pipeline_id = pipeline_position(input_context)
    if num_pipelines > 1:
        replicas = input_context.num_replicas_in_sync // num_pipelines
        share = batch_size * replicas
        examples = (
            examples.batch(share, drop_remainder=True).shard(num_pipelines, pipeline_id).unbatch()
        )
    return examples.batch(batch_size, drop_remainder=drop_remainder)
