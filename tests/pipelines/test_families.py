"""Each family declares how the `lmpipe` command offers it and what it predicts from text;
the command knows no family by name."""

import argparse

import pytest

from lmpipe import pipelines
from lmpipe.datasets import WordPieceTokenizer
from lmpipe.pipelines.families import MODELS, PRETRAINING
from lmpipe.tokenizers.wordpiece import SPECIAL_TOKENS

PREDICTING = [
    pipelines.BertPretraining,
    pipelines.AlbertPretraining,
    pipelines.XLNetPretraining,
    pipelines.GptPretraining,
    pipelines.ElmoPretraining,
    pipelines.Word2Vec,
    pipelines.Translation,
    pipelines.TextClassifier,
    pipelines.TokenTagger,
    pipelines.SpanAnswerer,
]
PREDICTION_METHODS = (
    "fill_mask",
    "classify",
    "tag",
    "generate",
    "translate",
    "most_similar",
    "answer",
    "embed",
)


def flags(**values):
    defaults = dict(seq_len=128, seed=0, objective=None, reuse_len=None, mem_len=None)
    return argparse.Namespace(**{**defaults, **values})


def test_the_command_lines_model_names_are_the_ones_the_families_declare():
    from lmpipe.cli.flags import MODEL_NAMES
    from lmpipe.cli.predict import PREDICTIONS

    assert MODEL_NAMES == tuple(MODELS) == ("bert", "albert", "xlnet", "gpt", "elmo")
    assert list(PRETRAINING) == [*MODEL_NAMES, "word2vec"]
    # Every prediction a family declares is one the command knows how to run and print.
    assert {name for family in PREDICTING for name in family.predictions} <= set(PREDICTIONS)


@pytest.mark.parametrize("family", PREDICTING, ids=lambda family: family.__name__)
def test_a_family_declares_exactly_the_predictions_it_has(family):
    had = [name for name in PREDICTION_METHODS if callable(getattr(family, name, None))]
    assert list(family.predictions) == had


def test_declared_defaults_of_the_families():
    declared = {name: family.command_line for name, family in PRETRAINING.items()}
    assert {name: d.default_preset for name, d in declared.items()} == {
        "bert": "mini",
        "albert": "tiny",
        "xlnet": "tiny",
        "gpt": "tiny",
        "elmo": "tiny",
        "word2vec": None,
    }
    assert [d.tokenizer for d in declared.values()] == [
        "wordpiece",
        "sentencepiece",
        "sentencepiece",
        "bpe",
        "wordpiece",
        "wordpiece",
    ]
    assert [n for n, d in declared.items() if d.checkpoint_type] == [
        "bert",
        "albert",
        "xlnet",
        "gpt",
    ]
    assert declared["gpt"].checkpoint_type == "gpt2"
    assert [d.published_preset for d in declared.values()][:5] == [
        "base",
        "base",
        "base",
        "small",
        "small",
    ]


def test_xlnet_on_the_command_line_hands_on_half_its_tokens_unless_told():
    options = pipelines.XLNetPretraining.command_line.options
    assert options(flags(seq_len=128)) == dict(seq_len=128, seed=0, reuse_len=64, mem_len=None)
    assert options(flags(seq_len=128, reuse_len=0))["reuse_len"] is None
    assert options(flags(seq_len=64, reuse_len=16, mem_len=32))["mem_len"] == 32


@pytest.mark.parametrize("seq_len, positions", [(32, 128), (300, 300), (4096, 512)])
def test_a_bert_preset_gets_the_pipelines_position_table(seq_len, positions):
    declared = pipelines.BertPretraining.command_line
    config = declared.preset_config("tiny", vocabulary_size=50, seq_len=seq_len)
    assert (config.max_sequence_length, config.vocabulary_size) == (positions, 50)
    assert config.hidden_dim == 128  # the preset's sizes
    # The same rule as the pipeline's own default model.
    tokenizer = WordPieceTokenizer([*SPECIAL_TOKENS, "a"])
    pipe = pipelines.BertPretraining(tokenizer, seq_len=min(seq_len, 512))
    assert pipe.default_config().max_sequence_length == min(positions, 512)
    gpt = pipelines.GptPretraining.command_line.preset_config("tiny", 50, seq_len=1000)
    assert gpt.max_sequence_length == 128  # the preset's: a longer seq_len is refused later


def test_a_family_declares_what_lmpipe_evaluate_reads():
    from lmpipe.cli.evaluate import READERS

    declared = {family.__name__: family.evaluation_data for family in PREDICTING}
    assert declared == {
        "BertPretraining": "corpus",
        "AlbertPretraining": "corpus",
        "XLNetPretraining": "corpus",
        "GptPretraining": "corpus",
        "ElmoPretraining": "corpus",
        "Word2Vec": "corpus",
        "Translation": "pairs",
        "TextClassifier": "labelled",
        "TokenTagger": "tagged",
        "SpanAnswerer": "questions",
    }
    assert set(declared.values()) <= set(READERS)
