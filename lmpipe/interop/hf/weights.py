"""Weight maps: the entries that pair each tensor of a Hugging Face checkpoint with a variable
of an lmpipe model, and their assignment in both directions.

An entry is `(checkpoint name, variable, checkpoint shape, conversion)`: the conversion (None:
the same layout) turns the checkpoint's tensor into the variable's value, and its `inverse`,
where it has one, turns the value back (otherwise a reshape to the checkpoint shape does). A
family's weight map is the list of its model's entries, built from the torch layouts below."""

import numpy as np

# Checkpoint entries that are not part of an encoder: the task heads of BertForPreTraining,
# BertForMaskedLM, AlbertForPreTraining, ...ForSequenceClassification, XLNetLMHeadModel, ...
HEAD_PREFIXES = (
    *("cls.", "classifier.", "qa_outputs.", "predictions.", "sop_classifier."),
    *("lm_loss.", "logits_proj.", "sequence_summary.", "lm_head."),
)

# XLNet's pooler: `sequence_summary.summary` is the encoder's, not a head's.
_SEQUENCE_SUMMARY = "sequence_summary.summary."


def encoder_weights(tensors, prefix, path):
    """The encoder entries of `tensors` (read from `path`), keyed by their name without
    `prefix`: the heads and the position-ids buffer left out."""
    weights = {}
    for name, array in tensors.items():
        if name.endswith("position_ids"):
            continue
        if name.startswith(HEAD_PREFIXES) and not name.startswith(_SEQUENCE_SUMMARY):
            continue
        key = name.removeprefix(prefix)
        # Checkpoints converted from TensorFlow name the LayerNorm parameters gamma and beta.
        key = key.replace("LayerNorm.gamma", "LayerNorm.weight")
        key = key.replace("LayerNorm.beta", "LayerNorm.bias")
        if key in weights:
            raise ValueError(f"{path}: weight {key!r} appears twice (with and without `{prefix}`).")
        weights[key] = array
    return weights


class _Transposed:
    """A torch Linear weight `[out, in]` as a Keras kernel `[in, out]` (reshaped to
    `kernel_shape`, e.g. split into heads), and back."""

    def __init__(self, out_dim, in_dim, kernel_shape):
        self.out_dim, self.in_dim, self.kernel_shape = out_dim, in_dim, kernel_shape

    def __call__(self, weight):
        return weight.T.reshape(self.kernel_shape)

    def inverse(self, kernel):
        return np.reshape(kernel, (self.in_dim, self.out_dim)).T


class RowsSwapped:
    """A conversion whose checkpoint rows (the two classes of a pair head) are in the other
    order, and back."""

    def __init__(self, convert, shape):
        self.convert, self.shape = convert, shape

    def __call__(self, weight):
        return self.convert(weight[::-1])

    def inverse(self, value):
        inner = getattr(self.convert, "inverse", None)
        value = inner(value) if inner else np.reshape(value, self.shape)
        return value[::-1]


def reshaped(shape):
    """The conversion that reshapes a checkpoint tensor to a variable's `shape`."""
    return lambda weight: weight.reshape(shape)


def linear(layer, name, out_dim, in_dim, kernel_shape=None):
    """The entries of a torch Linear `name` for a Keras Dense `layer`: torch stores W as
    [out, in], Keras kernels are [in, out] (then split into heads, by `kernel_shape`)."""
    kernel_shape = kernel_shape or (in_dim, out_dim)
    transposed = _Transposed(out_dim, in_dim, kernel_shape)
    return [
        (f"{name}.weight", layer.kernel, (out_dim, in_dim), transposed),
        (f"{name}.bias", layer.bias, (out_dim,), reshaped(tuple(layer.bias.shape))),
    ]


def layer_norm(layer, name, dim):
    """The entries of a torch LayerNorm `name` (`weight` is Keras' gamma, `bias` its beta)."""
    return [
        (f"{name}.weight", layer.gamma, (dim,), None),
        (f"{name}.bias", layer.beta, (dim,), None),
    ]


def prefixed(entries, prefix):
    """`entries` with `prefix` before each checkpoint name (`bert.` inside a model with heads)."""
    return [(prefix + name, *rest) for name, *rest in entries]


def without(entries, start):
    """`entries` but those whose checkpoint name starts with `start`."""
    return [entry for entry in entries if not entry[0].startswith(start)]


def check_weight(name, array, path):
    """Raise a ValueError naming the weight `name` of the checkpoint `path` unless `array`
    holds finite floating-point numbers (integers where a weight is expected are not a model's
    weights; NaN or infinities would train and predict NaN)."""
    if not np.issubdtype(array.dtype, np.floating):
        raise ValueError(
            f"{path}: weight {name!r} is of dtype {array.dtype}, where a model's weights are "
            "floating-point: the file is damaged or not this model's checkpoint."
        )
    finite = np.isfinite(array)
    if not finite.all():
        raise ValueError(
            f"{path}: weight {name!r} holds {array.size - int(finite.sum())} NaN or infinite "
            f"value(s) of {array.size}: the checkpoint is damaged (or was saved after training "
            "diverged)."
        )


def assign_entries(entries, weights, path):
    """Assign each entry's checkpoint weight (shape, dtype and finiteness checked) to its
    variable, each once; returns the ids of the variables assigned."""
    assigned = set()
    for name, variable, shape, convert in entries:
        array = weights[name]
        if tuple(array.shape) != shape:
            raise ValueError(
                f"{path}: weight {name!r} has shape {tuple(array.shape)}, expected {shape} "
                "from config.json."
            )
        check_weight(name, array, path)
        value = array if convert is None else convert(array)
        if id(variable) in assigned:
            raise RuntimeError(f"Variable {variable.path} would be assigned twice ({name}).")
        variable.assign(np.asarray(value, dtype=variable.dtype))
        assigned.add(id(variable))
    return assigned


def assign_weights(model, entries, weights, path, keep=()):
    """Assign every entry's weight; every variable of `model` but those of the layers named in
    `keep` must be assigned."""
    expected = {name for name, *_ in entries}
    missing = [name for name, *_ in entries if name not in weights]
    if missing:
        raise ValueError(
            f"{path} lacks {len(missing)} encoder weight(s) of the configured model, first "
            f"{missing[0]!r}: {missing[:5]}."
        )
    unexpected = sorted(set(weights) - expected)
    if unexpected:
        raise ValueError(
            f"{path} holds weight(s) the configured model does not have, first "
            f"{unexpected[0]!r}: {unexpected[:5]}; does config.json match the checkpoint?"
        )

    assigned = assign_entries(entries, weights, path)

    # Every variable must come from the checkpoint: none may keep its random initialization.
    kept = {id(v) for name in keep for v in model.get_layer(name).weights}
    left = [v.path for v in model.weights if id(v) not in assigned and id(v) not in kept]
    if left:
        raise RuntimeError(f"Variables not loaded from {path}: {left}.")


def checkpoint_tensors(entries):
    """The checkpoint's tensors of `entries`, by name: each variable's value in float32,
    converted back to the checkpoint's layout."""
    tensors = {}
    for name, variable, shape, convert in entries:
        value = np.asarray(variable.numpy(), dtype="float32")
        value = convert.inverse(value) if hasattr(convert, "inverse") else value.reshape(shape)
        tensors[name] = np.ascontiguousarray(value)
    return tensors
