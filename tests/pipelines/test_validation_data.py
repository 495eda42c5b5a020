"""`fit` refuses validation data that makes no batch before anything trains (it would end the
first epoch without the `val_` metrics that keep the best epoch)."""

import pytest

from lmpipe.datasets import TextCorpus, WordPieceTokenizer
from lmpipe.models.gpt import GptConfig
from lmpipe.pipelines import GptPretraining


def test_validation_that_makes_no_batch_is_refused_before_training(tmp_path):
    sentences = ["a good film .", "a bad plot .", "the cast is great .", "poor music ."]
    tokenizer = WordPieceTokenizer.train(sentences * 4, vocab_size=120)
    config = GptConfig.tiny(vocabulary_size=tokenizer.vocabulary_size, max_sequence_length=16)
    pipe = GptPretraining(tokenizer, config, seq_len=16, seed=0)
    corpus = TextCorpus.from_documents([sentences] * 8)
    # One document of 4 short sentences packs into 2 rows of 16 tokens: no batch of 8.
    validation = TextCorpus.from_documents([sentences])
    assert pipe.steps_in_one_pass(validation, 1) == 2
    checkpoints = tmp_path / "checkpoints"
    with pytest.raises(ValueError, match=r"`validation` makes no batch of `batch_size`=8 "):
        pipe.fit(
            corpus,
            batch_size=8,
            steps_per_epoch=1,
            validation=validation,
            checkpoint_dir=str(checkpoints),
            verbose=0,
        )
    assert pipe.model is None and not checkpoints.exists()
    # Enough documents for one batch: it trains.
    history = pipe.fit(corpus, batch_size=8, steps_per_epoch=1, validation=corpus, verbose=0)
    assert "val_loss" in history.history
