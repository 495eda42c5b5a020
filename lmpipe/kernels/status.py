"""`lmpipe kernels status`: for each kernel, its cache entry, whether it loads here, and which
way each of its callers computes on this machine."""

import shutil
import warnings

import tensorflow as tf

from lmpipe import kernels
from lmpipe.kernels.cache import directory_problem

# What each kernel's callers do with it, and without it.
_CALLERS = {
    "masked_lm": (
        "MaskedLMMasker",
        "the compiled op; TensorFlow's ops under XLA and inside ops_only() (tf.data service)",
        "TensorFlow's ops (the same masks, slower)",
    ),
    "dropout_mask": (
        "Dropout's mask",
        "the compiled op outside XLA; TensorFlow's ops under XLA",
        "TensorFlow's ops (the same masks, slower)",
    ),
    "word2vec_sgd": (
        "Word2Vec's update",
        "update='sequential' (the default on one device) runs on it",
        "update='auto' trains with 'batched'; update='sequential' is an error",
    ),
}


# The op of each kernel with vector variants that says which one runs on this CPU.
_INSTRUCTION_SET_OPS = {
    "dropout_mask": "lmpipe_dropout_mask_instruction_set",
    "word2vec_sgd": "lmpipe_word2vec_sgd_instruction_set",
}


def kernel_status(name):
    """The lines `lmpipe kernels status` prints about kernel `name`; it loads the kernel,
    building it first where its cache entry is missing or refused."""
    try:
        entry = kernels.cache_entry(name)
    except kernels.KernelUnavailableError as error:
        entry, problem = None, str(error)
    else:
        problem = entry.problem()
    lines = [f"{name}: {entry.library if entry else 'no cache entry'}"]
    if entry is None or problem == entry.MISSING:
        lines.append(f"  cached: no ({problem})")
    elif problem is None:
        lines.append("  cached: yes (size and SHA-256 as its build recorded)")
    else:
        lines.append(f"  cached: refused (it {problem})")
    module, reason = kernels._load_once(name)  # loaded once a process, as the callers do
    loaded = module is not None
    if loaded:
        lines.append("  loaded: yes" + (" (built now)" if problem is not None else ""))
    else:
        lines.append(f"  loaded: no ({reason})")
    caller, with_kernel, without = _CALLERS[name]
    if name == "dropout_mask" and tf.config.list_physical_devices("GPU"):
        with_kernel = without = "TensorFlow's ops (the op runs on CPUs; this machine has GPUs)"
    lines.append(f"  {caller}: {with_kernel if loaded else without}")
    chosen = getattr(module, _INSTRUCTION_SET_OPS.get(name, ""), None)
    if chosen is not None:
        lines.append(
            f"  instructions: {chosen().numpy().decode()} (the widest of the library's "
            "baseline, avx2 and avx512 code this CPU runs)"
        )
    return lines


def print_status():
    """Print the cache directory and `kernel_status` of every kernel; return 0."""
    configured = kernels.cache_directory()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the cache's line says it
        directory = kernels.usable_cache_directory()
    if directory == configured:
        print(f"cache: {configured} (private; $LMPIPE_KERNEL_CACHE sets it)")
    else:
        print(
            f"cache: {configured} refused: it {directory_problem(configured)}; this process "
            f"builds in {directory} (give it mode 700 and your ownership, or point "
            "$LMPIPE_KERNEL_CACHE at a directory only you can write)"
        )
    cxx = kernels.compiler()
    if cxx is None:
        print("compiler: none (set $CXX, or install g++)")
    else:
        print(f"compiler: {cxx}" + ("" if shutil.which(cxx) else " (not found: fix $CXX)"))
    for name in kernels.KERNELS:
        print("\n".join(kernel_status(name)))
    return 0
