"""The kernel cache: a private directory, libraries loaded only as their build recorded them,
and builds that take turns (lmpipe.kernels.cache).

Every test points $LMPIPE_KERNEL_CACHE at its own temporary directory: the default cache is
shared with other test runs. Most tests stand a fake compiler and loader in for the real ones
(`fake_toolchain`); the slow test at the end compiles and loads the masked-LM kernel for real,
in fresh processes.
"""

import importlib.util
import json
import os
import pathlib
import re
import signal
import stat
import subprocess
import sys
import time
import types
import warnings

import pytest
import tensorflow as tf

from lmpipe import kernels
from lmpipe.kernels.cache import CacheEntry, LockTimeoutError

ROOT = pathlib.Path(__file__).resolve().parents[1]
OTHER_USER = 4242  # a user id that is not the test's


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty cache directory of this test (not created yet)."""
    path = tmp_path / "kernels"
    monkeypatch.setenv("LMPIPE_KERNEL_CACHE", str(path))
    kernels._load_once.cache_clear()
    kernels._usable_directory.cache_clear()
    kernels._warn_once.cache_clear()
    yield path
    kernels._load_once.cache_clear()
    kernels._usable_directory.cache_clear()
    kernels._warn_once.cache_clear()


def owned_by_another_user(path, monkeypatch):
    """Make `path` another user's: for real where the test runs as root, else by making the
    current user someone else."""
    if os.getuid() == 0:
        os.chown(path, OTHER_USER, -1)
    else:
        real_uid = os.getuid()
        monkeypatch.setattr(os, "getuid", lambda: real_uid + 1)


# The directory.


def test_the_cache_is_created_private(cache):
    assert kernels.usable_cache_directory() == str(cache)
    status = os.stat(cache)
    assert stat.S_IMODE(status.st_mode) == 0o700 and status.st_uid == os.getuid()


@pytest.mark.parametrize("problem", ["world-writable", "group-writable", "another-user"])
def test_a_cache_others_can_write_is_not_used(cache, monkeypatch, problem):
    cache.mkdir(mode=0o700)
    if problem == "another-user":
        owned_by_another_user(cache, monkeypatch)
        expected = r"is owned by user id \d+, not by the current user"
    else:
        cache.chmod(0o777 if problem == "world-writable" else 0o770)
        expected = (
            "is writable by group and others"
            if problem == "world-writable"
            else (r"is writable by group \(mode 770\)")
        )
    with pytest.warns(RuntimeWarning, match=f"does not load kernels from {cache} {expected}"):
        private = kernels.usable_cache_directory()
    assert private != str(cache) and stat.S_IMODE(os.stat(private).st_mode) == 0o700
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once a process
        assert kernels.usable_cache_directory() == private


def test_a_cache_path_that_is_a_file_is_not_used(cache):
    cache.write_text("not a directory")
    with pytest.warns(RuntimeWarning, match="is not a directory"):
        assert kernels.usable_cache_directory() != str(cache)


# The entries, checked before anything is loaded.


def published(directory, name="masked_lm", key="0123456789abcdef", content=b"\x7fELF library"):
    """A cache entry whose 'library' holds `content`, as a build leaves it."""
    entry = CacheEntry(str(directory), name, key)
    built = directory / f"build-{name}.so"
    built.write_bytes(content)
    entry.publish(str(built))
    return entry


def test_a_published_entry_is_accepted_and_private(tmp_path):
    entry = published(tmp_path)
    assert entry.problem() is None
    assert stat.S_IMODE(os.stat(entry.library).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(entry.record).st_mode) == 0o600
    record = json.loads(pathlib.Path(entry.record).read_text())
    assert record["kernel"] == "masked_lm" and record["size"] == len(b"\x7fELF library")
    assert record["key"] == "0123456789abcdef" and len(record["sha256"]) == 64
    assert (
        CacheEntry(str(tmp_path), "masked_lm", "fedcba9876543210").problem() == "is not built yet"
    )


def damage(entry, kind, monkeypatch):
    """Damage `entry` as `kind` says; the phrase `problem()` gives then."""
    library = pathlib.Path(entry.library)
    if kind == "tampered":
        content = bytearray(library.read_bytes())
        content[3] ^= 1
        library.write_bytes(bytes(content))
        return "does not have the SHA-256 its build recorded"
    if kind == "truncated":
        library.write_bytes(library.read_bytes()[:5])
        return r"is 5 bytes, not the 12 its build wrote \(truncated\?\)"
    if kind == "wrong-kernel":
        # Another kernel's library and record under this kernel's names.
        other = published(library.parent / "other", name="dropout_mask", key=entry.key)
        os.replace(other.library, entry.library)
        os.replace(other.record, entry.record)
        return "is recorded as the 'dropout_mask' kernel, not 'masked_lm'"
    if kind == "missing-record":
        os.remove(entry.record)
        return r"has no build record \(masked_lm-"
    if kind == "unreadable-record":
        pathlib.Path(entry.record).write_text("{not json")
        return "has an unreadable build record"
    if kind == "writable-library":
        library.chmod(0o722)
        return r"is writable by group and others \(mode 722\)"
    if kind == "writable-record":
        pathlib.Path(entry.record).chmod(0o666)
        return "has a build record that is writable by group and others"
    if kind == "another-users-library":
        owned_by_another_user(library, monkeypatch)
        return "is owned by user id"
    if kind == "symbolic-link":
        target = library.parent / "elsewhere.so"
        os.replace(library, target)
        library.symlink_to(target)
        return "is not a regular file"
    raise AssertionError(kind)


DAMAGES = [
    "tampered",
    "truncated",
    "wrong-kernel",
    "missing-record",
    "unreadable-record",
    "writable-library",
    "writable-record",
    "another-users-library",
    "symbolic-link",
]


@pytest.mark.parametrize("kind", DAMAGES)
def test_a_damaged_or_unsafe_entry_is_refused_saying_why(tmp_path, monkeypatch, kind):
    entry = published(tmp_path)
    (tmp_path / "other").mkdir()
    expected = damage(entry, kind, monkeypatch)
    problem = entry.problem()
    assert problem is not None
    assert re.search(expected, problem), problem


# Loading: a refused entry is rebuilt, with one warning; a wrong library is never used.


@pytest.fixture
def fake_toolchain(cache, monkeypatch):
    """A compiler that writes a fixed 'library' and a loader that gives a module with the
    kernel's op function; both count their calls."""
    calls = {"compile": 0, "link": 0, "load": []}
    monkeypatch.setenv("CXX", "lmpipe-test-fake-compiler")  # not on the PATH: no --version run

    def run(command):
        output = command[command.index("-o") + 1]
        calls["link" if "-shared" in command else "compile"] += 1
        pathlib.Path(output).write_bytes(b"\x7fELF built as " + os.path.basename(output).encode())
        return ""

    def load_op_library(path):
        calls["load"].append(path)
        return types.SimpleNamespace(**{op: lambda **_: None for op in kernels.OPS.values()})

    monkeypatch.setattr(kernels, "_run", run)
    monkeypatch.setattr(tf, "load_op_library", load_op_library)
    return calls


