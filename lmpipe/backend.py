"""The one home of lmpipe's calls into TensorFlow's and Keras' private modules.

Each private symbol is wrapped here in a named function whose docstring says what it wraps and
why no public API serves, so that a TensorFlow or Keras release that moves one breaks this
file alone, and the rest of lmpipe imports only public APIs and these functions. It imports
nothing of lmpipe: every floor may use it.
"""

from tensorflow.python.framework import ops
from tensorflow.python.ops import control_flow_util


def compiling_with_xla():
    """True while tracing a function that XLA compiles (`tf.function(jit_compile=True)`, Keras'
    `jit_compile=True`, or a function called from one); False in eager execution and in
    functions TensorFlow's executor runs.

    Wraps `control_flow_util.GraphOrParentsInXlaContext(ops.get_default_graph())`: TensorFlow
    answers the question only outside its public API.

    Why lmpipe asks: some of its ops are written for TensorFlow's executor, where each op is a
    pass over memory and a hand-written gradient saves passes (`LayerNormalization`,
    `sparse_cross_entropy`, the GELU's derivative in `lmpipe.layers.activations`, the dropout
    mask and masked LM's compiled kernels). XLA fuses TensorFlow's own ops into fewer passes,
    and there the hand-written gradients are slower (a float32 BERT-mini train step under XLA
    on a 2-core CPU is 7% faster with Keras' LayerNorm and TensorFlow's fused cross-entropy
    than with lmpipe's), and XLA cannot run the compiled kernels: those ops take TensorFlow's
    way under XLA.
    """
    return control_flow_util.GraphOrParentsInXlaContext(ops.get_default_graph())
