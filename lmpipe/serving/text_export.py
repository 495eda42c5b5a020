"""Export a text-in function (translation, generation, question answering, word vectors) for
TensorFlow Serving, by the export protocol (`lmpipe.serving.protocol`).

`export_text_function(base_dir, module, function)` writes `<base_dir>/<version>/` with one
`serving_default` signature: the strings of one or more `[batch]` `tf.string` inputs go in,
the function's dict of batch-major tensors (strings allowed) comes out. Tokenization, the
model and any decoding loop run inside the graph, so a TF Serving client sends raw text.

What makes such an export loadable by TF Serving's TF1 loader (the tests reproduce it with
`lmpipe.serving.emulator.compat.ServingProcess`):
- `module` tracks the model's variables as plain `tf.Variable`s, never the Keras model itself
  (see `lmpipe.serving.protocol.saveable_variables`), and every lookup table the function
  uses (a `WordPieceTokenizer` is a `tf.Module`): `serving_module(model.variables,
  tokenizer=tokenizer)` makes such a module;
- the function is a `tf.function` without XLA (`jit_compile=False`), with an input signature.
"""

import numpy as np
import tensorflow as tf

from lmpipe.serving.protocol import (
    SERVING_DEFAULT,
    check_destination,
    saveable_variables,
    serving_module,
    write_version,
)

__all__ = ["export_text_function", "saveable_variables", "serving_module"]

WARMUP_TEXTS = ("The quick brown fox jumps over the lazy dog.",)


def export_text_function(
    base_dir, module, function, *, version=None, overwrite=False, warmup_texts=True
):
    """Export `function` as the `serving_default` signature of `<base_dir>/<version>/`.

    The version directory appears complete or not at all, and an overwritten version is
    never missing (see `lmpipe.serving.versions`).

    Args:
        base_dir: the model's base directory, what TF Serving's `--model_base_path` points to.
        module: a `tf.Module` tracking every variable and table `function` reads (see the
            module docstring).
        function: a `tf.function(jit_compile=False)` with `input_signature=[tf.TensorSpec([None],
            tf.string)]` (or several such inputs, e.g. a question and a context), returning a
            dict of tensors with the batch as first axis. The names of its arguments are the
            signature's input names (for instance `text` or `prompt`).
        version: the integer version; None takes 1 + the largest version in `base_dir`.
        overwrite: replace an existing `version` (an error otherwise).
        warmup_texts: True for a built-in sentence (for every input), a list of texts (one
            input), `{input name: texts}`, or False: the texts of the warmup request in
            `assets.extra/tf_serving_warmup_requests`. The function is run on them before
            anything is written, so a broken function fails here.

    Returns:
        The path of the new version directory.

    Example:

    >>> import tempfile
    >>> module = tf.Module()
    >>> @tf.function(input_signature=[tf.TensorSpec([None], tf.string)], jit_compile=False)
    ... def shout(text):
    ...     return {"text": tf.strings.upper(text)}
    >>> with tempfile.TemporaryDirectory() as base:
    ...     path = export_text_function(base, module, shout, warmup_texts=["hi"])
    ...     loaded = tf.saved_model.load(path)
    ...     loaded.signatures["serving_default"](text=tf.constant(["hey"]))["text"].numpy()
    array([b'HEY'], dtype=object)
    """
    if not isinstance(module, tf.Module):
        raise ValueError(f"`module` must be a tf.Module, got {type(module).__name__}.")
    if getattr(function, "input_signature", None) is None:
        raise ValueError("`function` must be a tf.function with an input signature.")
    specs = function.input_signature
    if not specs or any(spec.dtype != tf.string or spec.shape.rank != 1 for spec in specs):
        raise ValueError(f"`function` must take tf.string tensors of shape [batch], got {specs}.")
    concrete = function.get_concrete_function()
    names = [spec.name or "text" for spec in concrete.structured_input_signature[0]]
    texts = _warmup_texts(warmup_texts, names)
    base_dir = check_destination(base_dir, version, overwrite)

    check_texts = texts or {name: list(WARMUP_TEXTS) for name in names}
    size = len(check_texts[names[0]])
    outputs = concrete(*[tf.constant(check_texts[name]) for name in names])
    if not isinstance(outputs, dict) or not outputs:
        raise ValueError("`function` must return a non-empty dict of tensors.")
    for name, value in outputs.items():
        if value.shape.rank is None or value.shape.rank < 1 or value.shape[0] != size:
            raise ValueError(
                f"Output {name!r} of `function` must have the batch as its first axis, got "
                f"shape {value.shape} for {size} texts."
            )
    requests = {}
    if texts:
        inputs = {
            name: np.array([text.encode("utf-8") for text in texts[name]], object) for name in names
        }
        requests = {SERVING_DEFAULT: inputs}
    return write_version(
        base_dir, module, {SERVING_DEFAULT: concrete}, requests, version, overwrite
    )


def _warmup_texts(warmup_texts, names):
    """`{input name: texts}` of the warmup request (empty for none): one list for every input
    of a one-input function, a dict for several inputs, or True (the built-in sentence)."""
    if warmup_texts is True:
        return {name: list(WARMUP_TEXTS) for name in names}
    if warmup_texts is False or warmup_texts is None:
        return {}
    if isinstance(warmup_texts, dict):
        if sorted(warmup_texts) != sorted(names):
            raise ValueError(
                f"`warmup_texts` must give texts for the inputs {names}, got "
                f"{sorted(warmup_texts)}."
            )
        texts = {name: _text_list(warmup_texts[name]) for name in names}
        if len({len(values) for values in texts.values()}) > 1:
            raise ValueError("`warmup_texts` must give as many texts for every input.")
        return texts
    if len(names) > 1:
        raise ValueError(
            f"`warmup_texts` must be a dict {{input name: texts}} for the inputs {names}."
        )
    return {names[0]: _text_list(warmup_texts)}


def _text_list(warmup_texts):
    if isinstance(warmup_texts, str) or not all(isinstance(t, str) for t in warmup_texts):
        raise ValueError(
            f"`warmup_texts` must be True, False or a list of strings, got {warmup_texts!r}."
        )
    texts = list(warmup_texts)
    if not texts:
        raise ValueError("`warmup_texts` is empty; pass False for no warmup request.")
    return texts
