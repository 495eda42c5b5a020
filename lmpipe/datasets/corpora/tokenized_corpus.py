"""Offline mode: tokenize a corpus once into TFRecord files, and read it back as a corpus.

For corpora too large to tokenize at every epoch. `write_tokenized_corpus` stores one record
per document (its token ids, flat, and the length of each sentence) in sharded TFRecord files
with a `corpus.json` that records the tokenizer's vocabulary fingerprint and the counts.
`TokenizedCorpus` reads them back; the BERT/ALBERT example pipeline accepts it wherever it
accepts a `TextCorpus` and skips tokenization, so pairs and masks are still drawn online.
"""

import hashlib
import json
import os

import numpy as np
import tensorflow as tf

from lmpipe.arguments import check_inside, check_positive_int
from lmpipe.datasets.corpora.sharding import read_sharded

CORPUS_FILE = "corpus.json"
FORMAT_VERSION = 1


def vocabulary_fingerprint(vocabulary):
    """A short hash of a vocabulary (list of tokens), to detect mismatched tokenizers."""
    return hashlib.sha256("\n".join(vocabulary).encode("utf-8")).hexdigest()[:16]


def _serialize(token_ids, sentence_lengths):
    """One document's record: its token ids, flat, and the length of each sentence."""
    features = {
        "token_ids": tf.train.Feature(int64_list=tf.train.Int64List(value=token_ids)),
        "sentence_lengths": tf.train.Feature(int64_list=tf.train.Int64List(value=sentence_lengths)),
    }
    return tf.train.Example(features=tf.train.Features(feature=features)).SerializeToString()


def _documents(tokens):
    """`(token_ids, sentence_lengths)` lists of each document of a tokenized batch `[G, (S),
    (T)]`, its sentences without tokens left out (`([], [])` for a document left empty), read
    from the ragged tensor's flat arrays (`to_list` costs most of the time otherwise)."""
    document_splits = tokens.row_splits.numpy()  # [G + 1] over sentences
    lengths = tokens.values.row_lengths().numpy()  # [S in all]
    token_splits = np.concatenate([[0], np.cumsum(lengths)])
    flat = tokens.flat_values.numpy()
    for start, end in zip(document_splits[:-1], document_splits[1:], strict=True):
        document_lengths = lengths[start:end]
        ids = flat[token_splits[start] : token_splits[end]]
        yield ids.tolist(), document_lengths[document_lengths > 0].tolist()


def write_tokenized_corpus(corpus, tokenizer, directory, num_shards=1, batch_size=256):
    """Tokenize every document of `corpus` and write them to `directory` as TFRecord shards.

    Sentences without any token are left out (they would be skipped online too); a document
    left with no sentence is left out and counted in `corpus.json` (`num_empty_documents`).

    Args:
        corpus: a `TextCorpus`.
        tokenizer: the `WordPieceTokenizer` to apply.
        directory: output folder (created); files `documents-00000-of-0000N.tfrecord`.
        num_shards: number of files, documents dealt round-robin; several files let
            multi-worker training shard by file.
        batch_size: documents tokenized per call. Batches are tokenized on tf.data's threads,
            several at once, while the records of earlier ones are written.

    Returns:
        A `TokenizedCorpus` reading the written files.
    """
    check_positive_int("num_shards", num_shards)
    tf.io.gfile.makedirs(directory)
    paths = [
        os.path.join(directory, f"documents-{index:05d}-of-{num_shards:05d}.tfrecord")
        for index in range(num_shards)
    ]
    writers = [tf.io.TFRecordWriter(path) for path in paths]
    num_documents = num_sentences = num_tokens = num_empty = 0
    try:
        batches = (
            corpus.documents()
            .ragged_batch(batch_size)
            .map(
                tokenizer.tokenize_documents,  # [G, (S), (T)]
                num_parallel_calls=tf.data.AUTOTUNE,
                deterministic=True,
            )
            .prefetch(tf.data.AUTOTUNE)
        )
        for tokens in batches:
            for token_ids, sentence_lengths in _documents(tokens):
                if not sentence_lengths:
                    num_empty += 1
                    continue
                writers[num_documents % num_shards].write(_serialize(token_ids, sentence_lengths))
                num_documents += 1
                num_sentences += len(sentence_lengths)
                num_tokens += len(token_ids)
    finally:
        for writer in writers:
            writer.close()
    if num_documents == 0:
        raise ValueError(
            f"The corpus has no document with any token; nothing was written to {directory!r}."
        )
    description = {
        "format_version": FORMAT_VERSION,
        "files": [os.path.basename(path) for path in paths],
        "num_documents": num_documents,
        "num_sentences": num_sentences,
        "num_tokens": num_tokens,
        "num_empty_documents": num_empty,
        "documents_per_file": [
            num_documents // num_shards + (index < num_documents % num_shards)
            for index in range(num_shards)
        ],
        "vocabulary_size": tokenizer.vocabulary_size,
        "vocabulary_fingerprint": vocabulary_fingerprint(tokenizer.vocabulary),
        "lower_case": tokenizer.lower_case,
    }
    with tf.io.gfile.GFile(os.path.join(directory, CORPUS_FILE), "w") as file:
        json.dump(description, file, indent=2)
    return TokenizedCorpus(directory)


