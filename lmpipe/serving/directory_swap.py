"""Replacing a directory so that its path always holds a complete one, the old or the new.

One `rename` cannot replace a directory (POSIX renames a directory only over an empty one).
Linux (`renameat2` with `RENAME_EXCHANGE`: ext4, xfs, btrfs, tmpfs, overlayfs, ...) and macOS
(`renamex_np` with `RENAME_SWAP`: APFS) swap two paths in one atomic step instead: the new
directory, written completely under a hidden name beside the target, trades places with the
old one, which is deleted afterwards. Whoever opens the path gets the old directory or the
new one, never a mix and never nothing.

Where the file system cannot swap (NFS, some FUSE file systems, Windows), the old directory is
renamed aside under a hidden name that records its own name (`.old-lmpipe-...-<name>`), then
the new one is renamed in: between the two renames the path is missing. If the process dies
there, the next `remove_leftovers` in that directory renames the old one back.

Hidden names carry their writer's process id and host (`.tmp-lmpipe-<pid>-<host>-<random>`),
so that the leftovers of a writer that was killed are told from the work of one still
running: a leftover is stale when its writer ran on this host (same host name and process-id
namespace) and that process is gone, or, written from another host, when it has not changed
for `STALE_AFTER_SECONDS` (a day).
"""

import contextlib
import ctypes
import errno
import os
import re
import shutil
import socket
import sys
import time
import uuid

TEMPORARY_PREFIX = ".tmp-lmpipe-"
"""Prefix of the hidden directories a new directory is written to before it is swapped in."""

OLD_PREFIX = ".old-lmpipe-"
"""Prefix of an old directory renamed aside where the file system cannot swap."""

STALE_AFTER_SECONDS = 24 * 3600
"""Age after which a leftover written from another host is taken for abandoned."""

# Errors of the swap call that mean "this system or file system cannot swap".
_CANNOT_SWAP = {errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP}
_HIDDEN_NAME = re.compile(
    r"(?P<prefix>\.tmp-lmpipe-|\.old-lmpipe-)(?P<pid>[0-9]+)-(?P<host>[A-Za-z0-9._]+)"
    r"-(?P<random>[0-9a-f]{32})(?:-(?P<name>.+))?"
)


def _host():
    """This host's name and process-id namespace: where a process id means something."""
    name = re.sub(r"[^A-Za-z0-9.]", "_", socket.gethostname()) or "host"
    with contextlib.suppress(OSError):
        name += f"_{os.stat('/proc/self/ns/pid').st_ino}"
    return name


_HOST = _host()


def hidden_name(prefix, name=None, pid=None):
    """A fresh hidden name `<prefix><pid>-<host>-<random>[-<name>]`; `pid` defaults to this
    process's."""
    pid = os.getpid() if pid is None else pid
    hidden = f"{prefix}{pid}-{_HOST}-{uuid.uuid4().hex}"
    return hidden if name is None else f"{hidden}-{name}"


@contextlib.contextmanager
def temporary_directory(parent):
    """A fresh hidden directory in `parent` (created if needed) to write a new directory to;
    removed if the block raises.

    Made with `os.mkdir`, so it gets the usual permissions (a server running as another user
    can read it), unlike `tempfile.mkdtemp`'s 0700.
    """
    os.makedirs(parent, exist_ok=True)
    path = os.path.join(parent, hidden_name(TEMPORARY_PREFIX))
    _mkdir(path)
    try:
        yield path
    except BaseException:
        _remove(path)
        raise


def replace_directory(source, target):
    """Move the complete directory `source` to `target` in the same parent directory,
    replacing the directory at `target` if there is one, so that `target` holds either the
    old or the new directory at every instant (see the module docstring for file systems
    that cannot swap).

    Returns:
        `target`.
    """
    if not os.path.lexists(target):
        try:
            _rename(source, target)
            return target
        except OSError:
            if not os.path.lexists(target):
                raise
            # Another writer made `target` meanwhile: replace it as any old one.
    try:
        _exchange(source, target)
    except OSError as error:
        if error.errno not in _CANNOT_SWAP:
            raise
        _replace_by_two_renames(source, target)
    else:
        _remove(source)  # the old directory, now under the hidden name
    return target


def remove_leftovers(parent):
    """Clear the stale hidden directories in `parent` that a killed writer left behind.

    A stale `.tmp-lmpipe-*` (an unfinished new directory, or an old one swapped out but not
    yet deleted) is deleted. A stale `.old-lmpipe-*-<name>` is renamed back to `<name>` if
    nothing is there (the writer died between its two renames), else deleted. Hidden
    directories of writers still running are left alone.
    """
    if not os.path.isdir(parent):
        return
    for entry in os.listdir(parent):
        match = _HIDDEN_NAME.fullmatch(entry)
        path = os.path.join(parent, entry)
        if match is None or not _is_stale(match, path):
            continue
        name = match["name"]
        if (
            match["prefix"] == OLD_PREFIX
            and name
            and not os.path.lexists(os.path.join(parent, name))
        ):
            with contextlib.suppress(OSError):  # another process may restore it first
                _rename(path, os.path.join(parent, name))
                continue
        _remove(path)


def _replace_by_two_renames(source, target):
    parent, name = os.path.split(target)
    old = os.path.join(parent, hidden_name(OLD_PREFIX, name))
    _rename(target, old)
    try:
        _rename(source, target)
    except BaseException:
        _rename(old, target)
        raise
    _remove(old)


def _is_stale(match, path):
    if match["host"] == _HOST:
        return int(match["pid"]) != os.getpid() and not _process_exists(int(match["pid"]))
    try:
        return time.time() - os.lstat(path).st_mtime > STALE_AFTER_SECONDS
    except FileNotFoundError:
        return False


def _process_exists(pid):
    if os.name == "nt":  # os.kill(pid, 0) would end the process there: assume it runs
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, as another user
        return True
    return True


# The file-system steps, each one atomic; tests replace them to stop a writer between steps.


def _mkdir(path):
    os.mkdir(path)


def _rename(source, target):
    os.rename(source, target)


def _remove(path):
    shutil.rmtree(path, ignore_errors=True)


def _swap_function():
    """The C library's atomic swap of two paths, as `(source, target) -> int`, or None."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
    if sys.platform.startswith("linux"):
        renameat2 = getattr(libc, "renameat2", None)  # glibc 2.28+
        if renameat2 is None:
            return None
        renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p] * 2 + [ctypes.c_uint]
        at_fdcwd, rename_exchange = -100, 2
        return lambda source, target: renameat2(at_fdcwd, source, at_fdcwd, target, rename_exchange)
    if sys.platform == "darwin":
        renamex_np = getattr(libc, "renamex_np", None)
        if renamex_np is None:
            return None
        renamex_np.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_uint]
        rename_swap = 2
        return lambda source, target: renamex_np(source, target, rename_swap)
    return None


_SWAP = _swap_function()


def _exchange(first, second):
    """Swap the entries `first` and `second` in one atomic step; OSError if impossible."""
    if _SWAP is None:
        raise OSError(errno.ENOSYS, "this system cannot swap two paths atomically")
    if _SWAP(os.fsencode(first), os.fsencode(second)) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), first, None, second)
