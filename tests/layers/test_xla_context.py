import tensorflow as tf

from lmpipe.layers.xla_context import compiling_with_xla


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