class TokenizedCorpus:
    """Documents already tokenized by `write_tokenized_corpus`, read from TFRecord files.

    `documents()` yields int32 RaggedTensors `[num_sentences, (tokens)]`, one per document,
    with the same sharding rules as `TextCorpus.documents()`: by file when there are at least
    as many files as input pipelines, else by document.

    Args:
        directory: the folder written by `write_tokenized_corpus`.
    """

    tokenized = True

    def __init__(self, directory):
        path = os.path.join(directory, CORPUS_FILE)
        if not tf.io.gfile.exists(path):
            raise ValueError(
                f"{directory!r} is not a tokenized corpus: it has no {CORPUS_FILE} "
                "(write one with write_tokenized_corpus)."
            )
        with tf.io.gfile.GFile(path) as file:
            self._description = json.load(file)
        if self._description.get("format_version") != FORMAT_VERSION:
            raise ValueError(
                f"{path}: unsupported format_version {self._description.get('format_version')!r}."
            )
        names = self._description.get("files")
        if not isinstance(names, list):
            raise ValueError(f"{path}: `files` must be a list of file names, got {names!r}.")
        self._files = tuple(check_inside(directory, name, path, "files") for name in names)
        missing = [name for name in self._files if not tf.io.gfile.exists(name)]
        if missing:
            raise ValueError(f"{path} lists files that do not exist: {missing}.")
        self.directory = directory

    @property
    def files(self):
        """The TFRecord files."""
        return self._files

    @property
    def num_documents(self):
        """Number of documents."""
        return self._description["num_documents"]

    def __len__(self):
        return self.num_documents

    def __repr__(self):
        d = self._description
        return (
            f"TokenizedCorpus({self.directory!r}, documents={d['num_documents']}, "
            f"sentences={d['num_sentences']}, tokens={d['num_tokens']})"
        )

    def check_tokenizer(self, tokenizer):
        """Raise unless `tokenizer` has the vocabulary the corpus was tokenized with."""
        expected = self._description["vocabulary_fingerprint"]
        if vocabulary_fingerprint(tokenizer.vocabulary) != expected:
            raise ValueError(
                f"The tokenized corpus {self.directory!r} was written with another vocabulary "
                f"({self._description['vocabulary_size']} tokens, fingerprint {expected}) than "
                f"the tokenizer's ({tokenizer.vocabulary_size} tokens)."
            )

    def file_document_counts(self):
        """The documents in each of `files`: from the description (written since the stream
        reads them), else counted once, record by record."""
        counts = self._description.get("documents_per_file")
        if counts is None:
            counts = [
                int(
                    tf.data.TFRecordDataset(path).reduce(
                        tf.constant(0, tf.int64), lambda n, _: n + 1
                    )
                )
                for path in self._files
            ]
            self._description["documents_per_file"] = counts
        if len(counts) != len(self._files) or sum(counts) != self.num_documents:
            raise ValueError(
                f"{os.path.join(self.directory, CORPUS_FILE)}: documents_per_file {counts} does "
                f"not match its {len(self._files)} files and {self.num_documents} documents."
            )
        return list(counts)

    def file_documents(self, path):
        """The documents of one of `files` (a scalar string tensor), int32 RaggedTensors
        `[num_sentences, (tokens)]`."""
        return tf.data.TFRecordDataset(path).map(_parse, num_parallel_calls=tf.data.AUTOTUNE)

    def document_tensor(self):
        """A tokenized corpus is read from files: it has no document tensor."""
        raise ValueError(f"{self!r} is read from files; it has no document tensor.")

    def documents(self, input_context=None, shuffle_files=False, seed=None, epoch=0):
        """A `tf.data.Dataset` of int32 `[num_sentences, (tokens)]` documents, for one input
        pipeline (see the class docstring for sharding; `shuffle_files` permutes the file
        order by a permutation keyed by `seed` and `epoch`, as `TextCorpus.documents`)."""
        records = read_sharded(
            self._files, tf.data.TFRecordDataset, input_context, shuffle_files, seed, epoch
        )
        return records.map(_parse, num_parallel_calls=tf.data.AUTOTUNE)


_RECORD_SPEC = {
    "token_ids": tf.io.RaggedFeature(tf.int64),
    "sentence_lengths": tf.io.RaggedFeature(tf.int64),
}


def _parse(record):
    """A record of `write_tokenized_corpus` -> int32 `[num_sentences, (tokens)]`."""
    parsed = tf.io.parse_single_example(record, _RECORD_SPEC)
    return tf.RaggedTensor.from_row_lengths(
        tf.cast(parsed["token_ids"], tf.int32), parsed["sentence_lengths"]
    )
