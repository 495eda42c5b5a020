import pathlib
import re

import keras
import numpy as np
import pytest
import sacrebleu
import tensorflow as tf

from lmpipe.datasets.corpora.parallel_text import ParallelCorpus
from lmpipe.datasets.examples.seq2seq_examples import TARGET_TOKENS
from lmpipe.models.rnn_seq2seq import RnnSeq2SeqConfig
from lmpipe.models.samplers import beam_search, greedy_search
from lmpipe.models.seq2seq_trainer import Seq2SeqTrainer, label_smoothed_cross_entropy
from lmpipe.models.transformer import TransformerConfig
from lmpipe.pipelines.translation import _SPACE_AFTER, _SPACE_BEFORE, Translation
from lmpipe.tokenizers.wordpiece import SPECIAL_TOKENS, WordPieceTokenizer

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
MAX_LEN = 24


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    """Short verse pairs of Ruth and Jonah (English -> Spanish), written to a TSV file.

    fixtures/ruth_jonah.tsv is `ParallelCorpus.bible(books=["Ruth", "Jonah"]).to_tsv(...)`
    (World English Bible and Reina-Valera 1909, both public domain), kept in the repository so
    the tests run where the Debian SWORD modules are not installed.
    """
    bible = ParallelCorpus.from_tsv(str(FIXTURES / "ruth_jonah.tsv"))
    short = [(s, t) for s, t in bible if len(s.split()) <= 14 and len(t.split()) <= 14]
    path = tmp_path_factory.mktemp("parallel") / "ruth_jonah.tsv"
    ParallelCorpus.from_pairs(short).to_tsv(path)
    return str(path)


@pytest.fixture(scope="module")
def tokenizer(pairs):
    corpus = ParallelCorpus.from_tsv(pairs)
    return WordPieceTokenizer.train(
        list(corpus.sources) + list(corpus.targets),
        vocab_size=250,
        lower_case=False,
        reserved_tokens=TARGET_TOKENS,
    )


TINY_TRANSFORMER = TransformerConfig.tiny(
    hidden_dim=16,
    num_heads=2,
    intermediate_dim=32,
    num_encoder_layers=1,
    num_decoder_layers=1,
    dropout=0.0,
)


def _rnn(**choices):
    return dict(
        config=RnnSeq2SeqConfig.tiny(embedding_dim=16, hidden_dim=16, dropout=0.0, **choices)
    )


def test_label_smoothing_matches_keras_categorical_cross_entropy():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(2, 3, 7)).astype("float32")
    targets = rng.integers(0, 7, size=(2, 3))
    loss, nll = label_smoothed_cross_entropy(targets, logits, 0.1)
    expected = keras.losses.categorical_crossentropy(
        keras.ops.one_hot(targets, 7), logits, from_logits=True, label_smoothing=0.1
    )
    np.testing.assert_allclose(loss, expected, rtol=1e-5)
    plain = keras.losses.sparse_categorical_crossentropy(targets, logits, from_logits=True)
    np.testing.assert_allclose(nll, plain, rtol=1e-5)


