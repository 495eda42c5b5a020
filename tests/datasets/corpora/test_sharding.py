"""Sharding a corpus among input pipelines (`lmpipe.datasets.corpora.sharding`): by file or by
document, disjoint shards that cover the corpus, file orders shuffled by a stateless key."""

import pytest
import tensorflow as tf

from lmpipe.datasets import TextCorpus
from tests.datasets.corpora.test_corpus import sentences_of, tf_documents, write


def shard(corpus, num_pipelines, pipeline_id, **kwargs):
    context = tf.distribute.InputContext(
        num_input_pipelines=num_pipelines, input_pipeline_id=pipeline_id
    )
    return tf_documents(corpus.documents(input_context=context, **kwargs))


def four_files(tmp_path):
    for i in range(4):
        write(tmp_path / f"f{i}.txt", f"f{i} a.\nf{i} b.\n\nf{i} c.\n")
    return TextCorpus.from_files([str(tmp_path / "f*.txt"), str(tmp_path / "f0.txt")])


def test_sharding_by_file_gives_disjoint_shards_covering_the_corpus(tmp_path):
    corpus = four_files(tmp_path)
    assert len(corpus.files) == 4  # deduplicated
    shards = [shard(corpus, 2, i) for i in range(2)]
    assert sentences_of(shards[0]) == ["f0 a.", "f0 b.", "f0 c.", "f2 a.", "f2 b.", "f2 c."]
    assert sentences_of(shards[1]) == ["f1 a.", "f1 b.", "f1 c.", "f3 a.", "f3 b.", "f3 c."]
    assert sorted(sentences_of(shards[0] + shards[1])) == sorted(
        sentences_of(corpus.iter_documents())
    )


def test_sharding_by_document_when_files_are_fewer_than_pipelines(tmp_path):
    text = "\n\n".join(f"d{i} x.\nd{i} y." for i in range(5))
    corpus = TextCorpus.from_files(write(tmp_path / "one.txt", text))
    shards = [shard(corpus, 2, i) for i in range(2)]
    assert [d[0] for d in shards[0]] == ["d0 x.", "d2 x.", "d4 x."]
    assert [d[0] for d in shards[1]] == ["d1 x.", "d3 x."]
    assert sorted(shards[0] + shards[1]) == sorted(corpus.iter_documents())


def test_in_memory_corpus_shards_by_document():
    corpus = TextCorpus.from_documents([[f"s{i}."] for i in range(5)])
    shards = [shard(corpus, 3, i) for i in range(3)]
    assert shards == [[["s0."], ["s3."]], [["s1."], ["s4."]], [["s2."]]]


def test_shuffled_files_are_deterministic_reshuffled_each_epoch_and_shards_stay_disjoint(
    tmp_path,
):
    corpus = four_files(tmp_path)

    def first_sentences(dataset):  # one per file: "f2 a." for file f2
        return [d[0] for d in tf_documents(dataset) if d[0].endswith(" a.")]

    epochs = [
        first_sentences(corpus.documents(shuffle_files=True, seed=7, epoch=epoch))
        for epoch in range(3)
    ]
    # TensorFlow's global seed plays no part in the order.
    tf.random.set_seed(99)
    again = [
        first_sentences(corpus.documents(shuffle_files=True, seed=7, epoch=epoch))
        for epoch in range(3)
    ]
    assert again == epochs
    assert len({tuple(order) for order in epochs}) > 1
    assert sorted(epochs[0]) == sorted(epochs[1]) == ["f0 a.", "f1 a.", "f2 a.", "f3 a."]
    shards = [shard(corpus, 2, i, shuffle_files=True, seed=3) for i in range(2)]
    assert not set(sentences_of(shards[0])) & set(sentences_of(shards[1]))
    assert sorted(sentences_of(shards[0] + shards[1])) == sorted(
        sentences_of(corpus.iter_documents())
    )
    with pytest.raises(ValueError, match="needs a `seed`"):
        corpus.documents(
            input_context=tf.distribute.InputContext(2, 0), shuffle_files=True, seed=None
        )
