"""The import rules around lmpipe.datasets: the datasets stand on the tokenizers and below,
never on the layers or models, and the models never import the datasets."""

from tests import module_imports

ABOVE_DATASETS = ("layers", "models", "training", "interop", "pipelines", "serving", "cli")


def floor_of(module):
    return module.split(".")[1] if module.count(".") else module


def test_datasets_import_no_layers_and_nothing_above_them():
    upward = {
        (module, target)
        for module in module_imports.modules("datasets")
        for target in module_imports.imported(module)
        if floor_of(target) in ABOVE_DATASETS
    }
    assert upward == set()


def test_models_import_no_datasets():
    found = {
        (module, target)
        for module in module_imports.modules("models")
        for target in module_imports.imported(module)
        if floor_of(target) == "datasets"
    }
    assert found == set()


GROUPS = ("corpora", "examples", "labelled", "bundled")
"""The datasets' groups, bottom up: a group imports only its own modules and lower groups'."""


def test_datasets_groups_import_only_their_own_and_lower_groups():
    upward = set()
    for module in module_imports.modules("datasets"):
        group = module.split(".")[2] if module.count(".") > 1 else None
        if group is None:  # the package's face hands on every group's names
            continue
        for target in module_imports.imported(module):
            parts = target.split(".")
            inside = parts[:2] == ["lmpipe", "datasets"] and len(parts) > 2
            if inside and GROUPS.index(parts[2]) > GROUPS.index(group):
                upward.add((module, target))
    assert upward == set()