def test_trainer_loss_is_the_weighted_mean_over_real_tokens():
    trainer = Seq2SeqTrainer(TINY_TRANSFORMER.__class__.tiny(vocabulary_size=30), 0.0)
    logits = np.random.default_rng(1).normal(size=(2, 4, 30)).astype("float32")
    targets = np.array([[3, 4, 5, 0], [6, 0, 0, 0]])
    weights = np.array([[1, 1, 1, 0], [1, 0, 0, 0]], "float32")
    loss = trainer.compute_loss(y={"target_ids": targets, "weights": weights}, y_pred=logits)
    per_token = keras.losses.sparse_categorical_crossentropy(targets, logits, from_logits=True)
    expected = float(np.sum(per_token * weights) / weights.sum())
    np.testing.assert_allclose(float(loss), expected, rtol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize(
    "options",
    [
        dict(config=TINY_TRANSFORMER),
        _rnn(form="attention", attention_score="additive"),
        _rnn(form="attention", attention_score="dot"),
        _rnn(form="attention", attention_score="general"),
        _rnn(form="plain"),
        _rnn(form="context", cell="lstm"),
    ],
    ids=["transformer", "additive", "dot", "general", "plain", "context-lstm"],
)
def test_training_on_bible_verses_lowers_the_loss(pairs, tokenizer, options):
    is_transformer = isinstance(options["config"], TransformerConfig)
    pipe = Translation(
        source_tokenizer=tokenizer,
        max_source_len=MAX_LEN,
        max_target_len=MAX_LEN,
        bucket_boundaries=[],
        **options,
    )
    history = pipe.fit(
        pairs,
        batch_size=8,
        epochs=3,
        steps_per_epoch=4,
        warmup_steps=4,
        learning_rate=0.2 if is_transformer else 1e-2,
        verbose=0,
    )
    losses = history.history["nll"]
    assert np.all(np.isfinite(losses))
    # The first epoch starts near ln(V) = 5.5; twelve steps learn the frequent tokens.
    assert losses[-1] < losses[0] - 0.3, losses


@pytest.fixture(scope="module")
def trained(pairs, tokenizer):
    pipe = Translation(
        config=TINY_TRANSFORMER,
        source_tokenizer=tokenizer,
        max_source_len=MAX_LEN,
        max_target_len=MAX_LEN,
    )
    pipe.fit(
        pairs,
        batch_size=8,
        epochs=1,
        steps_per_epoch=6,
        warmup_steps=3,
        learning_rate=0.2,
        verbose=0,
    )
    return pipe


@pytest.mark.slow
def test_evaluate_bleu_is_sacrebleus_on_the_same_strings(trained, pairs):
    corpus = ParallelCorpus.from_tsv(pairs)[:6]
    result = trained.evaluate(corpus, beam_width=2, max_length=8)
    translations = trained.translate(corpus.sources, beam_width=2, max_length=8)
    expected = sacrebleu.corpus_bleu(translations, [list(corpus.targets)]).score
    assert result["bleu"] == pytest.approx(expected)
    assert np.isfinite(result["loss"]) and 0.0 <= result["token_accuracy"] <= 1.0


@pytest.mark.slow
def test_save_and_load_translate_alike(trained, pairs, tmp_path):
    sources = list(ParallelCorpus.from_tsv(pairs).sources[:3]) + [""]
    expected = trained.translate(sources, beam_width=2, max_length=8)
    assert expected[-1] == ""
    trained.save(tmp_path / "pipe")
    loaded = Translation.load(tmp_path / "pipe")
    assert loaded.translate(sources, beam_width=2, max_length=8) == expected


@pytest.mark.slow
def test_export_serves_the_same_translations_through_the_tf1_loader(trained, pairs, tmp_path):
    from lmpipe.serving.emulator.compat import ServingProcess

    sources = list(ParallelCorpus.from_tsv(pairs).sources[:3])
    expected = trained.translate(sources, beam_width=2, max_length=8)
    path = trained.export(tmp_path / "serving", beam_width=2, max_length=8, warmup_texts=False)
    with ServingProcess(path) as server:
        assert "tensorflow_text" in server.modules and "lmpipe" not in server.modules
        outputs = server.predict("serving_default", {"text": np.array(sources, dtype=object)})
    assert [t.decode("utf-8") for t in outputs["translation"]] == expected


def _eos_test_inputs(pipe, pairs):
    """The first 8 source verses, their encoder ids and mask, and the search settings."""
    texts = list(ParallelCorpus.from_tsv(pairs).sources[:8])
    pieces = pipe.source_tokenizer.tokenize(tf.constant(texts))[:, :MAX_LEN]
    encoder_ids = pieces.to_tensor()
    encoder_mask = tf.sequence_mask(pieces.row_lengths(), tf.shape(encoder_ids)[1])
    search = dict(
        bos_id=pipe.bos_id, eos_id=pipe.eos_id, max_length=10, pad_id=pipe.target_tokenizer.pad_id
    )
    return texts, encoder_ids, encoder_mask, search


def _early_ends(pipe, hypotheses, length):
    """For each text, how many of its hypotheses `[N, k, length]` hold an EOS before the end."""
    return [
        sum(1 for tokens in text if np.any(tokens[: length - 1] == pipe.eos_id))
        for text in np.asarray(hypotheses)
    ]


@pytest.fixture(scope="module")
def eos_prone(tokenizer, pairs):
    """An untrained tiny Transformer whose last LayerNorm bias raises the [EOS] logit (and a
    little the others) just enough that, for most source verses, beams of 2 and 3 hold
    hypotheses ending early: EOS extensions then meet the beams at every rank.

    The raise is the smallest on a grid that does it, found on the model rather than fixed,
    so that the test does not hang on the random initial weights."""
    keras.utils.set_random_seed(0)
    pipe = Translation(
        config=TINY_TRANSFORMER,
        source_tokenizer=tokenizer,
        max_source_len=MAX_LEN,
        max_target_len=MAX_LEN,
    )
    pipe.model = pipe.build_model()
    seq2seq = pipe.model.seq2seq
    eos_embedding = keras.ops.convert_to_numpy(seq2seq.target_embedding.embeddings)[pipe.eos_id]
    norm = seq2seq.decoder_blocks[-1].output_layer_norm  # post-LN: its output meets the head
    beta = keras.ops.convert_to_numpy(norm.beta)
    texts, encoder_ids, encoder_mask, search = _eos_test_inputs(pipe, pairs)
    for boost in np.arange(3.0, 12.0, 0.5):
        norm.beta.assign(beta + boost * eos_embedding / (eos_embedding @ eos_embedding))
        widths_met = 0
        for beam_width in (2, 3):
            hypotheses = beam_search(
                seq2seq, encoder_ids, encoder_mask, beam_width=beam_width, return_all=True, **search
            ).token_ids
            early = _early_ends(pipe, hypotheses, search["max_length"])
            widths_met += sum(count > 0 for count in early) >= len(texts) // 2
        if widths_met == 2:
            return pipe
    raise AssertionError("no [EOS] raise up to 12 makes the beams end early")


def _text_before_eos(pipe, ids):
    """The text of the tokens before the first [EOS] of `ids`, spaced as `translate` does."""
    ends = np.flatnonzero(ids == pipe.eos_id)
    kept = ids[: ends[0]] if len(ends) else ids
    text = pipe.target_tokenizer.detokenize(tf.constant([kept], tf.int32))[0]
    text = re.sub(_SPACE_BEFORE, r"\1", text.numpy().decode("utf-8"))
    return re.sub(_SPACE_AFTER, r"\1", text)


@pytest.mark.parametrize("beam_width", [1, 2, 3])
def test_translations_end_at_the_first_eos(eos_prone, pairs, beam_width):
    pipe = eos_prone
    texts, encoder_ids, encoder_mask, search = _eos_test_inputs(pipe, pairs)
    length = search["max_length"]
    seq2seq = pipe.model.seq2seq
    if beam_width == 1:
        best = greedy_search(seq2seq, encoder_ids, encoder_mask, **search).token_ids
        hypotheses = np.asarray(best)[:, None, :]
    else:
        best = beam_search(
            seq2seq, encoder_ids, encoder_mask, beam_width=beam_width, **search
        ).token_ids
        hypotheses = beam_search(
            seq2seq, encoder_ids, encoder_mask, beam_width=beam_width, return_all=True, **search
        ).token_ids
    # Most verses have a hypothesis that ends early (what the fixture's model is made for).
    assert sum(count > 0 for count in _early_ends(pipe, hypotheses, length)) >= len(texts) // 2
    for tokens in np.asarray(hypotheses).reshape(-1, length):
        ends = np.flatnonzero(tokens == pipe.eos_id)
        if len(ends):
            assert np.all(tokens[ends[0] + 1 :] == search["pad_id"]), tokens
    translations = pipe.translate(texts, beam_width=beam_width, max_length=length)
    assert translations == [_text_before_eos(pipe, tokens) for tokens in np.asarray(best)]


def test_bad_arguments_are_rejected():
    no_bos = WordPieceTokenizer([*SPECIAL_TOKENS, "[EOS]", "a"])
    with pytest.raises(ValueError, match=r"lacks \[BOS\]"):
        Translation(source_tokenizer=no_bos)
    with pytest.raises(ValueError, match="arch"):
        Translation(arch="lstm")
    with pytest.raises(ValueError, match="needs an `attention` score"):
        Translation(arch="rnn", attention=None, form="attention")
    with pytest.raises(ValueError, match="pass attention=None"):
        Translation(arch="rnn", form="plain")
    assert Translation(arch="rnn", attention=None).options.form == "context"
    assert Translation(arch="rnn", attention=None, form="plain").options.form == "plain"
    with pytest.raises(ValueError, match="no model yet"):
        Translation().translate(["hello"])


@pytest.mark.slow
def test_translate_rejects_a_bad_beam_width(trained):
    with pytest.raises(ValueError, match="beam_width"):
        trained.translate(["hello"], beam_width=0)
