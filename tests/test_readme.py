"""README.md's examples against the code: every `lmpipe` command in its shell blocks is one
the command accepts (its flags, its flag combinations), and every Python block compiles and
names only what lmpipe has."""

import ast
import pathlib
import re
import shlex

import pytest

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)


def blocks(language):
    text = README.read_text("utf-8")
    return [body for kind, body in BLOCK.findall(text) if kind == language]


def shell_commands():
    """Every `lmpipe ...` command of the README's bash blocks, as argv lists: continuation
    lines joined, a `$ ` prompt and comments dropped, a quoted argument over several lines
    kept whole, `$VAR` stand-ins for paths; lines of output (after a `$ ` command) skipped."""
    commands = []
    for body in blocks("bash"):
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


def test_the_readme_has_a_command_of_every_verb():
    verbs = {command[0] for command in COMMANDS}
    assert {"pretrain", "train", "finetune", "evaluate", "export", "predict", "summarize"} <= verbs
    tasks = {command[1] for command in COMMANDS if command[0] == "finetune"}
    assert tasks == {"classify", "tokens", "spans"}
    models = {command[1] for command in COMMANDS if command[0] == "pretrain"}
    assert {"bert", "albert", "xlnet", "gpt", "elmo", "word2vec"} <= models


@pytest.mark.parametrize("argv", COMMANDS, ids=[" ".join(c)[:60] for c in COMMANDS])
def test_every_readme_command_is_one_the_cli_accepts(argv):
    from lmpipe.cli import _resolve_pretrain_flags, build_parser

    parser = build_parser()
    try:
        arguments, extra = parser.parse_known_args(argv)
    except SystemExit as error:
        pytest.fail(f"lmpipe {' '.join(argv)}: refused by the parser ({error})")
    if arguments.command == "predict":
        extra = [word for word in extra if word.startswith("-")]
    assert not extra, f"lmpipe {' '.join(argv)}: unknown arguments {extra}"
    if arguments.command == "pretrain":
        _resolve_pretrain_flags(arguments, argv)  # the flags of another model are refused


@pytest.mark.parametrize("index", range(len(blocks("python"))))
def test_every_readme_python_block_compiles_and_names_what_lmpipe_has(index):
    import importlib

    source = blocks("python")[index]
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
                    pytest.fail(f"README python block {index}: {'.'.join(path)} does not exist")
            target = getattr(target, name)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("lmpipe"):
            module = importlib.import_module(node.module)
            for alias in node.names:
                assert hasattr(module, alias.name) or importlib.util.find_spec(
                    f"{node.module}.{alias.name}"
                ), f"README python block {index}: from {node.module} import {alias.name}"
