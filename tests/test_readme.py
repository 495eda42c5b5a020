"""The examples of README.md and of docs/ against the code: every `lmpipe` command in their
shell blocks is one the command accepts (its flags, its flag combinations), every Python block
compiles and names only what lmpipe has, and every example runs as written or says why not
(the run itself, about an hour, with LMPIPE_README_EXAMPLES=1)."""

import ast
import os
import re
import shlex

import pytest

from tests import readme_examples

README = readme_examples.README
DOCUMENTS = readme_examples.documents()  # the README, then the pages of docs/
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)


def blocks(language, document=README):
    text = document.read_text("utf-8")
    return [body for kind, body in BLOCK.findall(text) if kind == language]


def shell_commands(document=README):
    """Every `lmpipe ...` command of the README's bash blocks, as argv lists: continuation
    lines joined, a `$ ` prompt and comments dropped, a quoted argument over several lines
    kept whole, `$VAR` stand-ins for paths; lines of output (after a `$ ` command) skipped."""
    commands = []
    for body in blocks("bash", document):
        lines = re.sub(r"\\\n\s*", " ", body).splitlines()
        while lines:
            line = lines.pop(0)
            line = line[2:] if line.startswith("$ ") else line
            if not re.match(r"(\w+=\S+\s+)*lmpipe\s|.*(&&|;)\s*lmpipe\s", line):
                continue
            words = None
            while words is None:
                try:
                    lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|()<>")
                    lexer.whitespace_split = True
                    lexer.commenters = "#"
                    words = list(lexer)
                except ValueError:  # a quote that goes on on the next line
                    line += "\n" + lines.pop(0)
            command = []
            for word in [*words, ";"]:
                if set(word) <= set(";&|()<>"):  # an operator ends a command
                    if command[:1] == ["lmpipe"]:
                        commands.append([re.sub(r"\$\w+", "path", w) for w in command[1:]])
                    command = []
                else:
                    command.append(word)
    return commands


COMMANDS = shell_commands()
DOCUMENTED_COMMANDS = [
    (readme_examples.document_name(document), command)
    for document in DOCUMENTS
    for command in shell_commands(document)
]
PYTHON_BLOCKS = [
    (readme_examples.document_name(document), index, source)
    for document in DOCUMENTS
    for index, source in enumerate(blocks("python", document))
]


def test_the_documents_are_the_readme_and_every_page_of_docs():
    pages = {path.relative_to(README.parent / "docs").as_posix() for path in DOCUMENTS[1:]}
    assert DOCUMENTS[0] == README
    assert pages == {
        path.relative_to(README.parent / "docs").as_posix()
        for path in (README.parent / "docs").rglob("*.md")
    }


def test_the_readme_has_a_command_of_every_verb():
    verbs = {command[0] for command in COMMANDS}
    assert {"pretrain", "train", "finetune", "evaluate", "export", "predict", "summarize"} <= verbs
    tasks = {command[1] for command in COMMANDS if command[0] == "finetune"}
    assert tasks == {"classify", "tokens", "spans"}
    models = {command[1] for command in COMMANDS if command[0] == "pretrain"}
    assert {"bert", "albert", "xlnet", "gpt", "elmo", "word2vec"} <= models


@pytest.mark.parametrize(
    "document, argv",
    DOCUMENTED_COMMANDS,
    ids=[f"{d}: {' '.join(c)[:60]}" for d, c in DOCUMENTED_COMMANDS],
)
def test_every_readme_command_is_one_the_cli_accepts(document, argv):
    from lmpipe.cli.main import build_parser
    from lmpipe.cli.pretrain import resolve_flags

    parser = build_parser()
    try:
        arguments, extra = parser.parse_known_args(argv)
    except SystemExit as error:
        pytest.fail(f"{document}: lmpipe {' '.join(argv)}: refused by the parser ({error})")
    if arguments.command == "predict":
        extra = [word for word in extra if word.startswith("-")]
    assert not extra, f"{document}: lmpipe {' '.join(argv)}: unknown arguments {extra}"
    if arguments.command == "pretrain":
        resolve_flags(arguments, argv)  # the flags of another model are refused


@pytest.mark.parametrize(
    "document, index, source", PYTHON_BLOCKS, ids=[f"{d}-{i}" for d, i, _ in PYTHON_BLOCKS]
)
def test_every_readme_python_block_compiles_and_names_what_lmpipe_has(document, index, source):
    import importlib

    tree = ast.parse(source)  # a SyntaxError fails the test
    # Dotted names under lmpipe (lmpipe.pipelines.TextClassifier, ...) must exist.
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        parts = []
        inner = node
        while isinstance(inner, ast.Attribute):
            parts.append(inner.attr)
            inner = inner.value
        if not (isinstance(inner, ast.Name) and inner.id == "lmpipe"):
            continue
        path = ["lmpipe", *reversed(parts)]
        target = importlib.import_module("lmpipe")
        for depth, name in enumerate(path[1:], start=1):
            if not hasattr(target, name):
                try:
                    target = importlib.import_module(".".join(path[: depth + 1]))
                    continue
                except ImportError:
                    pytest.fail(f"{document} python block {index}: {'.'.join(path)} does not exist")
            target = getattr(target, name)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("lmpipe"):
            module = importlib.import_module(node.module)
            for alias in node.names:
                assert hasattr(module, alias.name) or importlib.util.find_spec(
                    f"{node.module}.{alias.name}"
                ), f"{document} python block {index}: from {node.module} import {alias.name}"


