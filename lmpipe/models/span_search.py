"""The answer spans of a question from its windows' start and end logits (BERT's `run_squad`
n-best search), in numpy (`best_spans`, any number of answers) and in graph ops
(`best_span_graph`, the best one, for the SavedModel).

A candidate is a start position and an end position of one window, both on context pieces,
with `0 <= end - start < max_answer_len`. Its score is its probability in its window,
`softmax(start_logits)[start] * softmax(end_logits)[end]`, so windows compare on one scale.
Candidates of all windows of a question are ranked together, one per character span (the
same span from overlapping windows counts once, with its best score). The no-answer score
of a question is its lowest `[CLS]`-`[CLS]` probability over its windows (`run_squad`'s
`null_score_diff`): with `no_answer`, a question answers "" where it beats the best span.
"""

import numpy as np
import tensorflow as tf

N_BEST = 20
"""Candidates kept per window before those of all windows are ranked (`run_squad`'s n_best_size)."""
WINDOW_CHUNK = 256
"""Windows scored at once (each holds `seq_len * max_answer_len` candidates)."""


def _log_softmax(logits):
    logits = logits.astype(np.float64)
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def _span_scores(windows, start_log, end_log, max_answer_len):
    """`[W, S, max_answer_len]` log-probabilities of the span (start, start + length), -inf
    where it is not a candidate."""
    context = windows["char_start"] >= 0  # [W, S]
    count, length = context.shape
    pad = np.full([count, max_answer_len], -np.inf)
    end_padded = np.concatenate([np.where(context, end_log, -np.inf), pad], axis=1)
    ends = np.stack([end_padded[:, d : d + length] for d in range(max_answer_len)], axis=-1)
    return np.where(context, start_log, -np.inf)[:, :, None] + ends  # [W, S, M]


def best_spans(windows, start_logits, end_logits, contexts, top_k, max_answer_len, no_answer):
    """The `top_k` best answers of each question, as lists of dicts.

    Args:
        windows: `span_windows`' result as numpy arrays (`example_index`, `char_start`,
            `char_end`).
        start_logits, end_logits: float `[W, S]`, the model's outputs on the windows.
        contexts: the `[B]` contexts (str).
        top_k: answers per question, at most (fewer where fewer spans are possible).
        max_answer_len: the longest answer, in pieces.
        no_answer: whether "" (no answer) may be predicted.

    Returns:
        Per question a list of `{"answer", "score", "start", "end"}`, best first: the text
        `context[start:end]` and its probability; `{"answer": "", "start": -1, "end": -1}`
        for no answer.
    """
    start_log, end_log = _log_softmax(start_logits), _log_softmax(end_logits)
    null = start_log[:, 0] + end_log[:, 0]  # [W]
    example = windows["example_index"]
    candidates = [dict() for _ in contexts]
    null_scores = [np.inf] * len(contexts)
    # In chunks of windows: the candidates of one window are [seq_len, max_answer_len].
    for begin in range(0, len(example), WINDOW_CHUNK):
        rows = slice(begin, begin + WINDOW_CHUNK)
        chunk = {name: windows[name][rows] for name in ("char_start", "char_end")}
        scores = _span_scores(chunk, start_log[rows], end_log[rows], max_answer_len)
        flat = scores.reshape(len(scores), -1)  # [chunk, S * M]
        keep = min(max(top_k, N_BEST), flat.shape[1])  # run_squad: 20 per window, then dedupe
        top = np.argpartition(-flat, keep - 1, axis=1)[:, :keep]  # [chunk, keep]
        for row in range(len(scores)):
            window = begin + row
            index = int(example[window])
            null_scores[index] = min(null_scores[index], float(null[window]))
            for position in top[row]:
                score = flat[row, position]
                if not np.isfinite(score):
                    continue
                start, span = divmod(int(position), max_answer_len)
                first = int(chunk["char_start"][row, start])
                last = int(chunk["char_end"][row, start + span])
                if score > candidates[index].get((first, last), -np.inf):
                    candidates[index][(first, last)] = float(score)
    results = []
    for index, context in enumerate(contexts):
        ranked = sorted(candidates[index].items(), key=lambda item: (-item[1], item[0]))
        answers = [
            {
                "answer": context[first:last],
                "score": float(np.exp(score)),
                "start": first,
                "end": last,
            }
            for (first, last), score in ranked
        ]
        if no_answer:
            empty = {
                "answer": "",
                "score": float(np.exp(null_scores[index])),
                "start": -1,
                "end": -1,
            }
            answers.append(empty)
            answers.sort(key=lambda answer: -answer["score"])
        results.append(answers[:top_k])
    return results


def best_span_graph(windows, start_logits, end_logits, contexts, max_answer_len, no_answer):
    """The best answer of each question, in graph ops (what the export serves).

    Args: as `best_spans`, with tensors: `windows` from `span_windows`, logits `[W, S]`,
        `contexts` string `[B]`.

    Returns:
        `{"answer": string [B], "score": float32 [B], "start": int32 [B], "end": int32 [B]}`:
        the text, its probability and its character span (-1, -1 and "" for no answer).
    """
    context = windows["char_start"] >= 0  # [W, S]
    start_log = tf.nn.log_softmax(tf.cast(start_logits, tf.float32), axis=-1)
    end_log = tf.nn.log_softmax(tf.cast(end_logits, tf.float32), axis=-1)
    minus_inf = tf.constant(-np.inf, tf.float32)
    end_masked = tf.where(context, end_log, minus_inf)
    end_padded = tf.pad(end_masked, [[0, 0], [0, max_answer_len]], constant_values=-np.inf)
    length = tf.shape(start_log)[1]
    ends = tf.stack(
        [end_padded[:, d : d + length] for d in range(max_answer_len)], axis=-1
    )  # [W, S, M]
    scores = tf.where(context, start_log, minus_inf)[:, :, None] + ends
    flat = tf.reshape(scores, [tf.shape(scores)[0], -1])  # [W, S * M]
    best = tf.argmax(flat, axis=1, output_type=tf.int32)  # [W]
    best_score = tf.reduce_max(flat, axis=1)  # [W]
    start = best // max_answer_len
    end = start + best % max_answer_len
    first = tf.gather(windows["char_start"], start, batch_dims=1)
    last = tf.gather(windows["char_end"], end, batch_dims=1)
    example = windows["example_index"]
    questions = tf.shape(contexts)[0]
    top = tf.math.unsorted_segment_max(best_score, example, questions)  # [B]
    # The first window reaching the question's best score.
    is_top = tf.equal(best_score, tf.gather(top, example))
    windows_count = tf.shape(example)[0]
    position = tf.where(is_top, tf.range(windows_count), windows_count)
    chosen = tf.math.unsorted_segment_min(position, example, questions)  # [B]
    first, last = tf.gather(first, chosen), tf.gather(last, chosen)
    found = tf.math.is_finite(top)
    if no_answer:
        null = tf.math.unsorted_segment_min(start_log[:, 0] + end_log[:, 0], example, questions)
        empty = null > top
        found = found & ~empty
        top = tf.where(empty, null, top)
    first = tf.where(found, first, -1)
    last = tf.where(found, last, -1)
    answer = tf.strings.substr(contexts, tf.maximum(first, 0), last - first, unit="UTF8_CHAR")
    return {
        "answer": tf.where(found, answer, ""),
        "score": tf.where(tf.math.is_finite(top), tf.exp(top), 0.0),
        "start": first,
        "end": last,
    }
