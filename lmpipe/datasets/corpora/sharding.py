"""Sharding records among input pipelines: by file where there are enough files, else by
record; what every reader of lmpipe uses under a distribution strategy."""

import tensorflow as tf

from lmpipe.datasets.corpora.shuffling import shuffled


def read_sharded(files, read_file, input_context, shuffle_files=False, seed=None, epoch=0):
    """The records of `files` (`read_file(path) -> tf.data.Dataset`) for one input pipeline.

    By file when there are at least as many files as pipelines (pipeline `i` reads files
    `i, i + n, ...` of the file order), else by record; `shuffle_files` permutes the file
    order by a stateless permutation keyed by `seed` (None: 0) and `epoch`.
    """
    num_pipelines, pipeline_id = pipeline_position(input_context)
    if shuffle_files and seed is None and num_pipelines > 1:
        raise ValueError(
            "`shuffle_files=True` with several input pipelines needs a `seed`, so that "
            "every pipeline shuffles the files alike and the shards stay disjoint."
        )
    paths = tf.constant(list(files), tf.string)
    if shuffle_files:
        paths = shuffled(paths, 0 if seed is None else seed, epoch)
    paths = tf.data.Dataset.from_tensor_slices(paths)
    by_file = len(files) >= num_pipelines
    if num_pipelines > 1 and by_file:
        paths = paths.shard(num_pipelines, pipeline_id)
    records = paths.flat_map(read_file)
    if num_pipelines > 1 and not by_file:
        records = records.shard(num_pipelines, pipeline_id)
    return records


def pipeline_position(input_context):
    """(number of input pipelines, this pipeline's index) from an `InputContext` or None."""
    if input_context is None:
        return 1, 0
    num_pipelines = getattr(input_context, "num_input_pipelines", None)
    pipeline_id = getattr(input_context, "input_pipeline_id", None)
    if (
        not isinstance(num_pipelines, int)
        or not isinstance(pipeline_id, int)
        or num_pipelines < 1
        or not 0 <= pipeline_id < num_pipelines
    ):
        raise ValueError(
            "`input_context` must be a tf.distribute.InputContext with 0 <= input_pipeline_id "
            f"< num_input_pipelines, got {input_context!r} (num_input_pipelines="
            f"{num_pipelines!r}, input_pipeline_id={pipeline_id!r})."
        )
    return num_pipelines, pipeline_id
