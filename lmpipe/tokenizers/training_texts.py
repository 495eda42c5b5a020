"""The texts a vocabulary learner reads from a corpus: a `TextCorpus`, a `tf.data.Dataset` of
strings or an iterable of strings, as one stream of texts or batches of them (the WordPiece,
SentencePiece and byte-level BPE learners all take their corpus this way)."""

import tensorflow as tf


def corpus_texts(corpus):
    """The texts of `corpus` as a tf.data.Dataset of scalar strings or a Python iterable."""
    if isinstance(corpus, (str, bytes)):
        raise ValueError(
            "`corpus` must be a TextCorpus, a tf.data.Dataset of strings or a list of texts, "
            "got a single string; for files use TextCorpus.from_files(...)."
        )
    if isinstance(corpus, tf.data.Dataset):
        dataset = corpus
    elif callable(getattr(corpus, "documents", None)):
        dataset = corpus.documents()
    elif callable(getattr(corpus, "iter_documents", None)):
        return (sentence for document in corpus.iter_documents() for sentence in document)
    else:
        try:
            return iter(corpus)
        except TypeError:
            raise ValueError(
                "`corpus` must be a TextCorpus, a tf.data.Dataset of strings or an iterable "
                f"of texts, got {type(corpus).__name__}."
            ) from None
    spec = dataset.element_spec
    if not isinstance(spec, (tf.TensorSpec, tf.RaggedTensorSpec)) or spec.dtype != tf.string:
        raise ValueError(f"`corpus` must yield string tensors, got elements of spec {spec}.")
    if isinstance(spec, tf.RaggedTensorSpec):
        dataset = dataset.map(lambda x: x.flat_values)
    elif spec.shape.rank != 0:
        dataset = dataset.map(lambda x: tf.reshape(x, [-1]))
    if isinstance(spec, tf.RaggedTensorSpec) or spec.shape.rank != 0:
        dataset = dataset.unbatch()
    return dataset


def corpus_batches(corpus, batch_size):
    """The texts of `corpus` (see `corpus_texts`) as string tensors `[batch_size]` (the last
    one shorter); a text that is not a string is a ValueError naming its index."""
    sentences = corpus_texts(corpus)
    if isinstance(sentences, tf.data.Dataset):
        yield from sentences.batch(batch_size)
        return
    batch = []
    for i, sentence in enumerate(sentences):
        if not isinstance(sentence, (str, bytes)):
            raise ValueError(
                f"`corpus` must contain strings; text {i} is a {type(sentence).__name__}."
            )
        batch.append(sentence)
        if len(batch) == batch_size:
            yield tf.constant(batch, tf.string)
            batch = []
    if batch:
        yield tf.constant(batch, tf.string)
