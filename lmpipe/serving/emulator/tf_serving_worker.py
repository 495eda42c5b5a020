"""The child process of `lmpipe.serving.emulator.compat.ServingProcess`: a SavedModel loaded as TF
Serving loads it, answering predict requests.

`ServingProcess` runs this file's source with `python -c SOURCE EXPORT_DIR LOADER` in an empty
working directory, so the process imports only the standard library, numpy, tensorflow and
tensorflow_text (which registers the tokenizer ops, as the TF Serving binary links them in),
never lmpipe (tensorflow imports the keras package by itself, but no Keras code is needed to
load or run the model). `LOADER` is:

- "tf1": TF Serving's path. `tf.compat.v1.saved_model.loader.load(session, ["serve"], dir)`
  restores the variables and runs the init op as the C++ loader does; a request is checked
  against the signature's `SignatureDef` (input names, dtypes strictly: int64 values for an
  int32 input are an error, as for the server) and run with `session.run` on the signature's
  tensor names.
- "tf2": `tf.saved_model.load` and the signature's concrete function, what TF2 clients do.

Protocol: pickled messages, each preceded by its length (8 bytes, big-endian), read from
stdin and written to the original stdout (the process' own stdout is redirected to stderr so
that no stray print breaks the stream). The first message out is
`("ready", {"signatures": ..., "modules": ...})` or `("error", type, message)`; then each
request `("predict", signature_name, {name: ndarray}, output_names or None)` is answered with
`("ok", {name: ndarray})` or `("error", type, message)`; `("close",)` or end of input stops.
"""

import os
import pickle
import struct
import sys


def _send(channel, message):
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    channel.write(struct.pack(">Q", len(data)) + data)
    channel.flush()


def _receive(stream):
    header = stream.read(8)
    if len(header) < 8:
        return None
    (size,) = struct.unpack(">Q", header)
    return pickle.loads(stream.read(size))


class RequestError(ValueError):
    """A request TF Serving would reject, with the reason it would give."""


def _request_dtype(name, value, np, tf):
    """The TensorFlow dtype a request value has, as a TensorProto made from it would."""
    if value.dtype.kind in "SU":
        return tf.string
    if value.dtype.kind == "O":
        if all(isinstance(item, (bytes, str)) for item in value.flat):
            return tf.string
        raise RequestError(f"Input '{name}' holds Python objects that are not strings.")
    try:
        return tf.as_dtype(value.dtype)
    except TypeError:
        raise RequestError(f"Input '{name}' has dtype {value.dtype}, unknown to TF.") from None


def _check_request(signature_name, expected, inputs, np, tf):
    """Raise RequestError unless `inputs` matches `expected` `{name: tf dtype}` exactly."""
    sent, required = set(inputs), set(expected)
    if sent != required:
        # TF Serving's message (predict_util.cc), with lmpipe's signature name in front.
        raise RequestError(
            f"Signature '{signature_name}': input size does not match signature: "
            f"{len(sent)}!={len(required)} len({{{','.join(sorted(sent))}}}) != "
            f"len({{{','.join(sorted(required))}}}). Sent extra: "
            f"{{{','.join(sorted(sent - required))}}}. Missing but required: "
            f"{{{','.join(sorted(required - sent))}}}."
        )
    arrays = {}
    for index, name in enumerate(sorted(expected)):
        value = np.asarray(inputs[name])
        dtype = _request_dtype(name, value, np, tf)
        if dtype != expected[name]:
            raise RequestError(
                f"Signature '{signature_name}', input '{name}': expects {expected[name].name} "
                f"but {dtype.name} is provided (TF Serving: 'Expects arg[{index}] to be "
                f"{expected[name].name} but {dtype.name} is provided'); send "
                f"{expected[name].name} values."
            )
        if dtype == tf.string and value.dtype.kind != "S":
            value = np.vectorize(
                lambda item: item.encode("utf-8") if isinstance(item, str) else item,
                otypes=[object],
            )(value)
        arrays[name] = value
    return arrays


