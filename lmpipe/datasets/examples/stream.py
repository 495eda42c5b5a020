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

A `CorpusMixture` streams each of its sources so and interleaves them by a deterministic
schedule (`lmpipe.datasets.examples.mixture`); its examples' positions are `MixturePosition`s.
"""

from lmpipe.arguments import check_positive_int
from lmpipe.datasets.corpora.corpus_mixture import CorpusMixture
from lmpipe.datasets.corpora.sharding import pipeline_position
from lmpipe.datasets.examples.corpus_stream import corpus_examples, window_key
from lmpipe.datasets.examples.mixture import mixture_examples
from lmpipe.datasets.examples.stream_position import MixturePosition, StreamPosition

DEFAULT_WINDOW_SIZE = 64

__all__ = [
    "DEFAULT_WINDOW_SIZE",
    "MixturePosition",
    "StreamPosition",
    "stream_batches",
    "stream_examples",
    "window_key",
]


def stream_examples(
    corpus, window_examples, *, seed, window_size, start=None, epochs=None, window_order=None
):
    """The stream's examples, one by one, from `start` on.

    Args:
        corpus: a `TextCorpus`, `TokenizedCorpus` or `CorpusMixture`.
        window_examples: `(documents, key) -> {name: [N, ...] tensor}`, the family's examples
            of a window's documents (`[G, (sentences)]` strings, or `[G, (sentences),
            (tokens)]` int32 ids), every random draw keyed by `key` (a `[2]` int64 tensor);
            `N` may be 0. Traced as graph code (no AutoGraph).
        seed: the int seed of the stream.
        window_size: documents per window.
        start: a `StreamPosition` (a `MixturePosition` for a mixture), or None: the beginning.
        epochs: the number of epochs (passes over the corpus, over each source of a mixture),
            or None to go on forever.
        window_order: None, or `(examples, order, key) -> order`: the order a window's
            examples go in, from their keyed random `order` (int64 `[N]`), a function of the
            window's examples and key alone (BERT's length groups, see
            `lmpipe.datasets.examples.length_groups`).

    Returns:
        A `tf.data.Dataset` of `{name: tensor}` examples, each with `stream_position` int64
        `[3]` (`[1 + K, 3]` for a mixture of `K` sources).
    """
    stream = mixture_examples if isinstance(corpus, CorpusMixture) else corpus_examples
    return stream(
        corpus,
        window_examples,
        seed=seed,
        window_size=window_size,
        start=start,
        epochs=epochs,
        window_order=window_order,
    )


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
