"""MacroF1 against F1 counted by hand, over several batches."""

import numpy as np
import pytest

from lmpipe.models.metrics import MacroF1


def macro_f1_by_hand(labels, predicted, num_classes):
    scores = []
    for c in range(num_classes):
        tp = np.sum((labels == c) & (predicted == c))
        fp = np.sum((labels != c) & (predicted == c))
        fn = np.sum((labels == c) & (predicted != c))
        if tp + fp + fn:
            scores.append(2 * tp / (2 * tp + fp + fn))
    return float(np.mean(scores))


def test_macro_f1_accumulates_counts_over_batches():
    rng = np.random.default_rng(0)
    num_classes = 4
    labels = rng.integers(0, num_classes, 300)
    # An imbalanced, partly right classifier: class 3 is never predicted.
    logits = rng.normal(size=(300, num_classes)).astype("float32")
    logits[np.arange(300), labels] += rng.uniform(0, 2, 300)
    logits[:, 3] = -10
    metric = MacroF1(num_classes)
    for start in range(0, 300, 64):  # uneven last batch
        metric.update_state(labels[start : start + 64], logits[start : start + 64])
    expected = macro_f1_by_hand(labels, logits.argmax(-1), num_classes)
    assert float(metric.result()) == pytest.approx(expected, abs=1e-6)
    # Below accuracy here: the never-predicted class scores 0 and weighs a quarter.
    assert expected < np.mean(labels == logits.argmax(-1))


def test_macro_f1_leaves_out_classes_never_seen_and_resets():
    metric = MacroF1(5)
    metric.update_state([0, 1, 1], np.eye(5, dtype="float32")[[0, 1, 0]])
    # Class 0: tp 1, fp 1 -> 2/3; class 1: tp 1, fn 1 -> 2/3; classes 2-4 absent.
    assert float(metric.result()) == pytest.approx(2 / 3)
    metric.reset_state()
    assert float(metric.result()) == 0.0
    metric.update_state([2], np.eye(5, dtype="float32")[[2]])
    assert float(metric.result()) == pytest.approx(1.0)
