"""The data contract holds: for every family, the dataset's element spec, the model's inputs
and the exported signature's inputs are what `lmpipe.contract` says.

Exports are checked where the family exports tensors and the export is quick: the classifier
and token tagging (the pretraining encoders export the classifier's `serving_default`).
"""

import ast
import pathlib

import pytest
import tensorflow as tf

from lmpipe import contract, pipelines
from lmpipe.contract import input_specs, label_specs
from lmpipe.datasets.examples.bert_examples import check_objective_sequence_length
from lmpipe.datasets.examples.causal_lm import check_causal_sequence_length
from lmpipe.models import bert
from tests.pipelines.test_every_family import (  # noqa: F401 (fixtures)
    BATCH,
    SEQ_LEN,
    corpus,
    encoder_config,
    families,
    paper_tokenizers,
    tokenizer,
    translation_tokenizer,
)

# test_every_family's pipelines -> (the contract's family, its lengths).
FAMILY_OF = {
    "bert": ("bert", {"seq_len": SEQ_LEN, "num_predictions": 3}),
    "albert": ("albert", {"seq_len": SEQ_LEN, "num_predictions": 3}),
    "xlnet": ("xlnet", {"seq_len": SEQ_LEN, "num_predictions": 3}),
    "gpt": ("gpt", {"seq_len": SEQ_LEN}),
    "elmo": ("elmo", {"seq_len": SEQ_LEN}),
    # Translation batches are padded to their longest sentence: no fixed lengths.
    "translation": ("seq2seq", {}),
    "classifier": ("classification", {"seq_len": SEQ_LEN}),
    "spans": ("spans", {"seq_len": SEQ_LEN}),
}
# The models that are not functional Keras models (no `.inputs`): checked by a call.
SUBCLASSED = {"xlnet", "translation"}
# GPT, ELMo, translation and spans export text in: no tensor signature to check.
QUICK_EXPORTS = {"classifier"}


def specs_of(structure):
    """`{name: (dtype, shape)}` of a dict of `tf.TensorSpec`s or Keras tensors."""
    return {
        name: (tf.as_dtype(spec.dtype).name, tuple(spec.shape)) for name, spec in structure.items()
    }


def assert_batches_conform(element_spec, features, labels):
    """The batch dimension is None or `BATCH` (full batches only); the rest is the contract."""
    for actual, expected in ((element_spec[0], features), (element_spec[1], labels)):
        actual = specs_of(actual)
        assert list(actual) == list(expected)
        for name, (dtype, shape) in actual.items():
            assert shape[0] in (None, BATCH), name
            assert (dtype, (None,) + shape[1:]) == expected[name], name


def assert_inputs_conform(inputs, family):
    """Named inputs of any length: the contract's names, dtypes and ranks."""
    expected = input_specs(family)
    assert {name: (dtype, len(shape)) for name, (dtype, shape) in specs_of(inputs).items()} == {
        name: (dtype, len(shape)) for name, (dtype, shape) in expected.items()
    }


@pytest.fixture(scope="module")
def made(corpus, tokenizer, translation_tokenizer, paper_tokenizers):  # noqa: F811
    return families(corpus, tokenizer, translation_tokenizer, paper_tokenizers)


@pytest.mark.parametrize("name", list(FAMILY_OF))
def test_each_family_dataset_model_and_export_follow_the_contract(name, made, tmp_path):
    family, lengths = FAMILY_OF[name]
    make, data, _ = made[name]
    pipe = make()
    dataset = pipe.dataset(data, BATCH)
    features = input_specs(family, **lengths)
    if family in contract.STREAM_FAMILIES:
        features[contract.STREAM_POSITION] = contract.stream_position_spec()
    assert_batches_conform(dataset.element_spec, features, label_specs(family, **lengths))

    model = pipe.build_model()
    if name in SUBCLASSED:
        features, _ = next(iter(dataset))
        assert model(features) is not None
        if name == "xlnet":
            assert_inputs_conform(
                {input.name: input for input in model.encoder.inputs}, "classification"
            )
    else:
        assert_inputs_conform({input.name: input for input in model.inputs}, family)

    if name in QUICK_EXPORTS:
        pipe.model = model
        path = pipe.export(str(tmp_path))
        signature = tf.saved_model.load(path).signatures["serving_default"]
        assert_inputs_conform(signature.structured_input_signature[1], family)