def test_a_kernel_is_built_once_then_loaded_from_the_cache(fake_toolchain):
    module = kernels.load_kernel("masked_lm")
    entry = kernels.cache_entry("masked_lm")
    assert module.library_path == entry.library and entry.problem() is None
    assert fake_toolchain["link"] == 1 and fake_toolchain["load"] == [entry.library]
    assert sorted(os.listdir(os.path.dirname(entry.library))) == sorted(
        os.path.basename(path) for path in (entry.library, entry.record, entry.lock)
    )  # the build's temporary directory is gone
    kernels._load_once.cache_clear()  # as a new process
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        kernels.load_kernel("masked_lm")
    assert fake_toolchain["link"] == 1 and len(fake_toolchain["load"]) == 2


@pytest.mark.parametrize("kind", ["tampered", "truncated", "wrong-kernel", "missing-record"])
def test_a_damaged_entry_is_rebuilt_with_one_warning_before_it_is_loaded(
    fake_toolchain, monkeypatch, kind
):
    kernels.load_kernel("masked_lm")
    entry = kernels.cache_entry("masked_lm")
    built = pathlib.Path(entry.library).read_bytes()
    if kind == "truncated":
        pathlib.Path(entry.library).write_bytes(built[: len(built) // 2])
    elif kind == "tampered":
        pathlib.Path(entry.library).write_bytes(built[:-1] + b"!")
    elif kind == "wrong-kernel":
        (pathlib.Path(entry.library).parent / "other").mkdir()
        damage(entry, kind, monkeypatch)
    else:
        os.remove(entry.record)
    kernels._load_once.cache_clear()
    loads = len(fake_toolchain["load"])
    with pytest.warns(RuntimeWarning, match=f"{entry.library} .*: rebuilding it") as caught:
        kernels.load_kernel("masked_lm")
    assert len(caught) == 1
    assert fake_toolchain["link"] == 2 and len(fake_toolchain["load"]) == loads + 1
    assert entry.problem() is None and pathlib.Path(entry.library).read_bytes() == built


def test_a_library_without_the_kernels_op_is_removed_and_not_used(fake_toolchain, monkeypatch):
    monkeypatch.setattr(tf, "load_op_library", lambda path: types.SimpleNamespace())
    with pytest.warns(RuntimeWarning, match=r"has no `lmpipe_masked_lm` op .*removed"):
        assert kernels.optional_kernel("masked_lm") is None
    entry = kernels.cache_entry("masked_lm")
    assert not os.path.exists(entry.library) and not os.path.exists(entry.record)


def test_a_library_that_does_not_load_is_removed_and_not_used(fake_toolchain, monkeypatch):
    def refuse(path):
        raise tf.errors.NotFoundError(None, None, f"{path}: invalid ELF header")

    monkeypatch.setattr(tf, "load_op_library", refuse)
    with pytest.raises(kernels.KernelUnavailableError, match="invalid ELF header.*removed"):
        kernels.load_kernel("masked_lm")
    assert not os.path.exists(kernels.cache_entry("masked_lm").library)


def test_which_path_runs_is_logged_once_a_process(fake_toolchain, caplog):
    kernels.note_path.cache_clear()
    with caplog.at_level("DEBUG", logger="lmpipe.kernels"):
        kernels.optional_kernel("masked_lm")
        kernels.optional_kernel("masked_lm")
        with kernels.ops_only():
            kernels.optional_kernel("masked_lm")
    lines = [record.getMessage() for record in caplog.records]
    library = kernels.cache_entry("masked_lm").library
    assert lines == [
        f"lmpipe's masked_lm kernel: the caller uses the compiled kernel (loaded from {library})",
        "lmpipe's masked_lm kernel: the caller uses TensorFlow's ops (inside "
        "lmpipe.kernels.ops_only())",
    ]


# `lmpipe kernels status`.


def test_kernels_status_says_what_is_cached_loaded_and_used(fake_toolchain, capsys):
    from lmpipe.cli.main import main

    assert main(["kernels", "status"]) == 0
    first = capsys.readouterr().out.splitlines()
    entry = kernels.cache_entry("masked_lm")
    masker = first.index(f"masked_lm: {entry.library}")
    assert first[0] == f"cache: {kernels.cache_directory()} (private; $LMPIPE_KERNEL_CACHE sets it)"
    assert first[masker + 1 : masker + 4] == [
        "  cached: no (is not built yet)",
        "  loaded: yes (built now)",
        "  MaskedLMMasker: the compiled op; TensorFlow's ops under XLA and inside ops_only() "
        "(tf.data service)",
    ]
    size = os.path.getsize(entry.library)
    pathlib.Path(entry.library).write_bytes(b"\x7fELF cut")
    kernels._load_once.cache_clear()  # as a new process
    with pytest.warns(RuntimeWarning, match="rebuilding it"):
        main(["kernels", "status"])
    lines = capsys.readouterr().out.splitlines()
    refused = f"  cached: refused (it is 8 bytes, not the {size} its build wrote (truncated?))"
    assert lines[masker + 1 : masker + 3] == [refused, "  loaded: yes (built now)"]
    kernels._load_once.cache_clear()
    main(["kernels", "status"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[masker + 1 : masker + 3] == [
        "  cached: yes (size and SHA-256 as its build recorded)",
        "  loaded: yes",
    ]


def test_kernels_status_without_a_compiler(cache, monkeypatch, capsys):
    from lmpipe.cli.main import main

    monkeypatch.setattr(kernels, "compiler", lambda: None)
    main(["kernels", "status"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == "compiler: none (set $CXX, or install g++)"
    masker = lines.index("masked_lm: no cache entry")
    assert lines[masker + 1 : masker + 4] == [
        "  cached: no (no C++ compiler found (set $CXX, or install g++))",
        "  loaded: no (lmpipe's masked_lm kernel is unavailable: no C++ compiler found (set "
        "$CXX, or install g++))",
        "  MaskedLMMasker: TensorFlow's ops (the same masks, slower)",
    ]
    word2vec = lines.index("word2vec_sgd: no cache entry")
    assert lines[word2vec + 3] == (
        "  Word2Vec's update: update='auto' trains with 'batched'; update='sequential' is an error"
    )


def test_kernels_status_says_when_cxx_names_no_program(cache, monkeypatch, capsys):
    from lmpipe.cli.main import main

    monkeypatch.setenv("CXX", "lmpipe-test-no-such-compiler")
    main(["kernels", "status"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == "compiler: lmpipe-test-no-such-compiler (not found: fix $CXX)"
    assert "  MaskedLMMasker: TensorFlow's ops (the same masks, slower)" in lines


@pytest.mark.parametrize("problem", ["another-user", "world-writable"])
def test_kernels_status_says_in_one_line_why_the_cache_is_not_used(
    fake_toolchain, monkeypatch, capsys, problem
):
    from lmpipe.cli.main import main

    cache = pathlib.Path(kernels.cache_directory())
    cache.mkdir(mode=0o700)
    if problem == "another-user":
        owned_by_another_user(cache, monkeypatch)
        why = r"is owned by user id \d+, not by the current user \(\d+\)"
    else:
        cache.chmod(0o777)
        why = r"is writable by group and others \(mode 777\)"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the line says it, no warning besides
        assert main(["kernels", "status"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert re.fullmatch(
        rf"cache: {re.escape(str(cache))} refused: it {why}; this process builds in "
        r"\S+lmpipe-kernels-\S+ \(give it mode 700 and your ownership, or point "
        r"\$LMPIPE_KERNEL_CACHE at a directory only you can write\)",
        lines[0],
    ), lines[0]
    assert not any(path.startswith(str(cache)) for path in fake_toolchain["load"])
    assert "  loaded: yes (built now)" in lines  # in the private directory instead


# `lmpipe kernels build`.


def test_kernels_build_builds_each_kernel_then_finds_it_cached(fake_toolchain, capsys):
    from lmpipe.cli.main import main

    assert main(["kernels", "build"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        f"{name}: built ({kernels.cache_entry(name).library})" for name in kernels.KERNELS
    ]
    assert fake_toolchain["link"] == len(kernels.KERNELS)
    kernels._load_once.cache_clear()  # as a new process
    assert main(["kernels", "build"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        f"{name}: cached ({kernels.cache_entry(name).library})" for name in kernels.KERNELS
    ]
    assert fake_toolchain["link"] == len(kernels.KERNELS)


def test_kernels_build_without_a_compiler_fails_saying_why(cache, monkeypatch, capsys):
    from lmpipe.cli.main import main

    monkeypatch.setattr(kernels, "compiler", lambda: None)
    assert main(["kernels", "build"]) == 1
    assert capsys.readouterr().out.splitlines() == [
        f"{name}: failed: no C++ compiler found (set $CXX, or install g++)"
        for name in kernels.KERNELS
    ]


def test_kernels_build_shows_the_compilers_errors_under_the_kernel(
    fake_toolchain, monkeypatch, capsys
):
    from lmpipe.cli.main import main

    compile_as_the_fake_does = kernels._run

    def fail(command):
        if "masked_lm.cc" in " ".join(command):
            raise kernels.KernelUnavailableError("`c++ -c ...` failed:\nmasked_lm.cc:1: error: x")
        return compile_as_the_fake_does(command)

    monkeypatch.setattr(kernels, "_run", fail)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        assert main(["kernels", "build"]) == 1
    lines = capsys.readouterr().out.splitlines()
    failed = lines.index("masked_lm: failed: `c++ -c ...` failed:")
    assert lines[failed + 1] == "    masked_lm.cc:1: error: x"
    assert [line.split(" (")[0] for line in lines if not line.startswith(" ")] == [
        "word2vec_sgd: built",
        "masked_lm: failed: `c++ -c ...` failed:",
        "dropout_mask: built",
    ]


def test_kernels_build_builds_nothing_in_a_refused_cache(fake_toolchain, capsys):
    from lmpipe.cli.main import main

    cache = pathlib.Path(kernels.cache_directory())
    cache.mkdir(mode=0o700)
    cache.chmod(0o777)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the line says it, no warning besides
        assert main(["kernels", "build"]) == 1
    assert capsys.readouterr().out.splitlines() == [
        f"cache: {cache} is writable by group and others (mode 777): nothing built (give it "
        "mode 700 and your ownership, or point $LMPIPE_KERNEL_CACHE at a directory only you "
        "can write)"
    ]
    assert fake_toolchain["link"] == 0


# The build lock.


def load_cache_module():
    """lmpipe.kernels.cache on its own (it imports nothing of lmpipe, nor TensorFlow)."""
    spec = importlib.util.spec_from_file_location("cache", ROOT / "lmpipe/kernels/cache.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


HOLD_THE_LOCK = """
import importlib.util, sys, time
spec = importlib.util.spec_from_file_location("cache", sys.argv[1])
cache = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cache)
with cache.CacheEntry(sys.argv[2], "masked_lm", "0123456789abcdef").build_lock():
    print("held", flush=True)
    time.sleep(600)
"""


def test_a_build_lock_waits_names_its_holder_and_is_freed_when_the_holder_dies(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_THE_LOCK, str(ROOT / "lmpipe/kernels/cache.py"), tmp_path],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline() == "held\n"
        entry = load_cache_module().CacheEntry(str(tmp_path), "masked_lm", "0123456789abcdef")
        start = time.monotonic()
        message = rf"waited 0.5 s for .*, held by pid {holder.pid} "
        with pytest.raises(TimeoutError, match=message), entry.build_lock(timeout=0.5):
            pass
        assert 0.5 <= time.monotonic() - start < 5
    finally:
        os.kill(holder.pid, signal.SIGKILL)  # dies holding it: the lock file stays behind
        holder.wait()
    assert os.path.exists(entry.lock)
    start = time.monotonic()
    with entry.build_lock(timeout=5):
        assert time.monotonic() - start < 1  # the dead holder's lock is not held
        assert f"pid {os.getpid()} " in pathlib.Path(entry.lock).read_text()


def test_a_build_that_cannot_get_the_lock_falls_back_saying_who_holds_it(
    fake_toolchain, monkeypatch
):
    def held(self, timeout=None):
        raise LockTimeoutError(f"waited 300 s for {self.lock}, held by pid 1 on a host")

    monkeypatch.setattr(CacheEntry, "build_lock", held)
    with pytest.warns(RuntimeWarning, match="unavailable: waited 300 s for .*, held by pid 1"):
        assert kernels.optional_kernel("masked_lm") is None


# For real: three processes build the same kernel into an empty cache at once.

BUILD_AND_MASK = """
import sys

import numpy as np
from lmpipe import kernels
from lmpipe.datasets import MaskedLMMasker

build = kernels._build
kernels._build = lambda *arguments: print("building", file=sys.stderr) or build(*arguments)
module = kernels.load_kernel("masked_lm")
rows = np.arange(4, 40, dtype=np.int32).reshape(3, 12)
out = MaskedLMMasker(100, 3, [0, 1, 2, 3])(rows, [1, 2])
print(module.library_path)
print({key: value.numpy().tolist() for key, value in out.items()})
"""


@pytest.mark.slow
@pytest.mark.skipif(kernels.compiler() is None, reason="no C++ compiler to build the kernels")
def test_processes_building_at_once_all_load_and_a_truncated_library_is_rebuilt(tmp_path):
    environment = dict(os.environ, LMPIPE_KERNEL_CACHE=str(tmp_path / "kernels"))
    environment["PYTHONPATH"] = os.pathsep.join([str(ROOT), environment.get("PYTHONPATH", "")])

    def start():
        return subprocess.Popen(
            [sys.executable, "-c", BUILD_AND_MASK],
            env=environment,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def finish(process):
        try:
            stdout, stderr = process.communicate(timeout=540)
        except subprocess.TimeoutExpired:
            process.kill()
            raise
        assert process.returncode == 0, stderr[-3000:]
        return stdout, stderr

    processes = [start() for _ in range(3)]
    results = [finish(process) for process in processes]
    outputs = {stdout for stdout, _ in results}
    assert len(outputs) == 1, outputs  # the same library, the same masks
    library, masks = outputs.pop().splitlines()
    files = sorted(os.listdir(tmp_path / "kernels"))
    stem = os.path.basename(library)[: -len(".so")]
    assert files == [f"{stem}.json", f"{stem}.lock", f"{stem}.so"]  # one build, nothing left
    assert [stderr.count("building\n") for _, stderr in results].count(1) == 1  # one built
    assert not any("rebuilding" in stderr for _, stderr in results)

    # A library cut short (a full disk, a crash) is never mapped (that is a SIGBUS): rebuilt.
    content = pathlib.Path(library).read_bytes()
    pathlib.Path(library).write_bytes(content[: len(content) // 3])
    stdout, stderr = finish(start())
    assert f"{library} is {len(content) // 3} bytes, not the {len(content)}" in stderr
    assert "rebuilding it" in stderr
    assert pathlib.Path(library).stat().st_size == len(content)
    assert stdout.splitlines() == [library, masks]
