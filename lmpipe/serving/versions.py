"""TF Serving's model directory layout: `<base_dir>/<integer version>/`, published atomically.

TF Serving polls a model's base directory (every second by default) and treats every child
whose name parses as an integer (`strings::safe_strto64`: digits with an optional sign) as a
version; the highest one is served. A version directory must therefore appear complete or not
at all: an export is written to a hidden temporary directory in `base_dir` (named
`.tmp-lmpipe-...`, which never parses as a number, so the server ignores it) and renamed to
its version number only when every file is written. A rename within one file system is atomic.

Replacing an existing version (`overwrite=True`) swaps the new directory with the old one in
one atomic step (see `lmpipe.serving.directory_swap`), so the version is never missing: a
server polling at any instant finds the complete old or the complete new SavedModel. The
hidden directories a killed export leaves behind are cleared by the next export to the same
base directory (`remove_leftovers`), those of exports still running are kept.
"""

import os
import re

from lmpipe.arguments import check_number
from lmpipe.serving import directory_swap

# What TF Serving accepts as a version directory name (surrounding whitespace and a sign too).
_VERSION_NAME = re.compile(r"\s*[+-]?[0-9]+\s*")

TEMPORARY_PREFIX = directory_swap.TEMPORARY_PREFIX
"""Prefix of the directories an export is written to before it is renamed into place."""

# Exporters racing for the next version number retry this many times.
_MAX_ATTEMPTS = 100


def model_versions(base_dir):
    """The versions TF Serving would see in `base_dir`: `{version number: directory name}`.

    Only directories whose name is an integer count, as for the server; a missing `base_dir`
    has no versions.
    """
    base_dir = os.fspath(base_dir)
    if not os.path.isdir(base_dir):
        return {}
    versions = {}
    for name in os.listdir(base_dir):
        if _VERSION_NAME.fullmatch(name) and os.path.isdir(os.path.join(base_dir, name)):
            versions[int(name)] = name
    return versions


def next_version(base_dir):
    """1 + the largest version in `base_dir`, or 1 if it has none."""
    return max(model_versions(base_dir), default=0) + 1


def check_version(version):
    """Raise ValueError unless `version` is None (the next version) or a non-negative integer."""
    check_number("version", version, minimum=0, integer=True, none=True)


def check_base_dir(base_dir):
    """`base_dir` as a string; ValueError if it exists and is not a directory."""
    try:
        base_dir = os.fspath(base_dir)
    except TypeError:
        raise ValueError(
            f"`base_dir` must be a path, got {type(base_dir).__name__}: {base_dir!r}."
        ) from None
    if os.path.exists(base_dir) and not os.path.isdir(base_dir):
        raise ValueError(f"`base_dir` {base_dir!r} exists and is not a directory.")
    return base_dir


def check_not_exported(base_dir, version, overwrite):
    """Raise ValueError if `version` exists in `base_dir` and `overwrite` is False."""
    if version is None or overwrite:
        return
    existing = model_versions(base_dir).get(version)
    if existing is not None:
        raise ValueError(
            f"Version {version} already exists in {base_dir!r} "
            f"({os.path.join(base_dir, existing)}); pass overwrite=True to replace it, or "
            "version=None for the next version."
        )


def temporary_directory(base_dir):
    """A fresh hidden directory in `base_dir` (created if needed) to write an export to;
    removed if the block raises (see `directory_swap.temporary_directory`)."""
    return directory_swap.temporary_directory(base_dir)


def remove_leftovers(base_dir):
    """Clear what killed exports left in `base_dir`: their unfinished `.tmp-lmpipe-*`
    directories, and a version renamed aside (`.old-lmpipe-*`, where the file system cannot
    swap) is renamed back if its replacement never arrived. Exports still running are left
    alone (see `directory_swap.remove_leftovers`)."""
    directory_swap.remove_leftovers(os.fspath(base_dir))


def publish(temporary, base_dir, version=None, overwrite=False):
    """Rename the finished export `temporary` to `<base_dir>/<version>`; return that path.

    Args:
        temporary: a complete SavedModel directory inside `base_dir`.
        base_dir: the model's base directory.
        version: the version number; None takes the next one (and the one after that if
            another exporter published it first).
        overwrite: replace an existing `version`, swapping the new directory with the old one
            in one atomic step, so that the version is never missing.

    Raises:
        ValueError: `version` exists and `overwrite` is False, or the export uses an op that a
            supported TF Serving release lacks (`op_check.check_serving_ops`).
    """
    from lmpipe.serving.op_check import check_serving_ops

    check_serving_ops(temporary)
    if version is None:
        for _ in range(_MAX_ATTEMPTS):
            target = os.path.join(base_dir, str(next_version(base_dir)))
            if _rename_if_absent(temporary, target):
                return target
        raise RuntimeError(f"Could not find a free version number in {base_dir!r}.")

    existing = model_versions(base_dir).get(version)
    target = os.path.join(base_dir, str(version))
    if existing is None and _rename_if_absent(temporary, target):
        return target
    if not overwrite:
        raise ValueError(
            f"Version {version} already exists in {base_dir!r}; pass overwrite=True to replace it."
        )
    existing_path = os.path.join(base_dir, existing if existing is not None else str(version))
    return directory_swap.replace_directory(temporary, existing_path)


def _rename_if_absent(source, target):
    """Rename directory `source` to `target` unless `target` exists; True if renamed."""
    if os.path.lexists(target):
        return False
    try:
        # POSIX rename replaces an empty directory silently; an existing non-empty one (a
        # racing exporter's) makes it fail, which is what we want.
        os.rename(source, target)
    except OSError:
        if os.path.isdir(source) and os.path.lexists(target):
            return False
        raise
    return True
