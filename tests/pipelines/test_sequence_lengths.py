"""Sequence lengths: beyond the model's positions they are clear errors before any work, and
training and export accept the same lengths (they pack texts the same way)."""

import keras
import pytest
import tensorflow as tf

from lmpipe.models.bert import BertConfig, bert
from lmpipe.pipelines.bert_pretraining import AlbertPretraining, BertPretraining
from lmpipe.pipelines.gpt_pretraining import GptPretraining
from lmpipe.pipelines.xlnet_pretraining import XLNetPretraining
from lmpipe.serving.export import ServingModule
from lmpipe.tokenizers.wordpiece import WordPieceTokenizer

VOCABULARY = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "to", "be", "or", "not", "."]
HUGE = 10**9


@pytest.fixture(scope="module")
def tokenizer():
    return WordPieceTokenizer(VOCABULARY)


def test_a_huge_seq_len_is_refused_when_the_pipeline_is_made(tokenizer):
    # The default models no longer grow a position table as long as any seq_len given.
    with pytest.raises(ValueError, match=r"at most 512 \(the model's max_sequence_length\)"):
        BertPretraining(tokenizer, seq_len=HUGE)
    with pytest.raises(ValueError, match=r"at most 512 \(the model's max_sequence_length\)"):
        AlbertPretraining(tokenizer, seq_len=HUGE)
    with pytest.raises(ValueError, match=r"max_sequence_length \(1024\)"):
        GptPretraining(tokenizer, seq_len=HUGE)
    # XLNet's positions are relative: its bound is the longest example its data can order.
    with pytest.raises(ValueError, match=r"at most 16384 \(the longest XLNet example"):
        XLNetPretraining(tokenizer, seq_len=HUGE)
    assert BertPretraining(tokenizer, seq_len=512).config.max_sequence_length == 512
    assert BertPretraining(tokenizer, seq_len=64).config.max_sequence_length == 128


def encoder_of(tokenizer, positions):
    keras.utils.set_random_seed(0)
    config = BertConfig.tiny(
        vocabulary_size=tokenizer.vocabulary_size,
        hidden_dim=8,
        num_layers=1,
        num_heads=2,
        intermediate_dim=16,
        max_sequence_length=positions,
    )
    return config, bert(config)


def accepts(make):
    try:
        make()
    except ValueError as error:
        assert "seq_len" in str(error), error
        return False
    return True


def test_training_and_export_accept_the_same_lengths(tokenizer):
    config, encoder = encoder_of(tokenizer, positions=16)
    for seq_len in (2, 3, 4, 5, 6, 16, 17, HUGE):
        for objective, pairs in (("nsp", True), ("mlm", False)):
            trains = accepts(
                lambda: BertPretraining(tokenizer, config, seq_len=seq_len, objective=objective)  # noqa: B023
            )
            serves = accepts(
                lambda: ServingModule(encoder, tokenizer, seq_len, pairs=pairs)  # noqa: B023
            )
            assert trains == serves, (seq_len, objective)
            assert trains == ((5 if pairs else 3) <= seq_len <= 16), (seq_len, objective)


def test_xlnet_training_and_export_accept_the_same_lengths(tokenizer):
    def model(features):  # relative positions: no table bounds the length
        return {"scores": tf.cast(features["padding_mask"], tf.float32)}

    for seq_len in (4, 5, 16384, 16385, HUGE):
        trains = accepts(lambda: XLNetPretraining(tokenizer, seq_len=seq_len))  # noqa: B023
        serves = accepts(
            lambda: ServingModule(model, tokenizer, seq_len, pairs=True, layout="xlnet")  # noqa: B023
        )
        assert trains == serves == (5 <= seq_len <= 16384), seq_len
