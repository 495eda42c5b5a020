"""lmpipe's own TensorFlow kernels, compiled for this machine on first use.

A kernel is C++ source shipped in this package. `load_kernel` compiles it with the C++
compiler (`$CXX`, else `c++`, `g++` or `clang++`) against the installed TensorFlow's
headers, keeps the library in a cache directory (`$LMPIPE_KERNEL_CACHE`, else
`$XDG_CACHE_HOME/lmpipe/kernels`, else `~/.cache/lmpipe/kernels`) under a name that changes
with the sources, TensorFlow, the compiler and the CPU's instruction sets, and loads it with
`tf.load_op_library`. The first use on a machine takes a few seconds; later ones load the
cached library. Where there is no compiler, or compiling fails, it raises
`KernelUnavailableError` with the reason, and the callers use their TensorFlow-ops
equivalent.

Kernels that only make a computation faster (the masked-LM masking) are optional: their callers
use the TensorFlow-ops equivalent, with the same results, under XLA, inside `ops_only()` (graphs
that other processes run, such as the tf.data service's workers, which need not have the
kernel), and where the kernel cannot be built (with a warning saying why, once).

The loops are compiled apart from TensorFlow's headers (`*_loop.cc`, with `-march=native`:
the vector instructions of this CPU) from the op's registration (with TensorFlow's flags only:
its Eigen headers do not build with every instruction set gcc knows).
"""

import contextlib
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import threading
import warnings

import tensorflow as tf

KERNEL_DIRECTORY = os.path.dirname(os.path.abspath(__file__))
# name: (sources compiled with TensorFlow's flags, loops compiled for the CPU, headers)
KERNELS = {
    "word2vec_sgd": (("word2vec_sgd.cc",), ("word2vec_sgd_loop.cc",), ("word2vec_sgd_loop.h",)),
    "masked_lm": (("masked_lm.cc",), (), ()),
    "dropout_mask": (("dropout_mask.cc",), ("dropout_mask_loop.cc",), ("dropout_mask_loop.h",)),
}
_OPS_ONLY = threading.local()
LOOP_FLAGS = ("-O3", "-march=native", "-std=c++17", "-fPIC")
OP_FLAGS = ("-O2", "-fPIC", "-w")


class KernelUnavailableError(RuntimeError):
    """A kernel could not be compiled or loaded here; the message says why."""


def cache_directory():
    """Where compiled kernels are kept (see the module docstring)."""
    if os.environ.get("LMPIPE_KERNEL_CACHE"):
        return os.environ["LMPIPE_KERNEL_CACHE"]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "lmpipe", "kernels")


def compiler():
    """The C++ compiler's command, or None."""
    if os.environ.get("CXX"):
        return os.environ["CXX"]
    for name in ("c++", "g++", "clang++"):
        if shutil.which(name):
            return name
    return None


def cpu_flags():
    """The CPU's feature flags from /proc/cpuinfo (Linux), an empty set where unreadable."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as file:
            for line in file:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def _run(command):
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        tail = "\n".join(result.stderr.strip().splitlines()[-15:])
        raise KernelUnavailableError(f"`{' '.join(command[:2])} ...` failed:\n{tail}")
    return result.stdout


def load_kernel(name):
    """The op module of kernel `name` (compiled on first use, see the module docstring).

    Raises:
        KernelUnavailableError: no C++ compiler, or it failed (the message holds its errors).
    """
    module, reason = _load_once(name)
    if module is None:
        raise KernelUnavailableError(reason)
    return module


@contextlib.contextmanager
def ops_only():
    """Within this context (in this thread), `optional_kernel` gives None: the graphs traced
    here use TensorFlow's ops only, so that a process without lmpipe's kernels can run them."""
    _OPS_ONLY.depth = getattr(_OPS_ONLY, "depth", 0) + 1
    try:
        yield
    finally:
        _OPS_ONLY.depth -= 1


def optional_kernel(name):
    """The op module of kernel `name`, or None where the caller should use its TensorFlow-ops
    equivalent: inside `ops_only()`, or where the kernel cannot be built (a warning says why,
    once a process). Callers that XLA may compile check that themselves."""
    if getattr(_OPS_ONLY, "depth", 0):
        return None
    module, reason = _load_once(name)
    if module is None:
        _warn_once(f"{reason}\nlmpipe uses TensorFlow's ops instead (the same results, slower).")
    return module


@functools.cache
def _warn_once(message):
    warnings.warn(message, RuntimeWarning, stacklevel=3)


@functools.cache
def _load_once(name):
    """`(module, None)`, or `(None, why not)`: once a process, failures included."""
    try:
        return _build_and_load(name), None
    except (KernelUnavailableError, OSError) as error:
        return None, f"lmpipe's {name} kernel is unavailable: {error}"


def _build_and_load(name):
    op_sources, loop_sources, headers = KERNELS[name]
    cxx = compiler()
    if cxx is None:
        raise KernelUnavailableError("no C++ compiler found (set $CXX, or install g++)")
    compile_flags = tuple(tf.sysconfig.get_compile_flags())
    link_flags = tuple(tf.sysconfig.get_link_flags())
    key = hashlib.sha256()
    version = _run([cxx, "--version"]).splitlines()[0] if shutil.which(cxx) else cxx
    machine = sorted(cpu_flags()) or platform.processor() + platform.machine()
    for part in (tf.__version__, version, machine, compile_flags, link_flags, LOOP_FLAGS):
        key.update(repr(part).encode())
    for source in op_sources + loop_sources + headers:
        with open(os.path.join(KERNEL_DIRECTORY, source), "rb") as file:
            key.update(file.read())
    directory = cache_directory()
    library = os.path.join(directory, f"{name}-{key.hexdigest()[:16]}.so")
    if not os.path.exists(library):
        os.makedirs(directory, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=directory) as build:
            objects = []
            for sources, flags in ((loop_sources, LOOP_FLAGS), (op_sources, OP_FLAGS)):
                for source in sources:
                    obj = os.path.join(build, source + ".o")
                    extra = compile_flags if flags is OP_FLAGS else ()
                    path = os.path.join(KERNEL_DIRECTORY, source)
                    _run([cxx, "-c", *flags, *extra, path, "-o", obj])
                    objects.append(obj)
            built = os.path.join(build, "kernel.so")
            _run([cxx, "-shared", *objects, *link_flags, "-o", built])
            os.replace(built, library)  # atomic: a concurrent build replaces it whole
    try:
        return tf.load_op_library(library)
    except (tf.errors.NotFoundError, tf.errors.AlreadyExistsError) as error:
        raise KernelUnavailableError(f"{library} does not load: {error}") from error
