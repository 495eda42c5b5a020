"""lmpipe.backend: the wrapped calls into TensorFlow's private modules."""

import configparser
import pathlib
import subprocess
import sys
import textwrap
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

import lmpipe
from lmpipe.backend import (
    APPLY_WEIGHT_DECAY_HOOK,
    CLIP_GRADIENTS_HOOK,
    SYMBOLIC_BUILD_HOOK,
    adam_moments,
    compiling_with_xla,
    keras_apply_weight_decay,
    keras_clip_gradients,
    keras_symbolic_build,
    learning_rate_schedule,
    loss_tracker,
    trackable_base,
    uses_weight_decay,
)
from tests import module_imports

ROOT = pathlib.Path(__file__).resolve().parents[1]


def moved(symbol, check):
    """The message of a test that finds a private TensorFlow/Keras symbol changed."""
    return (
        f"{symbol} no longer does what lmpipe.backend relies on with TensorFlow "
        f"{tf.__version__} / Keras {keras.__version__}: {check}"
    )


def test_compiling_with_xla_is_true_only_while_tracing_for_xla():
    seen = {}

    def probe(name):
        seen[name] = compiling_with_xla()
        return tf.constant(0)

    probe("eager")
    tf.function(lambda: probe("graph"), autograph=False)()
    tf.function(lambda: probe("xla"), jit_compile=True, autograph=False)()
    inner = tf.function(lambda: probe("called from xla"), autograph=False)
    tf.function(lambda: inner(), jit_compile=True, autograph=False)()
    assert seen == {"eager": False, "graph": False, "xla": True, "called from xla": True}


def test_backend_imports_nothing_of_lmpipe():
    """Every floor of lmpipe may call the backend, so it stands below them all."""
    assert module_imports.imported("lmpipe.backend") == set()


def test_the_datasets_layers_and_models_reach_xla_through_the_backend():
    for module in ("lmpipe.datasets.examples.masking", "lmpipe.layers.dropout"):
        assert "lmpipe.backend" in module_imports.imported(module)