class _TF1Server:
    """TF Serving's loading path: the TF1 loader, `session.run` by tensor names."""

    def __init__(self, export_dir, np, tf):
        self.np, self.tf = np, tf
        self.graph = tf.Graph()
        self.session = tf.compat.v1.Session(graph=self.graph)
        with self.graph.as_default():
            meta_graph = tf.compat.v1.saved_model.loader.load(self.session, ["serve"], export_dir)
        self.signatures = {
            name: signature
            for name, signature in meta_graph.signature_def.items()
            if not name.startswith("__")  # __saved_model_init_op: not a serving signature
        }

    def describe(self):
        def tensors(infos):
            return {
                key: {
                    "name": info.name,
                    "dtype": self.tf.as_dtype(info.dtype).name,
                    "shape": [dim.size for dim in info.tensor_shape.dim],
                }
                for key, info in infos.items()
            }

        return {
            name: {"inputs": tensors(sig.inputs), "outputs": tensors(sig.outputs)}
            for name, sig in self.signatures.items()
        }

    def predict(self, signature_name, inputs, output_names):
        tf = self.tf
        if signature_name not in self.signatures:
            raise RequestError(
                f'Serving signature name: "{signature_name}" not found in signature def '
                f"(available: {sorted(self.signatures)})."
            )
        signature = self.signatures[signature_name]
        expected = {name: tf.as_dtype(info.dtype) for name, info in signature.inputs.items()}
        arrays = _check_request(signature_name, expected, inputs, self.np, tf)
        fetches = _fetches(signature.outputs, output_names)
        feeds = {signature.inputs[name].name: value for name, value in arrays.items()}
        return self.session.run(
            {name: signature.outputs[name].name for name in fetches}, feed_dict=feeds
        )


class _TF2Server:
    """`tf.saved_model.load` and the signature functions, as a TF2 Python client."""

    def __init__(self, export_dir, np, tf):
        self.np, self.tf = np, tf
        self.loaded = tf.saved_model.load(export_dir, tags=["serve"])
        self.signatures = dict(self.loaded.signatures)

    def describe(self):
        def spec(tensor_spec):
            return {
                "name": tensor_spec.name,
                "dtype": tensor_spec.dtype.name,
                "shape": [-1 if dim is None else dim for dim in tensor_spec.shape.as_list()],
            }

        return {
            name: {
                "inputs": {k: spec(s) for k, s in function.structured_input_signature[1].items()},
                "outputs": {k: spec(s) for k, s in function.structured_outputs.items()},
            }
            for name, function in self.signatures.items()
        }

    def predict(self, signature_name, inputs, output_names):
        tf = self.tf
        if signature_name not in self.signatures:
            raise RequestError(
                f"Signature '{signature_name}' not found (available: {sorted(self.signatures)})."
            )
        function = self.signatures[signature_name]
        specs = function.structured_input_signature[1]
        expected = {name: spec.dtype for name, spec in specs.items()}
        arrays = _check_request(signature_name, expected, inputs, self.np, tf)
        outputs = function(**{name: tf.constant(value) for name, value in arrays.items()})
        return {name: outputs[name].numpy() for name in _fetches(outputs, output_names)}


def _fetches(outputs, output_names):
    if output_names is None:
        return sorted(outputs)
    unknown = sorted(set(output_names) - set(outputs))
    if unknown:
        raise RequestError(f"output tensor alias not found in signature: {', '.join(unknown)}")
    return list(output_names)


def main():
    export_dir, loader = sys.argv[1], sys.argv[2]
    channel = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    requests = sys.stdin.buffer
    try:
        import numpy as np
        import tensorflow as tf
        import tensorflow_text  # noqa: F401  (registers the tokenizer ops)

        server = (_TF1Server if loader == "tf1" else _TF2Server)(export_dir, np, tf)
    except Exception as error:
        _send(channel, ("error", type(error).__name__, str(error)))
        return 1
    modules = sorted({name.split(".")[0] for name in sys.modules})
    _send(channel, ("ready", {"signatures": server.describe(), "modules": modules}))
    while True:
        message = _receive(requests)
        if message is None or message[0] == "close":
            return 0
        _, signature_name, inputs, output_names = message
        try:
            outputs = server.predict(signature_name, inputs, output_names)
        except Exception as error:
            # tf.errors carry the server's message in `.message`; str() adds graph context.
            text = getattr(error, "message", None) or str(error)
            _send(channel, ("error", type(error).__name__, text))
            continue
        _send(channel, ("ok", {name: np.asarray(value) for name, value in outputs.items()}))


if __name__ == "__main__":
    sys.exit(main())
