"""What a module of lmpipe imports of lmpipe, read from its source: every `import` and
`from ... import` statement, those inside functions included, for the tests that hold the
package's import rules (which floor may import which)."""

import ast
import importlib.util
import pathlib

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "lmpipe"


def modules(folder=""):
    """The dotted names of the modules under `lmpipe/<folder>` (its `__init__` as the package)."""
    names = []
    for path in sorted((PACKAGE / folder).rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def imported(module):
    """The lmpipe modules that `module` (a dotted name) imports: for `from a import b`, `a.b`
    where that is a module, else `a`."""
    path = pathlib.Path(importlib.util.find_spec(module).origin)
    found = set()
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                name = f"{node.module}.{alias.name}"
                found.add(name if _is_module(name) else node.module)
    return {name for name in found if name == "lmpipe" or name.startswith("lmpipe.")}


def _is_module(name):
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False
