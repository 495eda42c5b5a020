"""lmpipe.tokenizers.registry: which learner each class's `train` runs, and which class reads a
folder."""

import pytest

from lmpipe.tokenizers import registry
from lmpipe.tokenizers.byte_pair import BytePairTokenizer
from lmpipe.tokenizers.byte_pair_trainer import learn_files
from lmpipe.tokenizers.sentence_piece import SentencePieceTokenizer
from lmpipe.tokenizers.sentence_piece_trainer import learn_model
from lmpipe.tokenizers.tokenizer import Tokenizer
from lmpipe.tokenizers.wordpiece import WordPieceTokenizer
from lmpipe.tokenizers.wordpiece_trainer import learn_vocabulary

TEXTS = ["the cat sat on the mat", "a dog and a cat", "the mat was red"] * 5


def test_each_class_trains_with_its_own_learner():
    assert WordPieceTokenizer.learner() is learn_vocabulary
    assert SentencePieceTokenizer.learner() is learn_model
    assert BytePairTokenizer.learner() is learn_files
    assert set(registry.LEARNERS) == {WordPieceTokenizer, SentencePieceTokenizer, BytePairTokenizer}


def test_a_subclass_trains_with_its_parents_learner_and_is_made_as_itself():
    class Cased(WordPieceTokenizer):
        pass

    tokenizer = Cased.train(TEXTS, vocab_size=120, lower_case=False)
    assert type(tokenizer) is Cased
    assert tokenizer.vocabulary[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert tokenizer.tokenize("the cat").numpy().tolist() == [
        tokenizer.token_id("the"),
        tokenizer.token_id("cat"),
    ]


def test_a_class_without_a_learner_says_so():
    class Unlearned(Tokenizer):
        FORMAT = "tests.Unlearned"

    with pytest.raises(NotImplementedError, match="Unlearned has no vocabulary learner"):
        Unlearned.learner()


def test_load_tokenizer_reads_the_class_that_saved(tmp_path):
    saved = WordPieceTokenizer.train(TEXTS, vocab_size=120)
    saved.save(tmp_path)
    loaded = registry.load_tokenizer(tmp_path)
    assert type(loaded) is WordPieceTokenizer
    assert loaded.vocabulary == saved.vocabulary


def test_load_tokenizer_names_the_formats_it_reads(tmp_path):
    (tmp_path / "tokenizer.json").write_text('{"format": "other"}')
    with pytest.raises(ValueError, match="has format 'other'; lmpipe reads lmpipe.BytePair"):
        registry.load_tokenizer(tmp_path)


def test_pretrained_tokenizer_names_the_files_it_looks_for(tmp_path):
    with pytest.raises(ValueError, match="vocab.json and merges.txt .GPT-2., spiece.model"):
        registry.pretrained_tokenizer(tmp_path)
