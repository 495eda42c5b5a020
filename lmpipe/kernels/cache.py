"""The cache of compiled kernels: a private directory, verified libraries, one build at a time.

A cached kernel is a shared library that `tf.load_op_library` maps into the process and runs:
whoever can write it runs code in every process that loads it, and a library cut short by a
crash or a full disk kills the process that maps it (SIGBUS). So:

- The cache directory is created with mode 0700. An existing one must be a directory owned
  by the current user and not writable by group or others (`directory_problem`); the caller
  uses another, private directory otherwise.
- Each library `<name>-<key>.so` has a build record `<name>-<key>.json` (kernel name, key,
  size and SHA-256 of the library), written by rename after the library is in place.
  `CacheEntry.problem` accepts a library only where both are regular files owned by the user
  and not writable by group or others, the record names this kernel and key, and the
  library's size and SHA-256 are the recorded ones: no record, a truncated or altered library
  and another kernel's library are all refused before anything is loaded.
- Builds run under an exclusive `fcntl.flock` on `<name>-<key>.lock` (`CacheEntry.build_lock`),
  and whoever waited for it checks the entry again before building. The lock belongs to the
  open file, which the operating system closes when its process ends, however it ends: a lock
  file left behind by a process that died is not held, so there is no stale lock to break;
  the timeout only bounds the wait for a live holder, whose pid the message names.
"""

import contextlib
import fcntl
import hashlib
import json
import os
import socket
import stat
import time

# Part of every cache key: libraries cached by a version of lmpipe with other rules (or none)
# have other names and are never read.
CACHE_FORMAT = 2
LOCK_TIMEOUT_SECONDS = 300.0
_LOCK_POLL_SECONDS = 0.1


class UnsafeCacheError(OSError):
    """The cache directory is not private to the current user; the message says why."""


class LockTimeoutError(TimeoutError):
    """Another process held a kernel's build lock for longer than the timeout."""


def _ownership_problem(status):
    """Why a file or directory with this `os.stat` result is not private, or None."""
    uid = os.getuid()
    if status.st_uid != uid:
        return f"is owned by user id {status.st_uid}, not by the current user ({uid})"
    writable = [who for who, bit in (("group", 0o020), ("others", 0o002)) if status.st_mode & bit]
    if writable:
        mode = oct(stat.S_IMODE(status.st_mode))[2:]
        return f"is writable by {' and '.join(writable)} (mode {mode})"
    return None


def directory_problem(path):
    """None where `path` is a directory fit to hold kernels, else why not (one phrase)."""
    try:
        status = os.stat(path)
    except FileNotFoundError:
        return "does not exist"
    if not stat.S_ISDIR(status.st_mode):
        return "is not a directory"
    return _ownership_problem(status)


def private_directory(path):
    """`path`, created with mode 0700 where it does not exist.

    Raises:
        UnsafeCacheError: it exists but is not a directory owned by the current user and
            closed to group and others.
    """
    try:
        os.makedirs(path, mode=0o700)
        return path
    except FileExistsError:
        pass
    problem = directory_problem(path)
    if problem is not None:
        raise UnsafeCacheError(f"{path} {problem}")
    return path


class CacheEntry:
    """The files of kernel `name` built with `key` in the cache `directory`: `library`, its
    build `record` and the build `lock`."""

    MISSING = "is not built yet"

    def __init__(self, directory, name, key):
        self.name = name
        self.key = key
        stem = os.path.join(directory, f"{name}-{key}")
        self.library = stem + ".so"
        self.record = stem + ".json"
        self.lock = stem + ".lock"

    def problem(self):
        """None where the library may be loaded, else what is wrong with it: `MISSING`, or
        a phrase to follow its path in a message (see the module docstring)."""
        try:
            library = os.lstat(self.library)
        except FileNotFoundError:
            return self.MISSING
        if not stat.S_ISREG(library.st_mode):
            return "is not a regular file"
        problem = _ownership_problem(library)
        if problem is not None:
            return problem
        try:
            record = os.lstat(self.record)
        except FileNotFoundError:
            return f"has no build record ({os.path.basename(self.record)})"
        if not stat.S_ISREG(record.st_mode):
            return "has a build record that is not a regular file"
        problem = _ownership_problem(record)
        if problem is not None:
            return f"has a build record that {problem}"
        try:
            with open(self.record, encoding="utf-8") as file:
                recorded = json.load(file)
            kernel, key = recorded["kernel"], recorded["key"]
            size, sha256 = int(recorded["size"]), str(recorded["sha256"])
        except (OSError, ValueError, TypeError, KeyError):
            return "has an unreadable build record"
        if kernel != self.name:
            return f"is recorded as the {kernel!r} kernel, not {self.name!r}"
        if key != self.key:
            return f"is recorded as build {key!r}, not {self.key!r}"
        # The size first: a truncated library is refused without reading it.
        if library.st_size != size:
            return f"is {library.st_size} bytes, not the {size} its build wrote (truncated?)"
        if _sha256(self.library) != sha256:
            return "does not have the SHA-256 its build recorded (changed since)"
        return None

    def publish(self, built):
        """Move the library just built at `built` (in the cache directory) into place, then
        write its record: each by rename, so that no reader sees a partial file."""
        os.chmod(built, 0o700)
        record = {
            "kernel": self.name,
            "key": self.key,
            "size": os.path.getsize(built),
            "sha256": _sha256(built),
        }
        written = built + ".json"
        descriptor = os.open(written, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            json.dump(record, file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(built, self.library)
        os.replace(written, self.record)

    def discard(self):
        """Remove the library and its record (those that exist)."""
        for path in (self.record, self.library):
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)

    @contextlib.contextmanager
    def build_lock(self, timeout=None):
        """Hold the entry's build lock (see the module docstring) within the context.

        Raises:
            LockTimeoutError: another process held it for `timeout` seconds (default
                `LOCK_TIMEOUT_SECONDS`); the message names that process.
        """
        timeout = LOCK_TIMEOUT_SECONDS if timeout is None else timeout
        descriptor = os.open(self.lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        holder = os.pread(descriptor, 200, 0).decode(errors="replace").strip()
                        raise LockTimeoutError(
                            f"waited {timeout:g} s for {self.lock}, held by "
                            f"{holder or 'a process that has not said which'}"
                        ) from None
                    time.sleep(_LOCK_POLL_SECONDS)
            os.ftruncate(descriptor, 0)
            since = time.strftime("%Y-%m-%d %H:%M:%S")
            holder = f"pid {os.getpid()} on {socket.gethostname()} since {since}\n"
            os.pwrite(descriptor, holder.encode(), 0)
            yield
        finally:
            os.close(descriptor)  # releases the lock


def _sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
