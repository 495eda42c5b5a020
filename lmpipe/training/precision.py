"""The numbers a run computes in: the Keras dtype policy, what `mixed_precision="auto"` and
`jit_compile="auto"` pick on this machine, and why."""

import contextlib

import keras
import tensorflow as tf

from lmpipe.backend import op_determinism_enabled
from lmpipe.kernels import cpu_flags as _cpu_flags

MIXED_PRECISION = (None, "float32", "mixed_bfloat16", "mixed_float16", "auto")
JIT_COMPILE = (False, True, "auto")
# CPU features with bfloat16 arithmetic in hardware (/proc/cpuinfo's names), where oneDNN runs
# bfloat16 matmuls at about twice the float32 rate; elsewhere bfloat16 is emulated, slower.
BFLOAT16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")


def automatic_precision():
    """`(policy, reason)`: the precision `mixed_precision="auto"` trains in on this machine.

    "mixed_bfloat16" where bfloat16 runs in hardware: every GPU TensorFlow sees of compute
    capability 8.0 or more (Ampere and later), or, without GPUs, a CPU with AVX512_BF16 or AMX;
    "float32" elsewhere (older GPUs want float16 with loss scaling, which changes the numbers
    more: asked for by name, not picked).
    """
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        capabilities = [
            tf.config.experimental.get_device_details(gpu).get("compute_capability", (0, 0))
            for gpu in gpus
        ]
        if min(capabilities) >= (8, 0):
            return "mixed_bfloat16", f"GPUs of compute capability {min(capabilities)}"
        return "float32", f"a GPU of compute capability {min(capabilities)} (below 8.0)"
    flags = sorted(set(BFLOAT16_CPU_FLAGS) & _cpu_flags())
    if flags:
        return "mixed_bfloat16", f"a CPU with {' and '.join(flags)}"
    return "float32", "a CPU without bfloat16 arithmetic (avx512_bf16, amx_bf16)"


def automatic_jit_compile():
    """`(jit_compile, reason)`: whether `jit_compile="auto"` XLA-compiles the train step here.

    Yes where there are GPUs (unless op determinism is on: XLA does not make every op
    deterministic); no on CPUs, where the XLA step is slower than TensorFlow's kernels
    (`benchmarks/training.py`: about 0.8x in float32 and 0.6x in bfloat16 of the step without
    XLA on a 2-core AVX-512 CPU; XLA's CPU matmul does not use AMX).
    """
    if not tf.config.list_physical_devices("GPU"):
        return False, "CPUs, where XLA's train step is slower than without it"
    if _op_determinism_enabled():
        return False, "GPUs with op determinism on, which XLA does not give every op"
    return True, "GPUs"


def _op_determinism_enabled():
    """Whether `tf.config.experimental.enable_op_determinism()` was called (see
    `lmpipe.backend.op_determinism_enabled`)."""
    return op_determinism_enabled()


@contextlib.contextmanager
def dtype_policy(name):
    """Build models under the Keras dtype policy `name` (None: leave the policy as it is;
    "auto": `automatic_precision`'s)."""
    if name not in MIXED_PRECISION:
        raise ValueError(f"`mixed_precision` must be one of {MIXED_PRECISION}, got {name!r}.")
    if name == "auto":
        name, _ = automatic_precision()
    if name is None:
        yield
        return
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(name)
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)
