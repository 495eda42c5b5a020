"""The package's structure rules, for the whole of lmpipe: no file over 700 lines, no import
circle, and imports that run down the floors only (arguments, contract, kernels and backend at
the bottom; then layers and tokenizers; datasets; models; training, interop and serving;
pipelines; the command on top). Imports inside functions count as imports."""

import pathlib

import pytest

from tests.module_imports import PACKAGE, imported, modules

FLOORS = {
    "arguments": 0,
    "contract": 0,
    "kernels": 0,
    "backend": 0,
    "layers": 1,
    "tokenizers": 1,
    "datasets": 2,
    "models": 3,
    "training": 4,
    "interop": 4,
    "serving": 4,
    "pipelines": 5,
    "cli": 6,
}
MODULES = [name for name in modules() if not name.endswith("__main__")]


def _floor(module):
    """The floor of a dotted module name, None for the package itself."""
    parts = module.split(".")
    return FLOORS[parts[1]] if len(parts) > 1 else None


@pytest.mark.parametrize(
    "path", sorted(PACKAGE.rglob("*.py")), ids=lambda path: str(path.relative_to(PACKAGE))
)
def test_no_file_of_the_package_is_over_700_lines(path):
    assert len(pathlib.Path(path).read_text(encoding="utf-8").splitlines()) <= 700


def test_every_subpackage_has_a_floor():
    assert {name.split(".")[1] for name in MODULES if "." in name} == set(FLOORS)


def test_no_module_imports_a_higher_floor():
    upward = [
        f"{module} -> {target}"
        for module in MODULES
        if _floor(module) is not None
        for target in sorted(imported(module))
        if _floor(target) is not None and _floor(target) > _floor(module)
    ]
    assert not upward


def test_no_modules_import_each_other_in_a_circle():
    graph = {module: imported(module) & set(MODULES) for module in MODULES}
    circles, done = [], set()

    def visit(module, path):
        if module in path:
            circles.append(path[path.index(module) :] + [module])
            return
        if module in done:
            return
        for target in sorted(graph[module]):
            visit(target, path + [module])
        done.add(module)

    for module in MODULES:
        visit(module, [])
    assert not circles, "\n".join(" -> ".join(circle) for circle in circles)
