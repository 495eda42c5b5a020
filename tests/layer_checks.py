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
  another's values, which a shared initializer object would give);
- its weights: the expected numbers of trainable and non-trainable weights (if given), the
  same shapes in the `from_config` clone;
- a training step: every trainable weight gets a finite gradient (but those named in
  `unused_weights`), and one SGD step changes the outputs;
- mixed precision: built under the "mixed_bfloat16" policy its variables stay float32, its
  floating outputs are bfloat16 or float32, and, with the float32 layer's weights, they equal
  the float32 outputs to bfloat16 precision.

(keras-hub's `run_layer_test` makes the same checks of weight counts, a training step and
mixed precision.)
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
    expected_num_trainable_weights=None,
    expected_num_non_trainable_weights=None,
    unused_weights=(),
    run_training_step=True,
    run_mixed_precision=True,
):
    """Run the standard checks on `cls(**init_kwargs)` called on `inputs`; return the layer.

    `unused_weights`: substrings of the paths of trainable weights the call does not use
    (they get no gradient), e.g. a cross-attention that `inputs` leave out."""
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

    if expected_num_trainable_weights is not None:
        assert len(layer.trainable_weights) == expected_num_trainable_weights, [
            weight.path for weight in layer.trainable_weights
        ]
    if expected_num_non_trainable_weights is not None:
        assert len(layer.non_trainable_weights) == expected_num_non_trainable_weights, [
            weight.path for weight in layer.non_trainable_weights
        ]

    config = layer.get_config()
    clone = cls.from_config(config)
    assert clone.get_config() == config
    call(clone, inputs)
    assert [tuple(w.shape) for w in clone.weights] == [tuple(w.shape) for w in layer.weights]
    clone.set_weights(layer.get_weights())
    assert_trees_close(_as_numpy_tree(call(clone, inputs)), outputs)
    if run_training_step:
        check_training_step(clone, lambda: call(clone, inputs), unused_weights)
    if run_mixed_precision:
        check_mixed_precision(cls, init_kwargs, layer, call, inputs, outputs)

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


def _float_outputs(outputs):
    return [t for t in tf.nest.flatten(outputs) if keras.backend.is_float_dtype(t.dtype)]


def check_training_step(layer, forward, unused_weights=()):
    """Every trainable weight of `layer` gets a finite gradient of its outputs' sum (but those
    whose path contains one of `unused_weights`, which get none), and an SGD step on them
    changes the outputs."""
    if not layer.trainable_weights:
        return
    with tf.GradientTape() as tape:
        outputs = _float_outputs(forward())
        # A random projection, so that no gradient cancels out (as a plain sum can after a
        # normalization).
        loss = tf.add_n(
            [
                tf.reduce_sum(
                    tf.cast(t, tf.float32) * tf.random.stateless_normal(tf.shape(t), [1, 2])
                )
                for t in outputs
            ]
        )
    gradients = tape.gradient(loss, layer.trainable_weights)
    for weight, gradient in zip(layer.trainable_weights, gradients, strict=True):
        unused = any(name in weight.path for name in unused_weights)
        if unused:
            continue
        assert gradient is not None, f"{weight.path} gets no gradient"
        gradient = tf.convert_to_tensor(gradient)
        assert np.all(np.isfinite(gradient.numpy())), weight.path
    before = _as_numpy_tree(_float_outputs(forward()))
    keras.optimizers.SGD(0.1).apply(
        [g for g in gradients if g is not None],
        [w for w, g in zip(layer.trainable_weights, gradients, strict=True) if g is not None],
    )
    after = _as_numpy_tree(_float_outputs(forward()))
    assert any(not np.allclose(a, b) for a, b in zip(after, before, strict=True)), (
        "a training step leaves the outputs unchanged"
    )


def check_mixed_precision(cls, init_kwargs, layer, call, inputs, outputs):
    """`cls(**init_kwargs)` under "mixed_bfloat16": float32 variables, bfloat16 (or float32)
    outputs equal to the float32 layer's `outputs` to bfloat16 precision, with its weights."""
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy("mixed_bfloat16")
    try:
        mixed = cls(**init_kwargs)
        call(mixed, inputs)
    finally:
        keras.config.set_dtype_policy(previous)
    for weight in mixed.weights:
        assert weight.dtype in ("float32", "int32", "int64", "bool"), (weight.path, weight.dtype)
    mixed.set_weights(layer.get_weights())
    mixed_outputs = call(mixed, inputs)
    for tensor in _float_outputs(mixed_outputs):
        assert tensor.dtype in ("bfloat16", "float32"), tensor.dtype
    for actual, expected in zip(
        tf.nest.flatten(_as_numpy_tree(mixed_outputs)), tf.nest.flatten(outputs), strict=True
    ):
        if not np.issubdtype(np.asarray(expected).dtype, np.floating):
            continue
        actual = np.asarray(actual, np.float32)
        scale = 1.0 + float(np.max(np.abs(expected))) if np.size(expected) else 1.0
        # bfloat16 keeps 8 bits of mantissa: errors of a few 1e-2 of the outputs' scale.
        np.testing.assert_allclose(actual, expected, atol=0.1 * scale, rtol=0)