def test_op_determinism_enabled_follows_enable_op_determinism():
    # A process of its own: op determinism cannot be turned off again through a public API.
    script = textwrap.dedent(
        """
        import tensorflow as tf
        from lmpipe.backend import op_determinism_enabled
        before = op_determinism_enabled()
        tf.config.experimental.enable_op_determinism()
        print(before, op_determinism_enabled())
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    assert result.stdout.split()[-2:] == ["False", "True"], moved(
        "tensorflow.python.framework.config.is_op_determinism_enabled",
        "find where TensorFlow now answers whether enable_op_determinism() was called.",
    )


def test_learning_rate_schedule_is_the_schedule_the_optimizer_was_made_with():
    schedule = keras.optimizers.schedules.PolynomialDecay(0.1, decay_steps=10)
    found = learning_rate_schedule(keras.optimizers.Adam(learning_rate=schedule))
    assert found is schedule, moved(
        "optimizer._learning_rate", "find where a Keras optimizer keeps its schedule."
    )
    assert learning_rate_schedule(keras.optimizers.Adam(learning_rate=0.1)) is None


def _tiny_model():
    inputs = keras.Input((2,))
    model = keras.Model(inputs, keras.layers.Dense(1, kernel_initializer="ones")(inputs))
    model.compile(optimizer=keras.optimizers.SGD(0.0), loss="mse")
    return model


def test_loss_tracker_holds_the_loss_fit_reports():
    model = _tiny_model()
    x = np.array([[1.0, 2.0], [3.0, 4.0]], "float32")
    y = np.zeros((2, 1), "float32")
    history = model.fit(x, y, batch_size=2, epochs=1, verbose=0)
    tracker = loss_tracker(model)
    assert isinstance(tracker, keras.metrics.Mean), moved(
        "model._loss_tracker", "find the Mean metric behind the loss fit reports."
    )
    # mse of predictions 3 and 7 against 0: (9 + 49) / 2.
    assert float(tracker.result()) == pytest.approx(29.0), moved(
        "model._loss_tracker", "check that Keras' train step still feeds it the loss."
    )
    assert history.history["loss"][0] == pytest.approx(29.0)


def test_adam_moments_are_the_moments_adam_updates():
    variable = keras.Variable([1.0, 2.0])
    optimizer = keras.optimizers.Adam(learning_rate=0.1, beta_1=0.9, beta_2=0.99)
    optimizer.apply([tf.constant([1.0, -2.0])], [variable])
    m, v = adam_moments(optimizer, variable)
    check = "find where Keras' Adam keeps each variable's first and second moments."
    symbol = "optimizer._momentums/_velocities[optimizer._get_variable_index(variable)]"
    np.testing.assert_allclose(np.array(m), [0.1, -0.2], rtol=1e-6, err_msg=moved(symbol, check))
    np.testing.assert_allclose(np.array(v), [0.01, 0.04], rtol=1e-6, err_msg=moved(symbol, check))


def test_uses_weight_decay_follows_the_exclusions():
    kernel, bias = keras.Variable([1.0], name="kernel"), keras.Variable([1.0], name="bias")
    optimizer = keras.optimizers.AdamW(weight_decay=0.1)
    optimizer.exclude_from_weight_decay(var_names=["bias"])
    optimizer.build([kernel, bias])
    check = "find how Keras now decides which variables it decays."
    assert uses_weight_decay(optimizer, kernel), moved("optimizer._use_weight_decay", check)
    assert not uses_weight_decay(optimizer, bias), moved("optimizer._use_weight_decay", check)


class ClippingHook(keras.optimizers.SGD):
    calls = 0

    def _clip_gradients(self, grads):
        type(self).calls += 1
        return keras_clip_gradients(self, ClippingHook, grads)


def test_apply_clips_through_the_hook_lmpipe_overrides():
    assert callable(getattr(keras.optimizers.Optimizer, CLIP_GRADIENTS_HOOK, None))
    variable = keras.Variable([0.0, 0.0])
    optimizer = ClippingHook(learning_rate=1.0, global_clipnorm=1.0)
    optimizer.apply([tf.constant([3.0, 4.0])], [variable])
    symbol = "Optimizer._clip_gradients"
    assert ClippingHook.calls == 1, moved(symbol, "find the hook apply() clips gradients in.")
    np.testing.assert_allclose(
        np.array(variable),
        [-0.6, -0.8],
        rtol=1e-6,
        err_msg=moved(symbol, "check that Keras' version still clips by the global norm."),
    )


class DecayHook(keras.optimizers.AdamW):
    calls = 0

    def _apply_weight_decay(self, variables):
        type(self).calls += 1
        return keras_apply_weight_decay(self, DecayHook, variables)


def test_apply_decays_through_the_hook_lmpipe_overrides():
    assert callable(getattr(keras.optimizers.Optimizer, APPLY_WEIGHT_DECAY_HOOK, None))
    variable = keras.Variable([1.0])
    optimizer = DecayHook(learning_rate=0.1, weight_decay=0.5)
    # A zero gradient: Adam's step is 0, only the decay moves the variable, by lr * decay.
    optimizer.apply([tf.constant([0.0])], [variable])
    symbol = "Optimizer._apply_weight_decay"
    assert DecayHook.calls == 1, moved(symbol, "find the hook apply() decays variables in.")
    np.testing.assert_allclose(
        np.array(variable),
        [0.95],
        rtol=1e-6,
        err_msg=moved(symbol, "check that Keras' version still decays by lr * weight_decay."),
    )


class BuildHook(keras.Model):
    calls = 0

    def __init__(self):
        super().__init__()
        self.dense = keras.layers.Dense(1)

    def call(self, x):
        return self.dense(x)

    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        type(self).calls += 1
        return keras_symbolic_build(self, BuildHook, iterator=iterator, data_batch=data_batch)


def test_fit_builds_through_the_hook_lmpipe_overrides():
    assert callable(getattr(keras.Model, SYMBOLIC_BUILD_HOOK, None))
    model = BuildHook()
    model.compile(optimizer="sgd", loss="mse")
    model.fit(np.ones((2, 3), "float32"), np.ones((2, 1), "float32"), verbose=0)
    symbol = "Model._maybe_symbolic_build"
    assert BuildHook.calls >= 1, moved(symbol, "find the hook fit() builds the model in.")
    assert model.built and model.optimizer.built, moved(
        symbol, "check that Keras' version still builds the model and its optimizer."
    )
    assert model.dense.kernel.shape == (3, 1)


def test_trackable_base_saves_and_restores_through_its_tensors(tmp_path):
    class Saved(trackable_base()):
        def __init__(self):
            self.value = tf.Variable([1.0, 2.0])

        def _serialize_to_tensors(self):
            return {"doubled": self.value * 2}

        def _restore_from_tensors(self, restored_tensors):
            self.value.assign(restored_tensors["doubled"] / 2 + 10)
            return {}

    saved = Saved()
    path = tf.train.Checkpoint(state=saved).write(str(tmp_path / "checkpoint"))
    restored = Saved()
    tf.train.Checkpoint(state=restored).read(path).assert_consumed()
    np.testing.assert_allclose(
        restored.value.numpy(),
        [11.0, 12.0],
        err_msg=moved(
            "tf.__internal__.tracking.Trackable",
            "check that a checkpoint still saves and restores such an object through its "
            "_serialize_to_tensors and _restore_from_tensors.",
        ),
    )


def test_setup_cfg_pins_keras_to_the_tested_minor_versions():
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    requirements = config["options"]["install_requires"].split()
    assert "keras>=3.15,<3.16" in requirements
    assert lmpipe.TESTED_KERAS == ((3, 15),)
    installed = tuple(int(part) for part in keras.__version__.split(".")[:2])
    assert installed in lmpipe.TESTED_KERAS


def test_an_untested_keras_gets_one_warning_line():
    with pytest.warns(UserWarning, match=r"tested with Keras 3\.15, but Keras 3\.16\.0 is") as seen:
        lmpipe._warn_if_keras_untested("3.16.0")
    assert len(seen) == 1 and "\n" not in str(seen[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lmpipe._warn_if_keras_untested("3.15.1")


# Private TensorFlow/Keras names as lmpipe's code would write them; only lmpipe.backend may.
PRIVATE_SPELLINGS = (
    "tensorflow.python",
    "tf.__internal__",
    "keras.src",
    "._loss_tracker",
    "._momentums",
    "._velocities",
    "._get_variable_index(",
    "._use_weight_decay(",
    '"_learning_rate"',
    "._distribution_strategy",
    "super()._clip_gradients(",
    "super()._apply_weight_decay(",
    "super()._maybe_symbolic_build(",
)


def test_only_the_backend_names_private_tensorflow_and_keras_symbols():
    found = [
        f"{path.relative_to(ROOT)}:{number}: {spelling}"
        for path in sorted((ROOT / "lmpipe").rglob("*.py"))
        if path.name != "backend.py" or path.parent != ROOT / "lmpipe"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        for spelling in PRIVATE_SPELLINGS
        if spelling in line
    ]
    assert not found, "wrap these in lmpipe.backend: " + "; ".join(found)
