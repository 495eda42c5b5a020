"""Which TF Serving releases can run an export: the ops of a SavedModel against the ops each
release's model server links.

A model server links one TensorFlow and one tensorflow-text, often older than the TensorFlow
that wrote the export (TF Serving 2.18 and 2.19 link TensorFlow 2.18/2.19 and tensorflow-text
2.12.1; 2.20 links 2.20 and 2.20.0), and refuses a SavedModel that uses an op they do not
register ("Op type not registered"). `tf_serving_ops.json` lists, per supported release, the
ops of its TensorFlow (`tf.raw_ops`) and of its tensorflow-text, read from their PyPI wheels by
tests/serving/fixtures/make_tf_serving_ops.py. `check_serving_ops` runs on every export before
it is published.

Ops are checked by name; an op whose attributes changed since a release (a new attribute set
to a non-default value) is not caught here. TensorFlow's ops are those `tf.raw_ops` lists: XLA's
own ops (tf2xla's `Xla*`, e.g. `XlaDynamicUpdateSlice`, which Keras' `slice_update` becomes)
are not among them. A model server links XLA's CPU JIT, but whether such an op runs depends on
how the server compiles the graph; the check refuses them, which is the safe side.
"""

import functools
import importlib.resources
import json
import os

SUPPORTED_RELEASES = ("2.18", "2.19", "2.20")
"""The TF Serving releases every lmpipe export is checked against; 2.18 is the oldest."""


@functools.cache
def serving_releases():
    """`{release: {"tensorflow", "tensorflow_text", "ops"}}` of the supported releases."""
    data = importlib.resources.files("lmpipe.serving").joinpath("tf_serving_ops.json")
    servers = json.loads(data.read_text(encoding="utf-8"))["servers"]
    return {
        release: {
            "tensorflow": server["tensorflow"],
            "tensorflow_text": server["tensorflow_text"],
            "ops": frozenset(server["core_ops"]) | frozenset(server["text_ops"]),
        }
        for release, server in servers.items()
        if release in SUPPORTED_RELEASES
    }


def saved_model_ops(export_dir):
    """The op names of a SavedModel: every node of its graphs and of their function libraries."""
    from tensorflow.core.protobuf import saved_model_pb2

    saved_model = saved_model_pb2.SavedModel()
    with open(os.path.join(export_dir, "saved_model.pb"), "rb") as file:
        saved_model.ParseFromString(file.read())
    ops = set()
    for meta_graph in saved_model.meta_graphs:
        ops.update(node.op for node in meta_graph.graph_def.node)
        for function in meta_graph.graph_def.library.function:
            ops.update(node.op for node in function.node_def)
        # Calls of library functions name the function as the op: those are not ops.
        ops.difference_update(f.signature.name for f in meta_graph.graph_def.library.function)
    return ops


def missing_serving_ops(export_dir, releases=SUPPORTED_RELEASES):
    """`{release: sorted op names}` of the ops of the export that a release lacks (releases
    that run it left out)."""
    known = serving_releases()
    ops = saved_model_ops(export_dir)
    missing = {}
    for release in releases:
        lacking = sorted(ops - known[release]["ops"])
        if lacking:
            missing[release] = lacking
    return missing


def check_serving_ops(export_dir, releases=SUPPORTED_RELEASES):
    """Raise a ValueError naming the ops and the TF Serving releases that lack them, unless
    every release in `releases` can run the SavedModel in `export_dir`."""
    missing = missing_serving_ops(export_dir, releases)
    if not missing:
        return
    known = serving_releases()
    lines = [
        f"TF Serving {release} (TensorFlow {known[release]['tensorflow']}, tensorflow-text "
        f"{known[release]['tensorflow_text']}) lacks {', '.join(ops)}"
        for release, ops in missing.items()
    ]
    raise ValueError(
        "The export uses ops that a supported TF Serving release cannot run: "
        + "; ".join(lines)
        + ". Build the export from ops those releases have (see README.md, Serving)."
    )
