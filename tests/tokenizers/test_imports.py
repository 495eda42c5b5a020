"""The import rules of lmpipe.tokenizers: imports run one way, from the base up through the
tokenizers and their learners to the registry, and nothing of a higher floor of lmpipe."""

from tests import module_imports

FLOORS = {
    "lmpipe.tokenizers.tokenizer": 1,
    "lmpipe.tokenizers.bert_words": 1,
    "lmpipe.tokenizers.training_texts": 1,
    "lmpipe.tokenizers.byte_pair_split": 1,
    "lmpipe.tokenizers.byte_pair_merging": 1,
    "lmpipe.tokenizers.token_characters": 1,
    "lmpipe.tokenizers.tokenizer_json": 2,
    "lmpipe.tokenizers.wordpiece": 3,
    "lmpipe.tokenizers.sentence_piece": 3,
    "lmpipe.tokenizers.byte_pair": 3,
    "lmpipe.tokenizers.wordpiece_trainer": 4,
    "lmpipe.tokenizers.sentence_piece_trainer": 4,
    "lmpipe.tokenizers.byte_pair_trainer": 4,
    "lmpipe.tokenizers.registry": 5,
    "lmpipe.tokenizers": 6,
}
"""Each module's floor: a module imports only modules of lower floors."""

BELOW_TOKENIZERS = ("lmpipe.arguments", "lmpipe.backend", "lmpipe.contract", "lmpipe.kernels")
"""The bottom floor of lmpipe, the only one below the tokenizers."""
CLASSES = {
    "lmpipe.tokenizers.wordpiece",
    "lmpipe.tokenizers.sentence_piece",
    "lmpipe.tokenizers.byte_pair",
}
LEARNERS = {f"{module}_trainer" for module in CLASSES} | {"lmpipe.tokenizers.registry"}


def test_every_tokenizers_module_has_a_floor():
    assert sorted(module_imports.modules("tokenizers")) == sorted(FLOORS)


def test_tokenizers_modules_import_only_lower_floors():
    upward = {
        (module, target)
        for module in FLOORS
        for target in module_imports.imported(module)
        if target in FLOORS and FLOORS[target] >= FLOORS[module]
    }
    assert upward == set()


def test_tokenizers_import_nothing_of_lmpipe_above_them():
    outside = {
        (module, target)
        for module in FLOORS
        for target in module_imports.imported(module)
        if target not in FLOORS and not target.startswith(BELOW_TOKENIZERS)
    }
    assert outside == set()


def test_only_the_registry_knows_every_tokenizer_class():
    knowing = {module for module in FLOORS if module_imports.imported(module) >= CLASSES}
    assert knowing == {"lmpipe.tokenizers.registry", "lmpipe.tokenizers"}  # and its face


def test_no_tokenizer_class_imports_a_learner():
    for module in CLASSES | {"lmpipe.tokenizers.tokenizer"}:
        assert module_imports.imported(module) & LEARNERS == set()
