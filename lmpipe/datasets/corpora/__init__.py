"""Corpora: text read from files and installed packages (Shakespeare's plays, the Bible) as
documents of sentences, streamed by `tf.data`, with their validation, manifest, sharding,
shuffling and held-out splits."""
