"""lmpipe.tokenizers is the tokenizers' public home; lmpipe.datasets hands on the same
objects under the names it had before."""

import lmpipe


def test_the_tokenizers_load_from_lmpipe_on_first_use():
    assert "tokenizers" in dir(lmpipe)
    assert lmpipe.tokenizers.WordPieceTokenizer.__module__ == "lmpipe.tokenizers.wordpiece"


def test_lmpipe_datasets_hands_on_the_same_tokenizers():
    for name in lmpipe.tokenizers.__all__:
        if name != "pretrained_tokenizer":  # new with lmpipe.tokenizers
            assert getattr(lmpipe.datasets, name) is getattr(lmpipe.tokenizers, name)
