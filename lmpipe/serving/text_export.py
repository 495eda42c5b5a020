"""Export a text-in function (translation, generation, word vectors) for TensorFlow Serving.

`export_text_function(base_dir, module, function)` writes `<base_dir>/<version>/` with one
`serving_default` signature: the strings of a `[batch]` `tf.string` input go in, the function's
dict of batch-major tensors (strings allowed) comes out. Tokenization, the model and any
decoding loop run inside the graph, so a TF Serving client sends raw text.

What makes such an export loadable by TF Serving's TF1 loader (the tests reproduce it with
`lmpipe.serving.emulator.compat.ServingProcess`):
- `module` tracks the model's variables as plain `tf.Variable`s
  (`module.model_variables = saveable_variables(model.variables)`), never the Keras model
  itself (see `lmpipe.serving.export.saveable_variables`), and every lookup table the function
  uses (a `WordPieceTokenizer` is a `tf.Module`: assign it to an attribute of `module`);
- the function is a `tf.function` without XLA (`jit_compile=False`), with an input signature.
"""

import os

import numpy as np
import tensorflow as tf

from lmpipe.serving import versions
from lmpipe.serving.export import SERVING_DEFAULT, saveable_variables
from lmpipe.serving.warmup import prediction_log, write_warmup_requests

__all__ = ["export_text_function", "saveable_variables"]

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
            tf.string)]`, returning a dict of tensors with the batch as first axis. The name
            of its argument is the signature's input name (for instance `text` or `prompt`).
        version: the integer version; None takes 1 + the largest version in `base_dir`.
        overwrite: replace an existing `version` (an error otherwise).
        warmup_texts: True for a built-in sentence, a list of texts, or False: the texts of
            the warmup request in `assets.extra/tf_serving_warmup_requests`. The function is
            run on them before anything is written, so a broken function fails here.

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
    base_dir = versions.check_base_dir(base_dir)
    versions.check_version(version)
    if not isinstance(overwrite, bool):
        raise ValueError(f"`overwrite` must be True or False, got overwrite={overwrite!r}.")
    if not isinstance(module, tf.Module):
        raise ValueError(f"`module` must be a tf.Module, got {type(module).__name__}.")
    if not hasattr(function, "get_concrete_function"):
        raise ValueError("`function` must be a tf.function with an input signature.")
    if getattr(function, "input_signature", None) is None:
        raise ValueError("`function` must be a tf.function with an input signature.")
    specs = function.input_signature
    if len(specs) != 1 or specs[0].dtype != tf.string or specs[0].shape.rank != 1:
        raise ValueError(
            f"`function` must take one tf.string tensor of shape [batch], got {specs}."
        )
    texts = _warmup_texts(warmup_texts)
    versions.remove_leftovers(base_dir)
    versions.check_not_exported(base_dir, version, overwrite)

    concrete = function.get_concrete_function()
    input_name = concrete.structured_input_signature[0][0].name or "text"
    check_texts = texts or list(WARMUP_TEXTS)
    outputs = concrete(tf.constant(check_texts))
    if not isinstance(outputs, dict) or not outputs:
        raise ValueError("`function` must return a non-empty dict of tensors.")
    for name, value in outputs.items():
        if value.shape.rank is None or value.shape.rank < 1 or value.shape[0] != len(check_texts):
            raise ValueError(
                f"Output {name!r} of `function` must have the batch as its first axis, got "
                f"shape {value.shape} for {len(check_texts)} texts."
            )

    with versions.temporary_directory(base_dir) as temporary:
        tf.saved_model.save(
            module,
            temporary,
            signatures={SERVING_DEFAULT: concrete},
            options=tf.saved_model.SaveOptions(save_debug_info=False),
        )
        if texts:
            model_name = os.path.basename(os.path.normpath(os.path.abspath(base_dir)))
            inputs = {input_name: np.array([text.encode("utf-8") for text in texts], object)}
            write_warmup_requests(temporary, [prediction_log(model_name, SERVING_DEFAULT, inputs)])
        return versions.publish(temporary, base_dir, version, overwrite)


def _warmup_texts(warmup_texts):
    if warmup_texts is True:
        return list(WARMUP_TEXTS)
    if warmup_texts is False or warmup_texts is None:
        return []
    if isinstance(warmup_texts, str) or not all(isinstance(t, str) for t in warmup_texts):
        raise ValueError(
            f"`warmup_texts` must be True, False or a list of strings, got {warmup_texts!r}."
        )
    texts = list(warmup_texts)
    if not texts:
        raise ValueError("`warmup_texts` is empty; pass False for no warmup request.")
    return texts
