"""The examples of README.md and docs/, in order, run as written in a fresh copy of the
repository.

    python tests/readme_examples.py --list          # every example: run, or why not
    python tests/readme_examples.py [--keep DIR] [--start [FILE:]LINE] [--timeout SECONDS]

A bash or python block of README.md or of a page of docs/ is an example; the documents come in
their reading order: the README, then the pages as mkdocs.yml's navigation lists them. One that
cannot run as written (a user's own files, a server, a fragment that continues the block above)
says why on an HTML comment just before it: `<!-- not run: needs your own CoNLL files -->`.
Every other block runs, in the documents' order, in a copy of the repository's files (without
`runs/`, `serving/`, `data/`), as a reader who has done the set-up would run it: a bash block
as a script (`set -e`; in a block of `$ ` prompts, only the prompted commands), a python block
as a script of its own. The set-up's `pip install ... &&` is left out: the copy's `lmpipe` is
put first on PYTHONPATH instead, as `pip install -e .` there would (its dependencies must be
installed).

After each example the runner records the files it created under the copy; an example that
creates files inside an output folder (two levels: `runs/bert`, `serving/bert`) that another
example created is a collision (the main job's run trained over, an untrained model served as
the newest version), reported as a failure.
"""

import argparse
import dataclasses
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MKDOCS = ROOT / "mkdocs.yml"
NAV_PAGE = re.compile(r"^\s*-\s+(?:[^:\n]+:\s+)?(\S+\.md)\s*$", re.M)
FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.S | re.M)
NOT_RUN = re.compile(r"<!--\s*not run:\s*(.*?)\s*-->\s*$", re.S)
LEFT_OUT = ("runs", "serving", "data")


@dataclasses.dataclass
class Example:
    line: int  # of the opening fence, 1-based
    language: str
    source: str
    not_run: str | None  # the reason given, or None for an example that runs
    document: str = "README"  # where it is: "README" or a page's path, "docs/serving.md"

    @property
    def where(self):
        """How messages name the example: `README line 12`, `docs/serving.md line 40`."""
        return f"{self.document} line {self.line}"

    @property
    def script(self):
        """What runs: the python source, or the bash block's commands."""
        if self.language == "python":
            return self.source
        lines = self.source.splitlines()
        if any(line.startswith("$ ") for line in lines):
            lines = prompted_commands(lines)
        lines = [re.sub(r"^pip install [^&;]*&&\s*", "", line) for line in lines]
        lines = [line for line in lines if not line.startswith("pip install ")]
        return "set -euo pipefail\n" + "\n".join(lines) + "\n"


def prompted_commands(lines):
    """The commands of a block of `$ ` prompts and their output: each prompted line, with the
    lines that continue it (a trailing backslash, a quote still open)."""
    commands = []
    lines = list(lines)
    while lines:
        line = lines.pop(0)
        if not line.startswith("$ "):
            continue
        command = line[2:]
        while lines and (command.endswith("\\") or not complete(command)):
            command += "\n" + lines.pop(0)
        commands.append(command)
    return commands


def complete(command):
    try:
        shlex.split(command, comments=True)
    except ValueError:
        return False
    return True


def documents():
    """README.md, then the pages of docs/ in the order of mkdocs.yml's navigation."""
    pages = NAV_PAGE.findall(MKDOCS.read_text("utf-8")) if MKDOCS.exists() else []
    return [README, *(ROOT / "docs" / page for page in pages)]


def document_name(path):
    """`README` for README.md (as the messages have always named it), else the page's path."""
    path = pathlib.Path(path)
    return "README" if path == README else path.relative_to(ROOT).as_posix()


def examples(text=None, document=README):
    """Every bash and python block of one document (README.md unless told), in order."""
    text = pathlib.Path(document).read_text("utf-8") if text is None else text
    found = []
    for match in FENCE.finditer(text):
        language, source = match.group(1), match.group(2)
        if language not in ("bash", "python"):
            continue
        comments = []  # the HTML comment lines just before the block
        for line in reversed(text[: match.start()].rstrip("\n").splitlines()):
            if not line.startswith("<!--"):
                break
            comments.append(line)
        reason = next(filter(None, map(NOT_RUN.search, comments)), None)
        found.append(
            Example(
                line=text.count("\n", 0, match.start()) + 1,
                language=language,
                source=source,
                not_run=reason.group(1) if reason else None,
                document=document_name(document),
            )
        )
    return found


def all_examples():
    """Every example of every document, in reading order."""
    return [example for document in documents() for example in examples(document=document)]


# What an example writes: `--out DIR` and `lmpipe export SOURCE DIR` in shell commands,
# `.save(...)`, `.export(...)`, `export_saved_model(...)` and `checkpoint_dir=` in Python.
_SHELL_WRITES = re.compile(r"--out\s+(\S+)|lmpipe export\s+\S+\s+(\S+)")
_PYTHON_WRITES = re.compile(
    r"""(?:\.save|\.export|export_saved_model)\(\s*["']([^"']+)["']|checkpoint_dir=["']([^"']+)["']"""
)


