"""lmpipe.backend: the wrapped calls into TensorFlow's private modules."""

import tensorflow as tf

from lmpipe.backend import compiling_with_xla
from tests import module_imports


def test_compiling_with_xla_is_true_only_while_tracing_for_xla():
    seen = {}

    def probe(name):
        seen[name] = compiling_with_xla()
        return tf.constant(0)

    probe("eager")
    tf.function(lambda: probe("graph"), autograph=False)()
    tf.function(lambda: probe("xla"), jit_compile=True, autograph=False)()
    inner = tf.function(lambda: probe("called from xla"), autograph=False)
    tf.function(lambda: inner(), jit_compile=True, autograph=False)()
    assert seen == {"eager": False, "graph": False, "xla": True, "called from xla": True}


def test_backend_imports_nothing_of_lmpipe():
    """Every floor of lmpipe may call the backend, so it stands below them all."""
    assert module_imports.imported("lmpipe.backend") == set()


def test_the_datasets_layers_and_models_reach_xla_through_the_backend():
    for module in ("lmpipe.datasets.examples.masking", "lmpipe.layers.dropout"):
        assert "lmpipe.backend" in module_imports.imported(module)
