"""Question-answering windows: BERT's run_squad layout and strides, pieces equal to the
tokenizer's, character offsets that map back to the exact context, answers to positions.

The windows in graph mode, inside the SavedModel, are checked against the eager ones by the
export test of tests/pipelines/test_span_answerer.py."""

import tensorflow as tf

from lmpipe.datasets.labelled.span_windows import answer_positions, context_pieces, span_windows

CONTEXTS = [
    "HAMLET. To be, or not to be: that is the question.",
    "The Unaffable café opened in 1887 —  on the Boulevard Saint-Germain!",
    "Naïve e\u0301te\u0301 (decomposed) and a zero\u200bwidth space, 北京 too.",
]


def numpy_windows(tokenizer, questions, contexts, **options):
    windows = span_windows(tokenizer, tf.constant(questions), tf.constant(contexts), **options)
    return {name: value.numpy() for name, value in windows.items()}


def test_context_pieces_are_the_tokenizers_and_spell_the_context(bert_tokenizer):
    ids, starts, ends = context_pieces(bert_tokenizer, CONTEXTS)
    assert ids.to_list() == bert_tokenizer.tokenize(CONTEXTS).to_list()
    spelled = []
    for context, row, first, last in zip(
        CONTEXTS, ids.to_list(), starts.to_list(), ends.to_list(), strict=True
    ):
        for piece, begin, end in zip(row, first, last, strict=True):
            token = bert_tokenizer.id_to_token(piece).removeprefix("##")
            text = context[begin:end]
            assert 0 <= begin < end <= len(context)
            spelled.append((token, text))
    # Pieces that spell their characters map to exactly them (lower-cased, accents off).
    assert ("hamlet", "HAMLET") in spelled and ("cafe", "café") in spelled
    assert all(text.strip() == text for _, text in spelled)
    _, starts, ends = context_pieces(bert_tokenizer, CONTEXTS[1:2])
    pairs = [CONTEXTS[1][b:e] for b, e in zip(starts[0].numpy(), ends[0].numpy(), strict=True)]
    # "Unaffable" is una ##ffa ##ble: each piece its own characters.
    assert pairs[1:4] == ["Una", "ffa", "ble"]
    _, starts, ends = context_pieces(bert_tokenizer, CONTEXTS[2:])
    pairs = [CONTEXTS[2][b:e] for b, e in zip(starts[0].numpy(), ends[0].numpy(), strict=True)]
    # A word normalization shortens (a decomposed accent) maps whole, as does 北 and 京.
    assert "e\u0301te\u0301" in pairs and "北" in pairs and "京" in pairs
    assert "zero\u200bwidth" in pairs


def test_windows_are_cls_question_sep_context_sep_with_run_squads_stride(bert_tokenizer):
    question = "who says it?"
    context = " ".join(f"w{i}" for i in range(20))  # 40 pieces: w ##0 ... (or w0 ...)
    pieces = bert_tokenizer.tokenize([context])[0].numpy().tolist()
    windows = numpy_windows(
        bert_tokenizer, [question], [context], seq_len=24, max_query_len=3, doc_stride=7
    )
    room = 24 - 3 - 3
    count = len(windows["example_index"])
    expected_count = 1 + -(-(len(pieces) - room) // 7)
    assert count == expected_count and windows["example_index"].tolist() == [0] * count
    query = bert_tokenizer.tokenize([question])[0].numpy().tolist()[:3]
    cls, sep = bert_tokenizer.cls_id, bert_tokenizer.sep_id
    for index in range(count):
        first = 7 * index
        window = pieces[first : first + room]
        expected = [cls, *query, sep, *window, sep]
        row = windows["token_ids"][index]
        assert row[: len(expected)].tolist() == expected
        assert (row[len(expected) :] == bert_tokenizer.pad_id).all()
        assert windows["segment_ids"][index].tolist() == [0] * 5 + [1] * (len(window) + 1) + [0] * (
            24 - len(expected)
        )
        assert windows["piece_index"][index][5 : 5 + len(window)].tolist() == list(
            range(first, first + len(window))
        )
        assert (windows["piece_index"][index][:5] == -1).all()
    # The last window reaches the end of the context, and no piece is left out.
    assert 7 * (count - 1) + room >= len(pieces) > 7 * (count - 2) + room


def test_answers_map_to_their_pieces_and_back_to_the_exact_substring(bert_tokenizer):
    context = CONTEXTS[1]
    answer = "Boulevard Saint-Germain"
    start = context.index(answer)
    windows = numpy_windows(
        bert_tokenizer, ["Where?"], [context], seq_len=64, max_query_len=8, doc_stride=16
    )
    starts, ends, covered = answer_positions(windows, [[start, start + len(answer)]])
    assert covered.tolist() == [True] and len(starts) == 1
    first = windows["char_start"][0, starts[0]]
    last = windows["char_end"][0, ends[0]]
    assert context[first:last] == answer


def test_an_answer_across_a_window_boundary_points_at_cls_there(bert_tokenizer):
    context = " ".join(["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"] * 2)
    answer = "delta epsilon zeta"
    start = context.index(answer)
    windows = numpy_windows(
        bert_tokenizer, ["What?"], [context], seq_len=12, max_query_len=2, doc_stride=2
    )
    starts, ends, _ = answer_positions(windows, [[start, start + len(answer)]])
    holding = []
    for index in range(len(starts)):
        span = windows["char_start"][index], windows["char_end"][index]
        inside = windows["piece_index"][index] >= 0
        whole = span[0][inside].min() <= start and span[1][inside].max() >= start + len(answer)
        if whole:
            holding.append(index)
            assert context[span[0][starts[index]] : span[1][ends[index]]] == answer
        else:  # a window that cuts the answer, or misses it, points at [CLS]
            assert starts[index] == ends[index] == 0
    assert holding and len(holding) < len(starts)
    # A question without an answer points at [CLS] everywhere.
    starts, ends, covered = answer_positions(windows, [[-1, -1]])
    assert not starts.any() and not ends.any() and covered.all()


def test_an_answer_of_characters_the_tokenizer_drops_is_reported(bert_tokenizer):
    context = "LEAR. Nothing \u200b will come of nothing."
    start = context.index("\u200b")
    windows = numpy_windows(
        bert_tokenizer, ["What?"], [context], seq_len=32, max_query_len=4, doc_stride=8
    )
    _, _, covered = answer_positions(windows, [[start, start + 1]])
    assert covered.tolist() == [False]