# The examples run as written, in order (tests/readme_examples.py).

SYNTHETIC = """Set up:

```bash
pip install -e . && mkdir -p runs/a && echo trained > runs/a/model
```

<!-- not run: needs a server -->
```bash
curl localhost
```

```bash
$ echo "two
lines" > runs/b
two
lines
$ cat runs/b
```

```python
import pathlib
pathlib.Path("runs/a/untrained").write_text("x")
```
"""


def test_the_runner_reads_blocks_prompts_and_reasons():
    found = readme_examples.examples(SYNTHETIC)
    assert [(e.line, e.language, e.not_run) for e in found] == [
        (3, "bash", None),
        (8, "bash", "needs a server"),
        (12, "bash", None),
        (20, "python", None),
    ]
    assert "pip install" not in found[0].script
    assert found[0].script.endswith("mkdir -p runs/a && echo trained > runs/a/model\n")
    # In a block of prompts only the prompted commands run (a quoted newline kept whole).
    assert found[2].script.splitlines()[1:] == ['echo "two', 'lines" > runs/b', "cat runs/b"]


def test_the_runner_reports_a_collision_and_stops_at_a_failure(tmp_path):
    found = [e for e in readme_examples.examples(SYNTHETIC) if e.not_run is None]
    failures = readme_examples.run(found, tmp_path, timeout=60, log=lambda line: None)
    assert (tmp_path / "runs/b").read_text() == "two\nlines\n"
    assert failures == [
        "README line 20 writes runs/a/untrained into runs/a, which the example at line 3 made"
    ]
    failing = readme_examples.examples("```bash\nfalse\n```\n\n```bash\ntouch after\n```\n")
    failures = readme_examples.run(failing, tmp_path, timeout=60, log=lambda line: None)
    assert len(failures) == 1 and failures[0].startswith("README line 1: exit 1")
    assert not (tmp_path / "after").exists()


@pytest.mark.parametrize("document", DOCUMENTS, ids=readme_examples.document_name)
def test_every_readme_example_runs_or_says_why_not(document):
    found = readme_examples.examples(document=document)
    assert len(found) == len(blocks("bash", document)) + len(blocks("python", document))
    for example in found:
        if example.not_run is not None:
            assert example.not_run, f"{example.where}: say why it is not run"
            continue
        for placeholder in ("path/to/", "docker ", "curl ", "localhost"):
            assert placeholder not in example.source, (
                f"{example.where} runs as written but has {placeholder!r}: "
                "mark it <!-- not run: why -->"
            )


def test_the_readme_and_docs_run_at_least_fifteen_examples():
    # The README's examples moved into docs/ with its sections: they count together.
    assert sum(example.not_run is None for example in readme_examples.all_examples()) >= 15


@pytest.mark.skipif(
    not os.environ.get("LMPIPE_README_EXAMPLES"),
    reason="about an hour on 2 cores: LMPIPE_README_EXAMPLES=1 runs README and docs examples",
)
def test_the_readme_examples_run_in_order_in_a_fresh_copy(tmp_path):
    readme_examples.fresh_copy(tmp_path)
    selected = [e for e in readme_examples.all_examples() if e.not_run is None]
    failures = readme_examples.run(selected, tmp_path, timeout=1800)
    assert not failures, "\n\n".join(failures)


def test_the_models_config_parses_as_tf_servings_model_server_config():
    from google.protobuf import text_format
    from tensorflow_serving.config import model_server_config_pb2

    (config,) = [
        body
        for document in DOCUMENTS
        for body in blocks("text", document)
        if body.startswith("model_config_list")
    ]
    parsed = text_format.Parse(config, model_server_config_pb2.ModelServerConfig())
    models = {model.name: model for model in parsed.model_config_list.config}
    assert sorted(models) == ["bert", "gpt"]
    assert list(models["bert"].model_version_policy.specific.versions) == [7]
    assert all(model.base_path == f"/models/{name}" for name, model in models.items())
    # Version 7 of serving/bert is what the README's command-line block exports.
    assert ["export", "runs/bert/pipeline", "serving/bert", "--version", "7"] in COMMANDS


def test_no_two_readme_examples_write_the_same_output_folder():
    # A folder written by two examples: a run trained over, an untrained model served as the
    # newest version. The same command again (the main job, repeated) is a resume, allowed.
    writers = {}
    for example in readme_examples.all_examples():
        if example.not_run is None:
            for folder, commands in readme_examples.written_folders(example).items():
                writers.setdefault(folder, set()).update(
                    (example.where, command) for command in commands
                )
    assert {"runs/bert", "serving/bert", "runs/gpt", "serving/toy"} <= set(map(str, writers))
    for folder, found in writers.items():
        examples, commands = {where for where, _ in found}, {command for _, command in found}
        assert len(examples) == 1 or len(commands) == 1, f"{folder} is written by {sorted(found)}"
