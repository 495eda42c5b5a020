"""lmpipe's own TensorFlow kernels, compiled on a machine once, on first use or on request.

A kernel is C++ source shipped in this package: installing lmpipe compiles nothing and needs
no compiler (`pip install` copies the sources). `load_kernel` compiles a kernel the first time
a process needs it, or `lmpipe kernels build` (`lmpipe.kernels.build`) compiles them all
ahead, with the C++ compiler (`$CXX`, else `c++`, `g++` or `clang++`) against the installed
TensorFlow's headers; the library is kept in a cache directory (`$LMPIPE_KERNEL_CACHE`, else
`$XDG_CACHE_HOME/lmpipe/kernels`, else `~/.cache/lmpipe/kernels`) under a name that changes
with the sources, TensorFlow's version and flags, the compiler and the architecture, and
loaded with `tf.load_op_library`. The first build takes a few seconds a kernel; later uses
load the cached library. Where there is no compiler, or compiling fails, it raises
`KernelUnavailableError` with the reason, and the callers use their TensorFlow-ops
equivalent.

One build serves every CPU of its architecture: nothing is compiled for the building CPU
(no `-march=native`). The loops (`*_loop.cc`) are compiled for the architecture's baseline
with AVX2 and AVX-512 variants of their hot functions beside it on x86-64 (the compilers'
`target` attribute; `instruction_set.h`), and the op picks the widest variant the CPU runs
when it runs; elsewhere (aarch64) only the baseline is built. Every variant gives the same
bits. So a library can be built once and copied to other machines (a prebuilt cache).

The cache is guarded as `lmpipe.kernels.cache` describes: it is created private (0700); a
cache directory that another user owns or that group or others may write is not used (a
one-line warning) and this process builds its kernels in a private temporary directory
instead; a cached library is loaded only when its build record vouches for it (this kernel,
its size and SHA-256), else it is rebuilt, with a one-line warning saying what was wrong; and
builds of the same kernel by several processes at once take turns under a lock file.

Kernels that only make a computation faster (the masked-LM masking, the dropout mask) are
optional: their callers use the TensorFlow-ops equivalent, with the same results, under XLA,
inside `ops_only()` (graphs that other processes run, such as the tf.data service's workers,
which need not have the kernel), and where the kernel cannot be built (with a warning saying
why, once). Which way each caller goes, and why, is logged once a process at the DEBUG level
(logger `lmpipe.kernels`); `lmpipe kernels status` shows it for this machine.

The kernels include only TensorFlow's framework headers, those its pip package ships for
custom ops (`tensorflow/core/framework/`: op.h, op_kernel.h, shape_inference.h; tensor_util.h
for a shape input; resource_mgr.h and resource_var.h for word2vec's update of resource
variables in place, which no other header offers). Their Philox generator is lmpipe's own
(`philox.h`, with the published constants of Salmon et al. 2011), so that no TensorFlow kernel
or random-library internals are compiled in. The loops are compiled apart from TensorFlow's
headers (its Eigen headers do not build with every instruction set gcc knows), the ops with
TensorFlow's flags.
"""

import atexit
import contextlib
import functools
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
import threading
import warnings

import tensorflow as tf

from lmpipe.kernels.cache import (
    CACHE_FORMAT,
    CacheEntry,
    LockTimeoutError,
    UnsafeCacheError,
    private_directory,
)

