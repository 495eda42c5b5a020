"""BertPretraining.fill_mask: the masked LM's predictions for `[MASK]` marks in raw text."""

import numpy as np
import pytest

from lmpipe.datasets import TextCorpus, WordPieceTokenizer
from lmpipe.models import AlbertConfig, BertConfig
from lmpipe.pipelines import AlbertPretraining, BertPretraining

SENTENCES = [
    "the cat sat on the mat .",
    "a dog ran in the park .",
    "my bird sang at the window .",
    "your fish swam under the bridge .",
]


@pytest.fixture(scope="module")
def tokenizer():
    return WordPieceTokenizer.train(SENTENCES * 4, vocab_size=120)


def tiny(tokenizer, cls=BertPretraining, seed=0, **sizes):
    sizes = dict(
        vocabulary_size=tokenizer.vocabulary_size,
        hidden_dim=64,
        num_heads=2,
        intermediate_dim=128,
        max_sequence_length=16,
        **sizes,
    )
    config = AlbertConfig.tiny(**sizes) if cls is AlbertPretraining else BertConfig.tiny(**sizes)
    return cls(tokenizer, config, seq_len=16, objective="mlm", seed=seed)


def test_fill_mask_learns_the_word_its_corpus_always_puts_there(tokenizer):
    # One sentence a document: in each, the subject decides the verb and the place.
    corpus = TextCorpus.from_documents([[sentence] for sentence in SENTENCES] * 16)
    pipe = tiny(tokenizer, dropout=0.0, attention_dropout=0.0)
    pipe.fit(corpus, batch_size=16, epochs=1, steps_per_epoch=150, learning_rate=1e-2, verbose=0)
    texts = [
        "the cat [MASK] on the mat .",
        "a [MASK] ran in the [MASK] .",
        "my bird [MASK] at the window .",
        "your fish swam under the [MASK] .",
    ]
    filled = pipe.fill_mask(texts, top_k=3)
    assert [len(masks) for masks in filled] == [1, 2, 1, 1]
    best = [[predictions[0] for predictions in masks] for masks in filled]
    assert [[p["token"] for p in masks] for masks in best] == [
        ["sat"],
        ["dog", "park"],
        ["sang"],
        ["bridge"],
    ]
    assert min(p["score"] for masks in best for p in masks) > 0.3
    for masks in filled:
        for predictions in masks:
            scores = [p["score"] for p in predictions]
            assert scores == sorted(scores, reverse=True) and sum(scores) <= 1 + 1e-6


@pytest.mark.parametrize("cls", [BertPretraining, AlbertPretraining])
def test_fill_mask_scores_are_the_heads_softmax_on_the_packed_text(tokenizer, cls):
    pipe = tiny(tokenizer, cls)
    pipe.model = pipe.build_model()
    texts = ["[MASK] cat sat on the [MASK]", "the dog ran [MASK] ."]
    filled = pipe.fill_mask(texts, top_k=4, batch_size=1)
    never = {tokenizer.pad_id, tokenizer.cls_id, tokenizer.sep_id, tokenizer.mask_id}
    for text, masks in zip(texts, filled, strict=True):
        parts = [tokenizer.tokenize(part).numpy().tolist() for part in text.split("[MASK]")]
        ids, positions = [tokenizer.cls_id], []
        for index, part in enumerate(parts):
            if index:
                positions.append(len(ids))
                ids.append(tokenizer.mask_id)
            ids += part
        ids.append(tokenizer.sep_id)
        features = {
            "token_ids": np.array([ids], np.int32),
            "segment_ids": np.zeros((1, len(ids)), np.int32),
            "padding_mask": np.ones((1, len(ids)), np.int32),
            "mask_positions": np.array([positions], np.int32),
        }
        logits = np.asarray(pipe.model(features)["mlm_logits"], np.float64)[0]
        probabilities = np.exp(logits - logits.max(-1, keepdims=True))
        probabilities /= probabilities.sum(-1, keepdims=True)
        assert len(masks) == len(positions)
        for predictions, expected in zip(masks, probabilities, strict=True):
            ranked = [i for i in np.argsort(-expected, kind="stable") if i not in never][:4]
            assert [p["token"] for p in predictions] == [
                tokenizer.id_to_token(int(i)) for i in ranked
            ]
            np.testing.assert_allclose(
                [p["score"] for p in predictions], expected[ranked], rtol=1e-4, atol=1e-7
            )
    # Batched with padding, the same predictions as one text at a time.
    together = pipe.fill_mask(texts, top_k=4, batch_size=2)
    for alone, batched in zip(filled, together, strict=True):
        for a, b in zip(alone, batched, strict=True):
            assert [p["token"] for p in a] == [p["token"] for p in b]
            np.testing.assert_allclose(
                [p["score"] for p in a], [p["score"] for p in b], rtol=1e-4, atol=1e-6
            )


