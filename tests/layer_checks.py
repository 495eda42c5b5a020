"""One way to check every layer: shape, config round trip, .keras round trip, graph modes.

`check_layer(cls, init_kwargs, inputs, call_kwargs)` builds the layer on `inputs` (a dict of
named NumPy arrays passed as keyword arguments, the first one positionally) and asserts:
- the output shape equals `expected_output_shape` (if given);
- `cls.from_config(layer.get_config())` gives the same config, and the same outputs once the
  weights are copied;
- a functional model around the layer survives `model.save("x.keras")` / `keras.models.load_model`
  with identical outputs;
- the layer gives the same outputs inside `tf.function`, `tf.function(jit_compile=True)` and a
  `tf.data` map;
- its randomly initialized weights are drawn independently (no weight starts as a copy of
  another's values, which a shared initializer object would give).
"""

import keras
import numpy as np
import tensorflow as tf


def _first(outputs):
    if isinstance(outputs, (tuple, list)):
        return outputs[0]
    if isinstance(outputs, dict):
        return outputs[sorted(outputs)[0]]
    return outputs


def _as_numpy_tree(outputs):
    # Keras restores a functional model's tuple outputs as lists: compare them as lists.
    if isinstance(outputs, tuple):
        outputs = list(outputs)
    return tf.nest.map_structure(lambda t: np.asarray(keras.ops.convert_to_numpy(t)), outputs)


def assert_trees_close(actual, expected, atol=1e-5):
    tf.nest.assert_same_structure(actual, expected)
    for a, e in zip(tf.nest.flatten(actual), tf.nest.flatten(expected), strict=True):
        np.testing.assert_allclose(a, e, atol=atol, rtol=1e-5)


def assert_weights_drawn_independently(layer):
    """No two randomly initialized weights of `layer` start with the same values (an
    initializer object reused by two sublayers draws the same numbers for both)."""
    drawn = [
        (weight.path, np.asarray(weight.numpy(), np.float64).ravel())
        for weight in layer.weights
        if len(np.unique(weight.numpy())) > 2  # random, not constants such as LSTM biases
    ]
    for index, (path, values) in enumerate(drawn):
        for other_path, other in drawn[index + 1 :]:
            common = min(len(values), len(other))
            assert not np.array_equal(values[:common], other[:common]), (path, other_path)


def check_layer(
    cls,
    init_kwargs,
    inputs,
    call_kwargs=None,
    expected_output_shape=None,
    tmp_path=None,
    run_jit=True,
):
    """Run the standard checks on `cls(**init_kwargs)` called on `inputs`; return the layer."""
    call_kwargs = dict(call_kwargs or {})
    names = list(inputs)
    first, rest = inputs[names[0]], {name: inputs[name] for name in names[1:]}

    def call(layer, tensors):
        values = [tensors[name] for name in names]
        return layer(values[0], **dict(zip(names[1:], values[1:], strict=True)), **call_kwargs)

    layer = cls(**init_kwargs)
    outputs = _as_numpy_tree(layer(first, **rest, **call_kwargs))
    if expected_output_shape is not None:
        assert _first(outputs).shape == tuple(expected_output_shape)
    assert_weights_drawn_independently(layer)

    config = layer.get_config()
    clone = cls.from_config(config)
    assert clone.get_config() == config
    call(clone, inputs)
    clone.set_weights(layer.get_weights())
    assert_trees_close(_as_numpy_tree(call(clone, inputs)), outputs)

    graph = tf.function(lambda tensors: call(layer, tensors))
    assert_trees_close(_as_numpy_tree(graph(inputs)), outputs, atol=1e-4)
    if run_jit:
        compiled = tf.function(lambda tensors: call(layer, tensors), jit_compile=True)
        assert_trees_close(_as_numpy_tree(compiled(inputs)), outputs, atol=1e-4)

    dataset = tf.data.Dataset.from_tensors(inputs).map(lambda tensors: call(layer, tensors))
    assert_trees_close(_as_numpy_tree(next(iter(dataset))), outputs, atol=1e-4)

    if tmp_path is not None:
        symbolic = {
            name: keras.Input(
                shape=value.shape[1:], batch_size=value.shape[0], dtype=str(value.dtype), name=name
            )
            for name, value in inputs.items()
        }
        model = keras.Model(symbolic, call(layer, symbolic))
        path = str(tmp_path / f"{cls.__name__}.keras")
        model.save(path)
        restored = keras.models.load_model(path)
        assert_trees_close(_as_numpy_tree(restored(inputs)), _as_numpy_tree(model(inputs)))
    return layer
