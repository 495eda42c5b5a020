"""The export protocol: how every lmpipe family writes a SavedModel that TF Serving loads.

1. `check_destination(base_dir, version, overwrite)`: the arguments checked, what a killed
   export left in `base_dir` cleared, an existing version refused unless `overwrite`, before
   anything is traced.
2. A `tf.Module` tracking what the signatures read: the model's variables as the plain
   `tf.Variable`s Keras wraps (`saveable_variables`), never the Keras model itself, and the
   tokenizers and lookup tables (`serving_module`).
3. `write_version`: the module saved with its signatures (`tf.function`s without XLA, with an
   input signature) in a hidden temporary directory in `base_dir`, with one warmup request per
   signature in `assets.extra/tf_serving_warmup_requests`, and renamed to its version number
   (`lmpipe.serving.versions`), so that the version appears complete or not at all.

`lmpipe.serving.export.export_saved_model` (an encoder: token ids and raw-text signatures) and
`lmpipe.serving.text_export.export_text_function` (raw text in, text or numbers out) are its
two forms; every family's `export` goes through one of them.
"""

import os

import keras
import tensorflow as tf

from lmpipe.serving import versions
from lmpipe.serving.warmup import prediction_log, write_warmup_requests

SERVING_DEFAULT = "serving_default"


def check_destination(base_dir, version, overwrite):
    """`base_dir` (a string) ready for `version`: checked, cleared of what killed exports left.

    Raises:
        ValueError: `base_dir` is a file, `version` is not None or an integer >= 0,
            `overwrite` is not a bool, or `version` exists without `overwrite=True`.
    """
    base_dir = versions.check_base_dir(base_dir)
    versions.check_version(version)
    if not isinstance(overwrite, bool):
        raise ValueError(f"`overwrite` must be True or False, got overwrite={overwrite!r}.")
    versions.remove_leftovers(base_dir)
    versions.check_not_exported(base_dir, version, overwrite)
    return base_dir


def saveable_variables(variables):
    """The `tf.Variable`s to save: a Keras 3 variable is saved as the `tf.Variable` it wraps.

    Saving the Keras wrapper makes a SavedModel that `tf.saved_model.load` reads but the TF1
    loader, hence TF Serving, does not: the checkpoint is restored into a copy of each variable
    while the functions read the original, left uninitialized ("Could not find variable ...";
    keras-team/keras#20095, tensorflow/serving#2250).
    """
    unique = {}
    for variable in variables:
        if isinstance(variable, keras.Variable):
            variable = variable.value  # outside a layer call: the tf.Variable itself
        if not isinstance(variable, tf.Variable):
            raise ValueError(f"`model.variables` holds {variable!r}, not a variable.")
        unique.setdefault(id(variable), variable)
    return list(unique.values())


def serving_module(variables, **tracked):
    """A `tf.Module` tracking what a serving function reads: `variables` (a model's) as
    `model_variables` (see `saveable_variables`), and each of `tracked` (a tokenizer, a lookup
    table) under its name, so that its graph resources are saved."""
    module = tf.Module()
    module.model_variables = saveable_variables(variables)
    for name, value in tracked.items():
        setattr(module, name, value)
    return module


def write_version(base_dir, module, signatures, requests, version=None, overwrite=False):
    """Save `module` with `signatures` as `<base_dir>/<version>/`; return its path.

    Args:
        base_dir: what `check_destination` returned.
        module: the `tf.Module` tracking every variable and table the signatures read.
        signatures: `{signature name: concrete function}`.
        requests: `{signature name: {input name: numpy array}}`, one warmup request each (TF
            Serving runs them before it serves the version); empty for none.
        version: the integer version; None takes 1 + the largest version in `base_dir`.
        overwrite: replace an existing `version` in one atomic step.
    """
    with versions.temporary_directory(base_dir) as temporary:
        tf.saved_model.save(
            module,
            temporary,
            signatures=signatures,
            options=tf.saved_model.SaveOptions(save_debug_info=False),
        )
        if requests:
            model_name = os.path.basename(os.path.normpath(os.path.abspath(base_dir)))
            write_warmup_requests(
                temporary,
                [prediction_log(model_name, name, inputs) for name, inputs in requests.items()],
            )
        return versions.publish(temporary, base_dir, version, overwrite)
