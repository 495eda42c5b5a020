"""The rules the Hugging Face package keeps: files under 700 lines; imports run down only
(pipelines and the command call interop, never the reverse, and models never import it); the
family modules sit below the registry that lists them, so a new family is one module and one
registry line."""

import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[3] / "lmpipe"
INTEROP = sorted((PACKAGE / "interop").rglob("*.py"))

# The floors above interop: what it may never import.
ABOVE = ("lmpipe.pipelines", "lmpipe.serving", "lmpipe.cli")

# The modules that the family modules are built from, and the families.
BELOW_THE_REGISTRY = ("checkpoint", "weights", "family", "encoders", "xlnet", "gpt2")


def imported(path):
    """The modules `path` imports, those imported inside functions included."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize("path", INTEROP, ids=lambda path: path.name)
def test_every_interop_file_is_under_700_lines(path):
    assert len(path.read_text(encoding="utf-8").splitlines()) < 700


@pytest.mark.parametrize("path", INTEROP, ids=lambda path: path.name)
def test_interop_never_imports_the_floors_that_call_it(path):
    assert not [name for name in imported(path) if name.startswith(ABOVE)]


def test_models_never_import_interop():
    for path in sorted((PACKAGE / "models").rglob("*.py")):
        assert not [name for name in imported(path) if name.startswith("lmpipe.interop")], path


@pytest.mark.parametrize("module", BELOW_THE_REGISTRY)
def test_family_modules_do_not_import_the_registry_or_its_users(module):
    names = imported(PACKAGE / "interop" / "hf" / f"{module}.py")
    above = ("registry", "writer", "tasks")
    assert not [name for name in names if name.rsplit(".", 1)[-1] in above]