def written_folders(example):
    """`{output folder: [what writes it]}` of an example, read from its text (the runner
    checks what it really writes; this finds the same collisions without running)."""
    pattern = _PYTHON_WRITES if example.language == "python" else _SHELL_WRITES
    written = {}
    for line in example.source.splitlines():
        for match in pattern.finditer(line):
            path = next(group for group in match.groups() if group)
            folder = output_folder(pathlib.Path(path))
            command = re.sub(r"^pip install [^&;]*&&\s*", "", line.split("#")[0].strip())
            written.setdefault(folder, []).append(command)
    return written


def fresh_copy(destination):
    """The repository's files as git knows them (tracked and untracked but not ignored, from
    the working tree), without the outputs of earlier runs."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        if name.split("/", 1)[0] in LEFT_OUT or not (ROOT / name).is_file():
            continue
        target = destination / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, target)


def files_under(folder):
    return {
        path.relative_to(folder)
        for path in folder.rglob("*")
        if path.is_file() and not any(part.startswith(".git") for part in path.parts)
    }


def output_folder(path):
    """The folder an example writes into: two levels (`runs/bert`), or the file itself."""
    parts = path.parts
    return pathlib.Path(*parts[:2]) if len(parts) > 2 else path


def run(selected, work, timeout, log=print):
    """Runs the examples in `work` in order; returns the failures as text (empty: all ran)."""
    # The copy's lmpipe, as `pip install -e .` there would give it.
    paths = [str(work), *filter(None, [os.environ.get("PYTHONPATH")])]
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    owners = {}  # output folder -> the example that created it
    failures = []
    for example in selected:
        before = files_under(work)
        stem = re.sub(r"\W", "_", example.document)
        name = f"{stem}_{example.line}.{'py' if example.language == 'python' else 'sh'}"
        script = pathlib.Path(tempfile.gettempdir()) / f"{os.getpid()}_{name}"
        script.write_text(example.script)
        command = [sys.executable, str(script)] if example.language == "python" else ["bash"]
        if example.language == "bash":
            command.append(str(script))
        started = time.monotonic()
        try:
            result = subprocess.run(
                command, cwd=work, env=environment, capture_output=True, text=True, timeout=timeout
            )
            code, output = result.returncode, result.stdout + result.stderr
        except subprocess.TimeoutExpired as error:
            code = "timeout"
            output = (error.stdout or b"").decode() + (error.stderr or b"").decode()
        finally:
            script.unlink(missing_ok=True)
        seconds = time.monotonic() - started
        log(f"{example.where} ({example.language}): exit {code}, {seconds:.0f} s")
        if code != 0:
            tail = "\n".join(output.strip().splitlines()[-30:])
            failures.append(f"{example.where}: exit {code}\n{tail}")
            break  # the examples after it may need what it makes
        for path in sorted(files_under(work) - before):
            folder = output_folder(path)
            owner = owners.setdefault(folder, example)
            if owner is not example:
                made = owner.where if owner.document != example.document else f"line {owner.line}"
                failures.append(
                    f"{example.where} writes {path} into {folder}, which the example at {made} made"
                )
                owners[folder] = example  # one report a folder and example
    return failures


def starting_at(found, start):
    """The examples from `start` on: `LINE` (of the README) or `FILE:LINE` (of a page)."""
    document, _, line = start.rpartition(":")
    document = document_name(ROOT / document) if document else "README"
    names = [document_name(path) for path in documents()]
    if document not in names:
        raise SystemExit(f"--start {start}: {document} is not one of {', '.join(names)}")
    first = next(
        (
            index
            for index, example in enumerate(found)
            if names.index(example.document) > names.index(document)
            or (example.document == document and example.line >= int(line))
        ),
        len(found),
    )
    return found[first:]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--list", action="store_true", help="list the examples and stop")
    parser.add_argument("--keep", help="run in this (new) folder and keep it (default: a temp)")
    parser.add_argument(
        "--start",
        default="0",
        help="skip the examples before this one: LINE of the README, or FILE:LINE of a page",
    )
    parser.add_argument("--timeout", type=float, default=1800, help="seconds an example")
    arguments = parser.parse_args(argv)
    found = all_examples()
    if arguments.list:
        for example in found:
            what = f"not run: {example.not_run}" if example.not_run else "runs"
            print(f"{example.document:28s} line {example.line:5d}  {example.language:6s}  {what}")
        return 0
    selected = [e for e in starting_at(found, arguments.start) if e.not_run is None]
    if arguments.keep:
        work = pathlib.Path(arguments.keep)
        work.mkdir(parents=True)
        fresh_copy(work)
        failures = run(selected, work, arguments.timeout)
    else:
        with tempfile.TemporaryDirectory() as folder:
            fresh_copy(pathlib.Path(folder))
            failures = run(selected, pathlib.Path(folder), arguments.timeout)
    for failure in failures:
        print(failure, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
