"""Corpora: text read from files and bundled sets as documents of sentences, streamed by
`tf.data`, with their validation, manifest, sharding and shuffling."""
