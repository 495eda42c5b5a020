"""The files and folders a command line names, checked right after it is parsed.

`check_paths` runs before TensorFlow is imported and before any data is read, so a mistyped
`--corpus`, a `--pretrained` folder that is not a checkpoint or an `--out` under a file is a
one-line error naming the flag and the path within a fraction of a second, not after the
minute of loading, splitting and tokenizing that comes first otherwise. It imports nothing
but the standard library. Paths with a scheme (`gs://...`) are left to TensorFlow's file
systems, which read them later.

The checks say what the readers would say later; the readers still check what only reading
finds (formats, columns, lines).
"""

import glob
import os
import sys

from lmpipe.cli.corpus_flags import check_corpus_sources, corpus_sources

HUGGING_FACE_CONFIG = "config.json"
SAVED_PIPELINE = "pipeline.json"
BYTE_PAIR_MERGES = "merges.txt"
"""GPT-2's merges, read from beside a `--vocab vocab.json`."""
CORPUS_MANIFEST = ".lmpipe-manifest.json"
"""Kept beside a corpus's files; a wide glob matches it, the corpus reader skips it."""


def check_paths(arguments):
    """Raise `SystemExit("error: FLAG PATH: ...")` for the first path of the parsed command
    line `arguments` that cannot be what its flag names: a file that does not exist, is a
    folder or cannot be read, a glob that matches no file, a folder that is not a checkpoint
    or a saved pipeline, an output folder under a file."""
    command = arguments.command

    def value(name):  # None where the command has no such flag
        return getattr(arguments, name, None)

    check_corpus_sources(value("corpus"))
    for source in corpus_sources(value("corpus")):
        _check_glob("--corpus", source.pattern)
    for path in value("pairs") or ():
        _check_file("--pairs", path)
    for flag in ("--vocab", "--train", "--validation", "--test", "--labelled"):
        _check_file(flag, value(flag[2:]))
    vocab = value("vocab")
    if vocab and vocab.endswith(".json") and not _remote(vocab):
        # GPT-2's byte-level BPE: vocab.json names the tokens, merges.txt beside it the merges.
        merges = os.path.join(os.path.dirname(vocab), BYTE_PAIR_MERGES)
        if not os.path.isfile(merges):
            _refuse(
                "--vocab", vocab, f"GPT-2's BPE needs {BYTE_PAIR_MERGES} beside it: no {merges}"
            )
    _check_exists("--spam-assassin", value("spam_assassin"))
    context = value("context")
    if context and context.startswith("@"):
        _check_file("--context", context[1:], shown=context)
    pretrained = value("pretrained")
    if command == "pretrain":
        _check_folder(
            "--pretrained", pretrained, (HUGGING_FACE_CONFIG,), "a Hugging Face checkpoint"
        )
    elif command == "finetune":
        _check_folder(
            "--pretrained",
            pretrained,
            (SAVED_PIPELINE, os.path.join("pipeline", SAVED_PIPELINE), HUGGING_FACE_CONFIG),
            "a saved pipeline, the --out of a pretraining run or a Hugging Face checkpoint",
        )
    for flag, name in (("--out", "out"), ("--export-dir", "export_dir"), ("base_dir", "base_dir")):
        _check_output_folder(flag, value(name))


def _refuse(flag, path, problem):
    raise SystemExit(f"error: {flag} {path}: {problem}")


def _remote(path):
    """Whether `path` is on a file system with a scheme (gs://, hdfs://, ...)."""
    return "://" in os.fspath(path)


def _check_glob(flag, pattern):
    """A corpus pattern: it matches files (as `tf.io.gfile.glob` matches them), no folder,
    each readable."""
    if pattern is None or _remote(pattern):
        return
    # A path that exists is itself, whatever glob makes of its characters ("[", "*").
    matches = [pattern] if os.path.exists(pattern) else glob.glob(pattern, **_HIDDEN)
    matches = [
        match for match in matches if not os.path.basename(match).startswith(CORPUS_MANIFEST)
    ]
    if not matches:
        _refuse(flag, repr(pattern), "no file matches it")
    for match in sorted(matches):
        if os.path.isdir(match):
            what = "is a folder" if match == pattern else f"matches {match}, a folder"
            _refuse(
                flag, repr(pattern), f"{what}; the corpus is files (give a glob such as DIR/*.txt)"
            )
        _check_readable(flag, match)


# Hidden files too, as TensorFlow's glob matches them (Python 3.11 and later).
_HIDDEN = {"include_hidden": True} if sys.version_info >= (3, 11) else {}


def _check_file(flag, path, shown=None):
    """A file to read: it exists, is not a folder, and opens."""
    if path is None or _remote(path):
        return
    shown = path if shown is None else shown
    if not os.path.exists(path):
        _refuse(flag, shown, "no such file")
    if os.path.isdir(path):
        _refuse(flag, shown, "is a folder, not a file")
    _check_readable(flag, path, shown)


def _check_readable(flag, path, shown=None):
    try:
        with open(path, "rb"):
            pass
    except OSError as error:
        _refuse(flag, path if shown is None else shown, f"cannot be read ({error.strerror})")


def _check_exists(flag, path):
    """A file or folder to read."""
    if path is not None and not _remote(path) and not os.path.exists(path):
        _refuse(flag, path, "no such file or folder")


def _check_folder(flag, path, holds, what):
    """A folder that holds one of the files `holds` (paths inside it): `what` it must be."""
    if path is None or _remote(path):
        return
    if not os.path.exists(path):
        _refuse(flag, path, "no such folder")
    if not os.path.isdir(path):
        _refuse(flag, path, f"is a file; give {what} (a folder)")
    if not any(os.path.isfile(os.path.join(path, name)) for name in holds):
        names = " or ".join(holds)
        _refuse(flag, path, f"is not {what}: it has no {names}")


def _check_output_folder(flag, path):
    """A folder to write: itself a folder if it exists, else under a folder that can be
    written."""
    if path is None or _remote(path):
        return
    if os.path.exists(path):
        if not os.path.isdir(path):
            _refuse(flag, path, "is a file; give a folder")
        parent = path
    else:
        parent = os.path.dirname(os.path.abspath(path))
        while not os.path.exists(parent):
            parent = os.path.dirname(parent)
        if not os.path.isdir(parent):
            _refuse(flag, path, f"{parent} is a file, so no folder can be made under it")
    if not os.access(parent, os.W_OK):
        _refuse(flag, path, f"{parent} cannot be written")
