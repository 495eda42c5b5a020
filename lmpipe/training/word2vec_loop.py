"""word2vec's own training loop: SGD epochs over its batches, the learning rate decaying
linearly by words processed, each epoch's loss, examples and speed recorded. (Why word2vec
does not train through `lmpipe.training.loop.train`: see `lmpipe.pipelines.word2vec`.)"""

import time

import tensorflow as tf

from lmpipe.training.callbacks import History


def is_distributed(strategy):
    """Whether `strategy` mirrors the tables over several devices or workers."""
    return isinstance(
        strategy, (tf.distribute.MirroredStrategy, tf.distribute.MultiWorkerMirroredStrategy)
    )


def epoch_function(model, strategy, total_words, alpha, min_alpha, sequential):
    """A `tf.function` that trains `model` (a `Word2VecModel`) by SGD step by step on a
    (distributed) dataset to its end, or on `steps` batches of an iterator, and returns
    `(loss, examples, words_done)`; the learning rate decays from `alpha` to `min_alpha` over
    `total_words`, by the words done. `sequential`: the example-by-example update."""

    # The batched step: XLA fuses its gathers, products and scatters (2-3x faster on
    # CPU); the batches have one fixed shape, so it compiles once. Under a distribution
    # strategy the updates of mirrored tables go through a cross-replica merge, which XLA
    # cannot compile. The sequential step is one op of lmpipe's own.
    @tf.function(jit_compile=not (sequential or is_distributed(strategy)))
    def step(features, learning_rate):
        loss, count = model.sgd_step(
            features, tf.cast(learning_rate, tf.float32), sequential=sequential
        )
        return loss, count, tf.reduce_sum(features["words"])

    @tf.function
    def run_epoch(batches, words_done, steps=None):
        """Train on `batches`: a dataset, to its end, or an iterator, `steps` batches of it."""
        loss_sum = tf.constant(0.0, tf.float64)
        examples = tf.constant(0, tf.int64)
        if steps is None:
            for features in batches:
                loss, count, words = train_step(features, words_done)
                loss_sum += loss
                examples += count
                words_done += words
        else:
            for _ in tf.range(steps):
                loss, count, words = train_step(batches.get_next(), words_done)
                loss_sum += loss
                examples += count
                words_done += words
        return loss_sum, examples, words_done

    def train_step(features, words_done):
        progress = tf.minimum(words_done / total_words, 1.0)
        learning_rate = alpha - (alpha - min_alpha) * progress
        loss, count, words = strategy.run(step, args=(features, learning_rate))
        return (
            tf.cast(strategy.reduce("SUM", loss, axis=None), tf.float64),
            strategy.reduce("SUM", count, axis=None),
            tf.cast(strategy.reduce("SUM", words, axis=None), tf.float64),
        )

    return run_epoch


def train_epochs(run_epoch, first_epoch, epochs, words_done, words, verbose, end_epoch=None):
    """Epochs `first_epoch` to `epochs` of `run_epoch(epoch, words_done) -> (loss, examples,
    words_done)`, each of `words` words; return their `History` (per epoch `loss` per example,
    `examples`, `words`, `seconds`, `words_per_second`). `end_epoch(epochs_done, words_done)`
    is called after each (to checkpoint it). An epoch without any example is a ValueError,
    raised before `end_epoch`."""
    history = History()
    for epoch in range(first_epoch, epochs):
        start = time.perf_counter()
        loss, examples, words_done = run_epoch(epoch, words_done)
        seconds = time.perf_counter() - start
        if int(examples) == 0:
            # No example means no update: the vectors would stay random while the run looked
            # like it trained.
            raise ValueError(
                f"word2vec made no training example from the corpus in epoch {epoch + 1} "
                f"({words} words of the vocabulary): an example needs a sentence with two "
                "words of the vocabulary left after `sample` drops frequent ones, and none has "
                "them (sentences of one word, or words under `min_count`). Give sentences of "
                "several words, or lower `min_count` or raise `sample`."
            )
        record = {
            "loss": float(loss) / max(float(examples), 1.0),
            "examples": int(examples),
            "words": words,
            "seconds": seconds,
            "words_per_second": words / seconds,
        }
        history.epoch.append(epoch)
        for name, value in record.items():
            history.history.setdefault(name, []).append(value)
        if verbose:
            print(
                f"word2vec epoch {epoch + 1}/{epochs}: loss {record['loss']:.4f}, "
                f"{record['examples']} examples, {record['words_per_second']:,.0f} words/s"
            )
        if end_epoch is not None:
            end_epoch(epoch + 1, words_done)
    return history
