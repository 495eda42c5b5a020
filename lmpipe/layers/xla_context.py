"""Whether the function being traced is compiled by XLA.

Some of lmpipe's ops are written for TensorFlow's executor, where each op is a pass over
memory and a hand-written gradient saves passes (`LayerNormalization`, `sparse_cross_entropy`,
the GELU's derivative in `lmpipe.layers.activations`). XLA fuses TensorFlow's own ops into
fewer passes, and there the hand-written gradients are slower: a float32 BERT-mini train step
under XLA on a 2-core CPU is 7% faster with Keras' LayerNorm and TensorFlow's fused
cross-entropy than with lmpipe's. Those ops ask `compiling_with_xla` and take TensorFlow's way
under XLA.
"""

from tensorflow.python.framework import ops
from tensorflow.python.ops import control_flow_util


def compiling_with_xla():
    """True while tracing a function that XLA compiles (`tf.function(jit_compile=True)`, Keras'
    `jit_compile=True`, or a function called from one); False in eager execution and in
    functions TensorFlow's executor runs. TensorFlow answers it outside its public API."""
    return control_flow_util.GraphOrParentsInXlaContext(ops.get_default_graph())
