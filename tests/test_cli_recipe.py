"""`lmpipe pretrain --recipe`: a family's named defaults, which the flags given still override."""

import json
import re

import pytest

from tests.test_cli import FitReachedError, small_run


def pipeline_at_fit(monkeypatch, arguments):
    """Run `lmpipe pretrain bert ARGUMENTS` up to `fit`: `(pipeline, fit's keywords)`."""
    from lmpipe.cli.main import main
    from lmpipe.pipelines import BertPretraining

    calls = []

    def fit(self, corpus, **keywords):
        calls.append((self, keywords))
        raise FitReachedError

    monkeypatch.setattr(BertPretraining, "fit", fit)
    with pytest.raises(FitReachedError):
        main(["pretrain", "bert", "--debug", *arguments])
    return calls[0]


def test_the_fast_recipe_sets_the_model_and_the_learning_rate(tmp_path, monkeypatch):
    from lmpipe.pipelines import BertPretraining

    recipe = BertPretraining.command_line.recipes["fast"]
    common, _ = small_run(tmp_path)
    pipe, fit = pipeline_at_fit(monkeypatch, [*common, "--recipe", "fast"])
    assert (pipe.config.dropout, pipe.config.attention_dropout) == (0.0, 0.0)
    assert fit["learning_rate"] == recipe.learning_rate == 1e-3
    assert recipe.preset == "tiny"  # BERT-tiny: 2 layers, hidden 128, 2 heads
    assert (pipe.config.num_layers, pipe.config.hidden_dim, pipe.config.num_heads) == (2, 128, 2)
    assert pipe.config.intermediate_dim == 512  # the preset's other sizes stay
    assert pipe.options.objective == "nsp"  # what the recipe does not set stays
    # Without the recipe: the paper's BERT, at the family's default size (BERT-mini).
    pipe, fit = pipeline_at_fit(monkeypatch, common)
    assert (pipe.config.dropout, pipe.config.attention_dropout) == (0.1, 0.1)
    assert fit["learning_rate"] == 5e-4
    assert (pipe.config.num_layers, pipe.config.hidden_dim) == (4, 256)


def test_flags_given_win_over_the_recipe(tmp_path, monkeypatch):
    common, _ = small_run(tmp_path)
    arguments = [*common, "--recipe", "fast", "--objective", "mlm", "--learning-rate", "3e-4"]
    pipe, fit = pipeline_at_fit(monkeypatch, [*arguments, "--preset", "mini"])
    assert (pipe.options.objective, fit["learning_rate"]) == ("mlm", 3e-4)
    assert (pipe.config.num_layers, pipe.config.hidden_dim) == (4, 256)  # --preset mini
    assert pipe.config.dropout == 0.0


def test_the_recipe_chooses_the_vocabulary_learned_unless_it_is_given(tmp_path, monkeypatch):
    from lmpipe.pipelines import BertPretraining

    recipe = BertPretraining.command_line.recipes["fast"]
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("to be or not .\nto be .\n\nnot to be .\nor not .\n" * 3)
    for extra, expected in (([], recipe.vocab_size), (["--vocab-size", "120"], 120)):
        out = tmp_path / f"run{len(extra)}"
        arguments = ["--out", str(out), "--corpus", str(corpus), "--recipe", "fast", *extra]
        pipeline_at_fit(monkeypatch, arguments)
        source = json.loads((out / "tokenizer" / "source.json").read_text())
        assert source["vocab_size"] == expected


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["gpt", "--recipe", "fast"], "--recipe fast is not a recipe of gpt; recipes: bert (fast)"),
        (["bert", "--recipe", "slow"], "--recipe slow is not a recipe of bert"),
        (["word2vec", "--recipe", "fast"], "--recipe is not for word2vec"),
        (
            ["bert", "--recipe", "fast", "--pretrained", "{folder}"],
            "--recipe cannot go with --pretrained",
        ),
    ],
)
def test_a_recipe_the_family_does_not_have_is_refused_before_any_work(tmp_path, arguments, message):
    from lmpipe.cli.main import main

    (tmp_path / "config.json").write_text('{"model_type": "bert"}')
    arguments = [argument.replace("{folder}", str(tmp_path)) for argument in arguments]
    with pytest.raises(SystemExit, match=re.escape(message)):
        main(["pretrain", arguments[0], "--out", str(tmp_path / "out"), *arguments[1:]])
    assert not (tmp_path / "out").exists()