KERNEL_DIRECTORY = os.path.dirname(os.path.abspath(__file__))
# name: (sources compiled with TensorFlow's flags, loops compiled apart, headers)
KERNELS = {
    "word2vec_sgd": (
        ("word2vec_sgd.cc",),
        ("word2vec_sgd_loop.cc",),
        ("word2vec_sgd_loop.h", "instruction_set.h", "instruction_set_op.h"),
    ),
    "masked_lm": (("masked_lm.cc",), (), ("philox.h",)),
    "dropout_mask": (
        ("dropout_mask.cc",),
        ("dropout_mask_loop.cc",),
        ("dropout_mask_loop.h", "instruction_set.h", "instruction_set_op.h", "philox.h"),
    ),
}
# The Python function of each kernel's op in the module `tf.load_op_library` gives.
OPS = {
    "word2vec_sgd": "lmpipe_word2vec_sgd",
    "masked_lm": "lmpipe_masked_lm",
    "dropout_mask": "lmpipe_dropout_mask",
}
_OPS_ONLY = threading.local()
# No -march: the loops carry their own AVX2 and AVX-512 variants (instruction_set.h), and
# contracting a multiply and an add into one rounding would make those variants differ.
LOOP_FLAGS = ("-O3", "-std=c++17", "-fPIC", "-ffp-contract=off")
OP_FLAGS = ("-O2", "-fPIC", "-w")
logger = logging.getLogger(__name__)


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
    once a process). Callers that XLA may compile check that themselves (and say so with
    `note_path`)."""
    if getattr(_OPS_ONLY, "depth", 0):
        note_path(name, "TensorFlow's ops", "inside lmpipe.kernels.ops_only()")
        return None
    module, reason = _load_once(name)
    if module is None:
        _warn_once(f"{reason}\nlmpipe uses TensorFlow's ops instead (the same results, slower).")
        note_path(name, "TensorFlow's ops", reason)
    else:
        note_path(name, "the compiled kernel", f"loaded from {module.library_path}")
    return module


@functools.cache
def note_path(name, path, why):
    """Log at the DEBUG level, once a process for each kernel, way and reason, which way the
    callers of kernel `name` compute: `path` (the compiled kernel or TensorFlow's ops) and
    `why`."""
    logger.debug("lmpipe's %s kernel: the caller uses %s (%s)", name, path, why)


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


def cache_entry(name):
    """The `lmpipe.kernels.cache.CacheEntry` of kernel `name` for this machine's compiler,
    TensorFlow and architecture (not its CPU: one build serves every CPU of it), in the cache
    directory this process uses (creating it).

    Raises:
        KernelUnavailableError: no C++ compiler, or it does not say its version.
    """
    op_sources, loop_sources, headers = KERNELS[name]
    cxx = compiler()
    if cxx is None:
        raise KernelUnavailableError("no C++ compiler found (set $CXX, or install g++)")
    key = hashlib.sha256()
    version = _run([cxx, "--version"]).splitlines()[0] if shutil.which(cxx) else cxx
    machine = platform.machine()
    compile_flags, link_flags = tf.sysconfig.get_compile_flags(), tf.sysconfig.get_link_flags()
    for part in (tf.__version__, version, machine, tuple(compile_flags), tuple(link_flags)):
        key.update(repr(part).encode())
    key.update(repr((LOOP_FLAGS, "cache format", CACHE_FORMAT)).encode())
    for source in op_sources + loop_sources + headers:
        with open(os.path.join(KERNEL_DIRECTORY, source), "rb") as file:
            key.update(file.read())
    return CacheEntry(usable_cache_directory(), name, key.hexdigest()[:16])


def usable_cache_directory():
    """`cache_directory()`, created private; where it is not private (see
    `lmpipe.kernels.cache`), a private temporary directory of this process instead."""
    return _usable_directory(cache_directory())


@functools.cache
def _usable_directory(configured):
    try:
        return private_directory(configured)
    except UnsafeCacheError as error:
        private = tempfile.mkdtemp(prefix="lmpipe-kernels-")
        atexit.register(shutil.rmtree, private, ignore_errors=True)
        warnings.warn(
            f"lmpipe does not load kernels from {error}: they are built in {private} for this "
            "process (give the cache mode 700 and your ownership, or point "
            "$LMPIPE_KERNEL_CACHE at a directory only you can write)",
            RuntimeWarning,
            stacklevel=2,
        )
        return private


def _build_and_load(name):
    entry = cache_entry(name)
    if entry.problem() is not None:
        try:
            with entry.build_lock():
                # Another process may have built it while this one waited for the lock.
                problem = entry.problem()
                if problem is not None:
                    _build(entry, problem)
        except LockTimeoutError as error:
            raise KernelUnavailableError(str(error)) from None
    return _load(entry)


def _build(entry, problem):
    """Compile `entry`'s kernel into its place in the cache (under its build lock)."""
    if problem != entry.MISSING:
        warnings.warn(f"{entry.library} {problem}: rebuilding it", RuntimeWarning, stacklevel=2)
    entry.discard()
    op_sources, loop_sources, _ = KERNELS[entry.name]
    cxx = compiler()
    compile_flags, link_flags = tf.sysconfig.get_compile_flags(), tf.sysconfig.get_link_flags()
    with tempfile.TemporaryDirectory(dir=os.path.dirname(entry.library)) as build:
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
        entry.publish(built)


def _load(entry):
    """The op module of the verified library of `entry`; an entry that does not load, or
    lacks the kernel's op, is removed (the next process rebuilds it) and unavailable here."""
    op = OPS[entry.name]
    try:
        module = tf.load_op_library(entry.library)
    except tf.errors.OpError as error:
        entry.discard()
        message = str(error).strip().splitlines()[0] if str(error).strip() else type(error)
        raise KernelUnavailableError(
            f"{entry.library} does not load ({message}); removed, the next process rebuilds it"
        ) from None
    if not hasattr(module, op):
        # TensorFlow keeps a loaded library by its path: a rebuild there would not load anew.
        entry.discard()
        raise KernelUnavailableError(
            f"{entry.library} has no `{op}` op (another kernel's library?); removed, the next "
            "process rebuilds it"
        )
    module.library_path = entry.library
    return module
