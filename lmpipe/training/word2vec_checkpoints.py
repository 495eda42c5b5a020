"""word2vec's checkpoints: its own training loop's state, resumed as the other families' runs
are (`lmpipe.training.checkpointing.RunCheckpoints`: `run.json` checked, the newest intact
checkpoint restored, never a silent start from epoch 0 while checkpoints are there)."""

import hashlib

import tensorflow as tf

from lmpipe.training.checkpointing import RunCheckpoints


def vocabulary_fingerprint(vocabulary):
    """`{"words": size, "sha256": hash of the words and their counts}`: what says two runs
    train the same rows on the same word frequencies."""
    lines = "\n".join(
        f"{word}\t{count}"
        for word, count in zip(vocabulary.words, vocabulary.counts.tolist(), strict=True)
    )
    return {"words": len(vocabulary), "sha256": hashlib.sha256(lines.encode("utf-8")).hexdigest()}


class Word2VecCheckpoints(RunCheckpoints):
    """The checkpoints of a word2vec run in `directory`, one per epoch: both vector tables, the
    epochs done (which number the checkpoints) and the words processed, where the learning
    rate's linear decay stands, restored as the interrupted run counted them.

    Args:
        directory: the checkpoint directory.
        model: the `Word2VecModel` being trained.
        strategy: the distribution strategy its tables were made in.
        run_config: what identifies the run (`Word2Vec.run_settings`); another on resume is
            a `ValueError` naming the settings that differ.
    """

    def __init__(self, directory, model, strategy, run_config):
        self.epochs_done = tf.Variable(0, dtype=tf.int64, trainable=False)
        self.words_done = tf.Variable(0.0, dtype=tf.float64, trainable=False)
        tables = {
            "input_embeddings": model.embedding.input_embeddings.value,
            "output_embeddings": model.embedding.output_embeddings.value,
            "epoch": self.epochs_done,
        }
        # What checkpoints written before the words processed were kept hold.
        self._without_words = tf.train.Checkpoint(**tables)
        self._restored_words = True
        checkpoint = tf.train.Checkpoint(**tables, words_done=self.words_done)
        # Two kept, so that a damaged newest one has one to fall back on.
        super().__init__(
            directory,
            checkpoint,
            strategy,
            run_config,
            steps=lambda: int(self.epochs_done.numpy()),
            max_to_keep=2,
        )

    def words_processed(self, words_per_epoch):
        """The words the restored epochs processed: as the interrupted run counted them, or
        `words_per_epoch` an epoch from a checkpoint written before they were kept."""
        if self._restored_words:
            return float(self.words_done.numpy())
        return float(self.steps * words_per_epoch)

    def _restore_from(self, prefix):
        names = {name.split("/")[0] for name, _ in tf.train.list_variables(prefix)}
        self._restored_words = "words_done" in names
        checkpoint = self.checkpoint if self._restored_words else self._without_words
        checkpoint.restore(prefix).assert_existing_objects_matched()

    def save_epoch(self, epochs_done, words_done):
        """Checkpoint the tables after `epochs_done` epochs and `words_done` words."""
        self.epochs_done.assign(epochs_done)
        self.words_done.assign(words_done)
        self.save()
