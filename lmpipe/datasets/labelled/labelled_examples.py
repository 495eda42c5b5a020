"""Labelled examples held in memory or read from a `tf.data.Dataset`, checked before any work:
what `TextClassifier` trains and evaluates on.

`labelled_examples(examples, ...)` takes `(texts, labels)`, `(texts, text_pairs, labels)`
(lists or numpy arrays; labels as class indices or names) or a `tf.data.Dataset` of dicts
`{"text", "label"}` (and `"text_pair"`), and returns `LabelledExamples`: one dict per example
in a Dataset, and their number. A bad value is an error naming the example.
"""

import numpy as np
import tensorflow as tf

from lmpipe.datasets.examples.packing import min_sequence_length


def labelled_examples(examples, name, num_classes, class_names, seq_len):
    """`examples` checked, as `LabelledExamples` (see the module docstring).

    Args:
        examples: what the module docstring lists.
        name: how errors name the examples (e.g. "train_examples").
        num_classes: labels are `0 .. num_classes - 1`.
        class_names: None, or one name per class (labels may then be names).
        seq_len: the length examples are packed to (pairs need at least 5).
    """
    if isinstance(examples, tf.data.Dataset):
        return dataset_examples(examples, name, seq_len)
    return memory_examples(examples, name, num_classes, class_names, seq_len)


def check_pairs_fit(seq_len):
    """Raise unless a text pair fits in `seq_len` with one token of each text."""
    if seq_len < min_sequence_length(2):
        raise ValueError(
            f"`seq_len` must be at least {min_sequence_length(2)} for text pairs "
            f"([CLS] A [SEP] B [SEP] with one token each), got seq_len={seq_len}."
        )


class LabelledExamples:
    """Examples as a Dataset of dicts `{"text", "label"}` (+ `"text_pair"`), one per element."""

    def __init__(self, dataset, size, in_memory):
        self.dataset = dataset
        self.size = size
        self.in_memory = in_memory


def text_array(texts, name):
    """`texts` as a numpy array of `str`; ValueError naming the first entry that is not text."""
    if isinstance(texts, (str, bytes)):
        raise ValueError(f"`{name}` must be a list of texts, got a single string: {texts!r}.")
    if isinstance(texts, np.ndarray) and texts.dtype.kind in "US":
        if texts.ndim != 1:
            raise ValueError(f"`{name}` must be 1-D, got shape {texts.shape}.")
        array = texts
    else:
        try:
            items = list(texts)
        except TypeError:
            raise ValueError(
                f"`{name}` must be a list of texts, got {type(texts).__name__}."
            ) from None
        for index, item in enumerate(items):
            if not isinstance(item, (str, bytes)):
                raise ValueError(
                    f"`{name}[{index}]` must be a string, got {type(item).__name__}: {item!r}."
                )
        array = np.array(items, dtype=object)
    if len(array) == 0:
        raise ValueError(f"`{name}` is empty.")
    return array


def memory_examples(examples, name, num_classes, class_names, seq_len):
    """Checked `(texts, labels)` / `(texts, text_pairs, labels)` as `LabelledExamples`."""
    if not isinstance(examples, (tuple, list)) or len(examples) not in (2, 3):
        raise ValueError(
            f"`{name}` must be (texts, labels), (texts, text_pairs, labels) or a "
            f"tf.data.Dataset of dicts, got {type(examples).__name__}"
            + (f" of {len(examples)} items." if isinstance(examples, (tuple, list)) else ".")
        )
    texts = text_array(examples[0], f"{name} texts")
    columns = {"text": texts}
    if len(examples) == 3:
        check_pairs_fit(seq_len)
        columns["text_pair"] = text_array(examples[1], f"{name} text_pairs")
    labels = label_array(examples[-1], f"{name} labels", num_classes, class_names)
    lengths = {key: len(column) for key, column in columns.items()}
    lengths["label"] = len(labels)
    if len(set(lengths.values())) > 1:
        described = ", ".join(f"{count} {key}s" for key, count in lengths.items())
        raise ValueError(f"`{name}` has {described}: texts and labels must be of equal length.")
    columns["label"] = labels
    return LabelledExamples(tf.data.Dataset.from_tensor_slices(columns), len(labels), True)


def label_array(labels, name, num_classes, class_names):
    """int32 class indices; ValueError naming the first example whose label is bad."""
    if isinstance(labels, (str, bytes)):
        raise ValueError(f"`{name}` must be a list of labels, got a single string.")
    if isinstance(labels, np.ndarray):
        array = labels
    else:
        try:
            array = np.asarray(labels)
        except ValueError:  # ragged
            array = np.asarray(labels, dtype=object)
    if array.dtype.kind not in "iu":
        array = np.asarray(labels, dtype=object)  # mixed, names or bad values: checked one by one
    if array.ndim != 1:
        raise ValueError(f"`{name}` must be a 1-D list of labels, got shape {array.shape}.")
    if len(array) == 0:
        raise ValueError(f"`{name}` is empty: there are no examples.")
    allowed = f"[0, {num_classes})" + (f" or one of {class_names}" if class_names else "")
    if array.dtype.kind in "iu":
        bad = np.flatnonzero((array < 0) | (array >= num_classes))
        if bad.size:
            index = int(bad[0])
            raise ValueError(
                f"`{name}[{index}]` (example {index}) is {int(array[index])}, outside {allowed}."
            )
        return array.astype(np.int32)
    indices = {name_: index for index, name_ in enumerate(class_names or [])}
    result = np.empty(len(array), np.int32)
    for index, label in enumerate(array.tolist()):
        if isinstance(label, str) and label in indices:
            result[index] = indices[label]
        elif (
            isinstance(label, (int, np.integer))
            and not isinstance(label, bool)
            and 0 <= label < num_classes
        ):
            result[index] = label
        else:
            raise ValueError(
                f"`{name}[{index}]` (example {index}) is {label!r}, outside {allowed}."
            )
    return result


def dataset_examples(dataset, name, seq_len):
    """A Dataset of example dicts, checked for its structure (labels are checked in the graph)."""
    spec = dataset.element_spec
    if not isinstance(spec, dict) or "text" not in spec or "label" not in spec:
        raise ValueError(
            f"`{name}` as a tf.data.Dataset must yield dicts with 'text' and 'label' (and "
            f"optionally 'text_pair'), got elements of spec {spec}."
        )
    unknown = set(spec) - {"text", "text_pair", "label"}
    if unknown:
        raise ValueError(f"`{name}` yields unknown keys {sorted(unknown)}.")
    for key in ("text", "text_pair"):
        if key in spec and (spec[key].dtype != tf.string or spec[key].shape.rank != 0):
            raise ValueError(
                f"`{name}` element {key!r} must be a scalar string (one example per element), "
                f"got {spec[key]}."
            )
    if not spec["label"].dtype.is_integer or spec["label"].shape.rank != 0:
        raise ValueError(
            f"`{name}` element 'label' must be a scalar integer class index, got {spec['label']}."
        )
    if "text_pair" in spec:
        check_pairs_fit(seq_len)
    size = int(dataset.cardinality().numpy())
    if size == tf.data.INFINITE_CARDINALITY:
        raise ValueError(f"`{name}` is an infinite Dataset; give a finite one (it is repeated).")
    if size < 0:  # unknown: count it
        size = int(dataset.reduce(np.int64(0), lambda count, _: count + 1).numpy())
    if size == 0:
        raise ValueError(f"`{name}` is empty: there are no examples.")
    return LabelledExamples(dataset, size, False)
