"""Metrics of the fine-tuning models that Keras does not have in the form they need."""

import keras
from keras import ops


class MacroF1(keras.metrics.Metric):
    """Macro-averaged F1 of a classifier: the unweighted mean, over the classes, of each
    class's F1 = 2 TP / (2 TP + FP + FN), from counts accumulated over every batch.

    Classes absent from both the labels and the predictions seen so far are left out of the
    mean (scikit-learn's `f1_score(average="macro")` with its default labels); a class with
    support but never predicted counts with F1 0. Rare classes weigh as much as frequent ones,
    which is why it is reported beside accuracy on imbalanced data.

    Args:
        num_classes: number of classes.

    Call (`update_state`) arguments:
        labels: int `[B]` class indices.
        logits: `[B, num_classes]` scores; the prediction is their argmax.

    Example:

        >>> metric = MacroF1(3)
        >>> metric.update_state([0, 0, 1, 2], [[1.0, 0, 0], [0, 1.0, 0], [0, 1.0, 0], [0, 0, 1.0]])
        >>> round(float(metric.result()), 4)  # F1: class 0 2/3, class 1 2/3, class 2 1
        0.7778
    """

    def __init__(self, num_classes, name="macro_f1", **kwargs):
        super().__init__(name=name, **kwargs)
        self.num_classes = num_classes
        shape = (num_classes,)
        self.true_positives = self.add_variable(shape, "zeros", name="true_positives")
        self.false_positives = self.add_variable(shape, "zeros", name="false_positives")
        self.false_negatives = self.add_variable(shape, "zeros", name="false_negatives")

    def update_state(self, labels, logits, sample_weight=None):
        del sample_weight
        labels = ops.cast(ops.reshape(labels, (-1,)), "int32")
        predicted = ops.cast(ops.argmax(ops.reshape(logits, (-1, self.num_classes)), -1), "int32")
        gold = ops.one_hot(labels, self.num_classes, dtype=self.dtype)  # [B, C]
        guess = ops.one_hot(predicted, self.num_classes, dtype=self.dtype)
        hits = gold * guess
        self.true_positives.assign_add(ops.sum(hits, axis=0))
        self.false_positives.assign_add(ops.sum(guess - hits, axis=0))
        self.false_negatives.assign_add(ops.sum(gold - hits, axis=0))

    def result(self):
        tp, fp, fn = self.true_positives, self.false_positives, self.false_negatives
        denominator = 2 * tp + fp + fn
        seen = ops.cast(denominator > 0, self.dtype)
        f1 = ops.divide_no_nan(2 * tp, denominator)
        return ops.divide_no_nan(ops.sum(f1 * seen), ops.sum(seen))

    def reset_state(self):
        for variable in (self.true_positives, self.false_positives, self.false_negatives):
            variable.assign(ops.zeros_like(variable))

    def get_config(self):
        return {**super().get_config(), "num_classes": self.num_classes}
