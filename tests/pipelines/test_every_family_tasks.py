"""The scenario of test_every_family.py for the task families (translation, fine-tuned
classifier and span answerer, word2vec): in a file of its own so that the suite's two
processes share the scenario's work."""

import pytest

from tests.pipelines import test_every_family as every_family

# The module-scoped fixtures the scenario takes, made again for this module.
corpus = every_family.corpus
tokenizer = every_family.tokenizer
paper_tokenizers = every_family.paper_tokenizers
translation_tokenizer = every_family.translation_tokenizer


@pytest.mark.parametrize("family", every_family.TASK_FAMILIES)
def test_every_task_family_goes_through_the_same_scenario(
    family, corpus, tokenizer, translation_tokenizer, paper_tokenizers, tmp_path, capsys
):
    every_family.scenario(
        family, corpus, tokenizer, translation_tokenizer, paper_tokenizers, tmp_path, capsys
    )