def test_fill_mask_refuses_texts_it_cannot_fill(tokenizer):
    pipe = tiny(tokenizer)
    with pytest.raises(ValueError, match="has no model yet"):
        pipe.fill_mask(["the [MASK] sat"])
    pipe.model = pipe.build_model()
    with pytest.raises(ValueError, match=r"`texts\[1\]` has no \[MASK\]"):
        pipe.fill_mask(["the [MASK] sat", "the cat sat"])
    with pytest.raises(ValueError, match="single string"):
        pipe.fill_mask("the [MASK] sat")
    with pytest.raises(ValueError, match=r"`texts\[0\]` is 19 tokens long .* seq_len is 16"):
        pipe.fill_mask(["[MASK] " + "cat " * 16])
    with pytest.raises(ValueError, match=r"has 4 \[MASK\]s; .* max_predictions=3"):
        pipe.fill_mask(["[MASK] [MASK] sat on [MASK] [MASK]"])
    with pytest.raises(ValueError, match="`top_k` must be at most"):
        pipe.fill_mask(["the [MASK] sat"], top_k=tokenizer.vocabulary_size)
    with pytest.raises(ValueError, match="`top_k` must be a positive integer"):
        pipe.fill_mask(["the [MASK] sat"], top_k=0)


def test_baselines_are_the_most_frequent_token_and_unigram_on_evaluates_batches(tokenizer):
    import collections
    import math

    corpus = TextCorpus.from_documents([[sentence] for sentence in SENTENCES] * 16)
    pipe = BertPretraining(
        tokenizer,
        BertConfig.tiny(
            vocabulary_size=tokenizer.vocabulary_size,
            hidden_dim=16,
            num_heads=2,
            intermediate_dim=32,
            max_sequence_length=16,
        ),
        seq_len=16,
        seed=0,
    )
    pipe.model = pipe.build_model()
    baselines = pipe.baselines(corpus, batch_size=8, steps=3)
    targets = collections.Counter()
    batches = pipe.evaluation_batches(corpus, 8, 3).take(3)
    for _, labels in batches.as_numpy_iterator():
        targets.update(labels["mask_ids"][labels["mask_weights"] > 0].tolist())
    total = sum(targets.values())
    entropy = -sum(n / total * math.log(n / total) for n in targets.values())
    assert baselines == pytest.approx(
        {
            "mlm_accuracy": max(targets.values()) / total,
            "mlm_perplexity": math.exp(entropy),
            "pair_accuracy": 0.5,
        }
    )
    results = pipe.evaluate(corpus, batch_size=8, steps=3)
    assert results["mlm_perplexity"] == pytest.approx(math.exp(results["mlm_loss"]))


def test_the_main_job_shows_fill_mask_on_sentences_of_its_corpus(tokenizer, capsys):
    from lmpipe.cli.pretrain import fill_mask_examples

    corpus = TextCorpus.from_documents([SENTENCES, SENTENCES[::-1], SENTENCES[1:]])
    pipe = tiny(tokenizer)
    pipe.model = pipe.build_model()
    fill_mask_examples(pipe, corpus)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 6 and all("[MASK]" in line for line in lines)
    assert lines[0] == "  my bird sang at the [MASK] ."  # the longest one-token word
    assert lines[1].startswith("    [MASK] = window; the model: ")


def test_the_fill_mask_examples_skip_sentences_longer_than_seq_len(tokenizer, capsys):
    from lmpipe.cli.pretrain import fill_mask_examples

    long = " ".join(SENTENCES * 3)  # 28 words: more than seq_len 16
    corpus = TextCorpus.from_documents([[long], [SENTENCES[0]]])
    pipe = tiny(tokenizer)
    pipe.model = pipe.build_model()
    fill_mask_examples(pipe, corpus)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "  [MASK] cat sat on the mat ." and len(lines) == 2  # the first longest
