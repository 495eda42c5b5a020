"""Every training command on a corpus as small as a few dozen short reviews: validation is
settled before training starts (enough documents held out to make a batch, or validation off
with one line saying why), and a run never fails once it has begun."""

import os
import random
import re

import pytest

from lmpipe.cli.main import main

# Review words, drawn at random into sentences of 3 to 5.
WORDS = ["good", "bad", "film", "story", "actor", "plot", "music", "scene", "long", "short"]
WORDS += ["funny", "sad", "great", "poor", "movie", "ending", "cast", "script", "camera", "light"]
# The flags: 40 documents of 16 sentences of 3-5 words (about 60 words a document).
FLAGS = ["--vocab-size", "500", "--seq-len", "32", "--batch-size", "8", "--preset", "tiny"]


def reviews(documents=40, seed=0):
    """`documents` short reviews, each 16 sentences of 3 to 5 words, drawn with `seed`."""
    draw = random.Random(seed)
    return [
        [" ".join(draw.choices(WORDS, k=draw.randint(3, 5))) + " ." for _ in range(16)]
        for _ in range(documents)
    ]


def write_corpus(path, documents):
    path.write_text("\n\n".join("\n".join(document) for document in documents) + "\n")
    return path


class FitReachedError(Exception):
    """Raised by the patched `fit`: the test ends the command there."""


def run_until_fit(monkeypatch, model, arguments):
    """Run `lmpipe pretrain MODEL` up to `fit`; return `(pipeline, training corpus,
    validation)` as fit got them."""
    from lmpipe.pipelines import Pipeline

    calls = []

    def fit(self, corpus, validation=None, **keywords):
        calls.append((self, corpus, validation))
        raise FitReachedError

    monkeypatch.setattr(Pipeline, "fit", fit)
    # XLNet's own fit checks its batch size, then calls the base's.
    monkeypatch.setattr("lmpipe.pipelines.XLNetPretraining.fit", fit)
    with pytest.raises(FitReachedError):
        main(["pretrain", model, "--debug", *arguments])
    return calls[0]


@pytest.mark.parametrize("model", ["bert", "albert", "xlnet", "gpt", "elmo"])
def test_every_family_holds_out_enough_short_reviews_to_make_a_validation_batch(
    tmp_path, monkeypatch, capsys, model
):
    from lmpipe.pipelines.pipeline import has_a_batch

    corpus = write_corpus(tmp_path / "reviews.txt", reviews())
    flags = ["--corpus", str(corpus), "--out", str(tmp_path / "run"), *FLAGS]
    pipe, training, validation = run_until_fit(monkeypatch, model, flags)
    printed = capsys.readouterr().out
    pattern = r"Held out (\d+) documents \(\d+ sentences(; 2 made no batch of 8 examples)?\)"
    held = re.search(pattern, printed)
    assert held, printed
    # The default 0.05 of 40 documents, doubled where 2 make no batch of 8 (GPT and ELMo pack
    # a document's 60-odd words into 2 or 3 rows of 32 tokens).
    assert int(held.group(1)) == (4 if model in ("gpt", "elmo") else 2)
    assert bool(held.group(2)) == (model in ("gpt", "elmo"))
    assert len(validation) == int(held.group(1)) and len(training) == 40 - len(validation)
    assert has_a_batch(pipe.evaluation_batches(validation, 8, None))
    # The documents held out are disjoint from the training ones.
    assert not set(map(tuple, validation.iter_documents())) & set(
        map(tuple, training.iter_documents())
    )


def test_validation_is_off_with_a_note_when_a_quarter_of_the_corpus_makes_no_batch(
    tmp_path, monkeypatch, capsys
):
    corpus = write_corpus(tmp_path / "reviews.txt", reviews(8))
    flags = ["--corpus", str(corpus), "--out", str(tmp_path / "run"), *FLAGS]
    flags += ["--held-out", "1", "--batch-size", "64"]
    _, training, validation = run_until_fit(monkeypatch, "gpt", flags)
    assert validation is None and len(training) == 8
    notes = [
        line for line in capsys.readouterr().out.splitlines() if line.startswith("note: validation")
    ]
    assert notes == [
        "note: validation is off: 2 documents held out (25% of the corpus) make no batch of 64 "
        "examples of 32 tokens; training on all 8 documents, keeping the last epoch's weights, "
        "and evaluating on training batches at the end (give more text, a smaller "
        "--batch-size, or --held-out 0 to say so)"
    ]


@pytest.mark.slow
def test_pretrain_gpt_on_short_reviews_trains_exports_and_reruns(tmp_path, capsys):
    corpus = write_corpus(tmp_path / "reviews.txt", reviews())
    out = tmp_path / "run"
    command = ["pretrain", "gpt", "--corpus", str(corpus), "--out", str(out), *FLAGS]
    command += ["--steps", "4", "--epochs", "2", "--checkpoint-every", "2"]
    assert main(command) == 0
    printed = capsys.readouterr().out
    assert "Held out 4 documents (64 sentences; 2 made no batch of 8 examples)" in printed
    assert re.search(r"Kept the weights of epoch \d: val_loss \d+\.\d{4}", printed)
    assert re.search(r"Evaluation on the 4 held-out documents: loss \d+\.\d{4}", printed)
    assert (out / "serving" / "1" / "saved_model.pb").is_file()
    # The same command again: the same held-out documents, nothing to train, the export kept.
    assert main(command) == 0
    printed = capsys.readouterr().out
    assert "Held out 4 documents (64 sentences; 2 made no batch of 8 examples)" in printed
    assert "Training already finished: 4 of 4 steps" in printed
    assert sorted(os.listdir(out / "serving")) == ["1"]


@pytest.mark.slow
def test_word2vec_and_translation_train_on_a_few_dozen_examples(tmp_path, capsys):
    documents = reviews()
    corpus = write_corpus(tmp_path / "reviews.txt", documents)
    command = ["pretrain", "word2vec", "--corpus", str(corpus), "--out", str(tmp_path / "w2v")]
    command += ["--epochs", "2", "--vector-size", "8", "--min-count", "1"]
    assert main(command) == 0
    assert "Evaluation on 10 batches: loss" in capsys.readouterr().out

    pairs = tmp_path / "pairs.tsv"
    sentences = [sentence for document in documents[:4] for sentence in document][:40]
    pairs.write_text("".join(f"{s}\t{' '.join(reversed(s.split()))}\n" for s in sentences))
    command = ["train", "translation", "--pairs", str(pairs), "--out", str(tmp_path / "mt")]
    command += ["--held-out", "4", "--steps", "2", "--batch-size", "8", "--vocab-size", "200"]
    command += ["--beam-width", "1", "--no-export"]
    assert main(command) == 0
    assert re.search(r"Held-out pairs \(4\): .*bleu \d", capsys.readouterr().out)