def test_token_tagging_dataset_model_and_export_follow_the_contract(tokenizer, tmp_path):  # noqa: F811
    sentences = [["To", "be", "or", "not"], ["that", "is", "the", "question"]] * 4
    tags = [["B-PER", "O", "O", "O"], ["O", "O", "O", "B-PER"]] * 4
    pipe = pipelines.TokenTagger(
        tokenizer, bert(encoder_config(tokenizer)), tags=["O", "B-PER"], seq_len=SEQ_LEN
    )
    dataset = pipe.dataset((sentences, tags), BATCH, epochs=None)
    assert_batches_conform(
        dataset.element_spec,
        input_specs("token_tagging", seq_len=SEQ_LEN),
        label_specs("token_tagging", seq_len=SEQ_LEN),
    )
    pipe.model = pipe.build_model()
    assert_inputs_conform({input.name: input for input in pipe.model.inputs}, "token_tagging")
    path = pipe.export(str(tmp_path))
    signature = tf.saved_model.load(path).signatures["serving_default"]
    assert_inputs_conform(signature.structured_input_signature[1], "token_tagging")


def test_every_objective_has_its_pair_label():
    assert list(label_specs("bert", num_predictions=5)) == [
        "mask_ids",
        "mask_weights",
        "nsp_labels",
    ]
    assert list(label_specs("albert")) == ["mask_ids", "mask_weights", "sop_labels"]
    assert list(label_specs("bert", objective="mlm")) == ["mask_ids", "mask_weights"]
    assert label_specs("bert", num_predictions=5)["mask_weights"] == ("float32", (None, 5))


def test_xlnet_shapes_are_the_papers():
    specs = input_specs("xlnet", seq_len=8, num_predictions=2)
    assert specs[contract.PERM_MASK] == ("float32", (None, 8, 8))
    assert specs[contract.TARGET_MAPPING] == ("float32", (None, 2, 8))


def test_an_unknown_family_or_objective_is_named():
    with pytest.raises(ValueError, match="`family` must be one of bert, .*got 'bart'"):
        input_specs("bart")
    with pytest.raises(ValueError, match="`objective` must be one of nsp, sop, mlm, got 'clm'"):
        label_specs("bert", objective="clm")


# Strings equal to a contract name that are not the contract's names, each with its reason.
NOT_THE_CONTRACT = {
    # The key of tokenized corpus files' TFRecords: an on-disk format, which must keep reading
    # files written before even if a contract name changed.
    ("lmpipe/datasets/corpora/tokenized_corpus.py", "token_ids"),
    # The keyword arguments that the two-stream layer passes on to its attention calls.
    ("lmpipe/layers/two_stream_relative_attention.py", "segment_ids"),
}


def string_literals(tree):
    """The plain string constants of `tree`: not f-string parts, and not the option name of an
    options' `resolve(name, value)` (an option called `labels`, not the label)."""
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            skipped.update(id(part) for part in ast.walk(node))
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "resolve":
            skipped.update(id(argument) for argument in node.args[:1])
    for node in ast.walk(tree):
        is_string = isinstance(node, ast.Constant) and isinstance(node.value, str)
        if is_string and id(node) not in skipped:
            yield node


def test_no_module_spells_a_contract_name_but_the_contract():
    names = {
        value for key, value in vars(contract).items() if key.isupper() and isinstance(value, str)
    }
    package = pathlib.Path(contract.__file__).parent
    found = []
    for path in sorted(package.rglob("*.py")):
        where = path.relative_to(package.parent).as_posix()
        if where == "lmpipe/contract.py":
            continue
        for node in string_literals(ast.parse(path.read_text())):
            if node.value in names and (where, node.value) not in NOT_THE_CONTRACT:
                found.append(f"{where}:{node.lineno}: {node.value!r}")
    assert found == []


def test_one_seq_len_minimum_per_family_is_what_the_checks_enforce():
    assert {family: contract.min_seq_len(family) for family in contract.FAMILIES} == {
        "bert": 5,
        "albert": 5,
        "xlnet": 5,
        "gpt": 2,
        "elmo": 2,
        "seq2seq": None,
        "classification": 3,
        "token_tagging": 3,
        "spans": 5,
    }
    assert contract.min_seq_len("bert", objective="mlm") == 3
    assert contract.min_seq_len("classification", pairs=True) == 5
    for objective, shortest in (("nsp", 5), ("sop", 5), ("mlm", 3)):
        check_objective_sequence_length(shortest, objective)
        with pytest.raises(ValueError, match=f"`seq_len` must be at least {shortest}"):
            check_objective_sequence_length(shortest - 1, objective)
    check_causal_sequence_length(2)
    with pytest.raises(ValueError, match="seq_len"):
        check_causal_sequence_length(1)
