"""Training recipes: the settings a family trains best with under a budget, by name.

A recipe changes the defaults of `lmpipe pretrain` (`--recipe NAME`); every flag given on the
command line still wins over it. From Python, a recipe's fields are what to pass:

>>> from lmpipe.pipelines.bert_pretraining import BertPretraining
>>> fast = BertPretraining.command_line.recipes["fast"]
>>> fast.preset, fast.config["dropout"], fast.vocab_size
('tiny', 0.0, 2000)

and `BertPretraining(tokenizer, config=BertConfig.tiny(**fast.config, ...))`,
`pipe.fit(corpus, learning_rate=fast.learning_rate, ...)`, with a tokenizer of
`fast.vocab_size` tokens.
"""

import dataclasses


@dataclasses.dataclass(frozen=True)
class Recipe:
    """A family's named choice of defaults.

    Attributes:
        name: what `--recipe` calls it.
        preset: the model size (a preset of the family's configuration); None: the family's
            default preset.
        config: fields of the model configuration over the preset's.
        learning_rate: the peak learning rate.
        vocab_size: the vocabulary to learn.
    """

    name: str
    preset: str = None
    config: dict = dataclasses.field(default_factory=dict)
    learning_rate: float = None
    vocab_size: int = None


FAST_BERT = Recipe(
    "fast",
    preset="tiny",
    config={"dropout": 0.0, "attention_dropout": 0.0},
    learning_rate=1e-3,
    vocab_size=2000,
)
"""BERT for small budgets, after the cramming line of work (Geiping & Goldstein, 2022; Izsak
et al., 2021): of the choices they list, those that measured better on the bundled corpus
(docs/pretraining.md, "Recipes", has each choice's effect)."""
