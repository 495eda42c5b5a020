"""A toy seekable stream and a regression trained on it, for the training loop's stream tests
(in the test process, and in stream_resume_script.py's own process with logical devices).

The stream is the real one (`lmpipe.datasets.examples.stream` over a small in-memory corpus);
its examples are regression examples drawn from each window's key and its sentences, so a
batch depends on nothing but its position in the stream."""

import keras
import tensorflow as tf
from keras import ops

from lmpipe.contract import STREAM_POSITION
from lmpipe.datasets.corpora.corpus import TextCorpus
from lmpipe.datasets.corpora.corpus_mixture import CorpusMixture
from lmpipe.datasets.examples.stream import stream_batches, stream_examples
from lmpipe.models.trainable import FunctionalTrainableModel
from lmpipe.training.loop import train
from lmpipe.training.options import TrainingOptions

RUN_CONFIG = {"model": "stream regression"}
COEFFICIENTS = (1.0, -2.0, 3.0, 0.5)


def corpus():
    """23 documents of 1 to 4 sentences: windows of 5 documents hold 6 to 15 examples."""
    return TextCorpus.from_documents(
        [[f"document {i} sentence {j}" for j in range(1 + i % 4)] for i in range(23)]
    )


def mixture():
    """`corpus()` and 11 other documents, 70% / 30% in chunks of 3 examples."""
    other = TextCorpus.from_documents(
        [[f"other {i} line {j}" for j in range(1 + i % 3)] for i in range(11)]
    )
    return CorpusMixture([(corpus(), 0.7), (other, 0.3)], chunk_size=3)


def window_examples(documents, key):
    """One example per sentence: features keyed by the window and the sentence."""
    sentences = documents.values
    shift = tf.cast(tf.strings.to_hash_bucket_fast(sentences, 7), tf.float32)[:, None]
    x = tf.random.stateless_normal([tf.shape(sentences)[0], 4], seed=key) + 0.1 * shift
    return {"x": x, "y": tf.reduce_sum(x * tf.constant(COEFFICIENTS), axis=1)}


class Regression(FunctionalTrainableModel):
    """`y = w . x + b` with the mean squared error."""

    def __init__(self, **kwargs):
        inputs = keras.Input(shape=(4,), name="x")
        outputs = keras.layers.Dense(1, name="dense")(inputs)
        super().__init__(inputs={"x": inputs}, outputs=outputs, **kwargs)

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        # Summed over the replicas' examples and divided by the global batch (as lmpipe's
        # losses are), so that replicas add up to the one-replica loss.
        replicas = tf.distribute.get_strategy().num_replicas_in_sync
        return ops.sum(ops.square(y_pred[:, 0] - y)) / ops.cast(
            ops.shape(y)[0] * replicas, "float32"
        )


def stream_dataset(calls=None, data=None):
    """`make_dataset` for `train` on `data` (None: `corpus()`), noting each call's `(skip,
    start)` in `calls`."""
    data = corpus() if data is None else data

    def make_dataset(per_replica, input_context, skip, start=None):
        if calls is not None:
            calls.append((skip, start))
        examples = stream_examples(data, window_examples, seed=3, window_size=5, start=start)
        batches = stream_batches(examples, per_replica, input_context)
        batches = batches.map(
            lambda e: ({"x": e["x"], STREAM_POSITION: e[STREAM_POSITION]}, e["y"])
        )
        return batches.skip(skip)

    return make_dataset


class Positions(keras.callbacks.Callback):
    """The stream position each trained step kept (its global batch's first example)."""

    def __init__(self, mixture=False):
        super().__init__()
        self.positions = []
        self.variable = "_stream_mixture_position" if mixture else "_stream_position"

    def on_train_batch_end(self, batch, logs=None):
        variable = self.model.__dict__[self.variable]
        self.positions.append([int(value) for value in variable.numpy()])


def fit(
    directory,
    epochs,
    *,
    strategy=None,
    batch_size=4,
    steps_per_epoch=3,
    callbacks=(),
    calls=None,
    data=None,
):
    """Train the regression on the stream of `data` (None: `corpus()`) with checkpoints in
    `directory`; return the model."""
    model, _ = train(
        Regression,
        stream_dataset(calls, data),
        run_config=RUN_CONFIG,
        batch_size=batch_size,
        epochs=epochs,
        steps_per_epoch=steps_per_epoch,
        options=TrainingOptions(
            strategy=strategy,
            checkpoint_dir=None if directory is None else str(directory),
            checkpoint_every=1,
            learning_rate=0.05,
            warmup_steps=1,
            callbacks=list(callbacks),
            verbose=0,
        ),
        seed=1,
    )
    return model
