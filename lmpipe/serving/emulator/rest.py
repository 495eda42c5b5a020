"""TF Serving's REST predict API: JSON request bodies to input arrays, outputs to JSON responses.

Follows the documented API (https://www.tensorflow.org/tfx/serving/api_rest, "Predict API")
and the server's JSON codec (`tensorflow_serving/util/json_tensor.cc`), so that tests can
check what a client's request would do without the server:

- Row format, `{"instances": [...]}`: a list of examples, each an object `{input name: value}`
  with every input of the signature, or a plain value when the signature has one input. The
  examples are stacked on a new batch dimension and must all have the same shape.
- Columnar format, `{"inputs": {input name: value}}` (or one value for a one-input signature):
  every value is the whole tensor, batch dimension included.
- `"signature_name"` picks the signature ("serving_default" if absent).
- Values are nested lists of JSON scalars, checked strictly against the signature's dtypes:
  integers (not `1.0`, not `true`) within the range of the integer type, numbers for floats
  (`NaN`, `Infinity` allowed; an integer a float32 cannot hold exactly is an error), `true` /
  `false` for booleans, strings or `{"b64": "<base64>"}` for strings.
- Responses: a row-format request gets `{"predictions": [...]}`, one entry per example, an
  object `{output name: value}` if there are several outputs, the bare value if there is one;
  a columnar request gets `{"outputs": {output name: value}}` (or the bare value). Floats are
  written as the server writes them: the shortest of `%g` and `%.9g` that reads back exactly.

One deliberate difference: a columnar request with inputs the signature does not have is an
error here, where the server silently ignores them.
"""

import base64
import binascii
import json
import math
from collections.abc import Mapping

import numpy as np
import tensorflow as tf

DEFAULT_SIGNATURE = "serving_default"

_INTEGER_RANGES = {
    dtype: (int(np.iinfo(dtype.as_numpy_dtype).min), int(np.iinfo(dtype.as_numpy_dtype).max))
    for dtype in (tf.int8, tf.uint8, tf.int16, tf.int32, tf.int64, tf.uint32, tf.uint64)
}
_FLOAT_EXACT_INTEGERS = {tf.float32: 2**24 - 1, tf.float64: 2**53 - 1}
_FLOAT_MAX = {tf.float32: float(np.finfo(np.float32).max), tf.float64: float(np.finfo(float).max)}
# TensorFlow's most dimensions of a tensor: a value nested deeper is no tensor.
_MAX_RANK = 254


class RestRequestError(ValueError):
    """A REST request body TF Serving would reject (HTTP 400), with the reason."""


def parse_body(body):
    """A request body as a dict: JSON text (str or bytes) is parsed, `NaN` and `Infinity`
    accepted as the server does; a dict is taken as it is."""
    if isinstance(body, (str, bytes, bytearray)):
        if not body:
            raise RestRequestError("JSON Parse error: The document is empty")
        try:
            body = json.loads(body)
        except ValueError as error:
            raise RestRequestError(f"JSON Parse error: {error}") from None
        except RecursionError:
            # Python's parser recurses once a level; the server answers 400 here too.
            raise RestRequestError(
                "JSON Parse error: the document nests arrays or objects too deeply."
            ) from None
    if not isinstance(body, Mapping):
        raise RestRequestError(f"The request body must be a JSON object, got {body!r:.80}.")
    return body


def signature_name(body):
    """The signature a request body calls: its `signature_name`, or "serving_default"."""
    name = parse_body(body).get("signature_name", DEFAULT_SIGNATURE)
    if not isinstance(name, str):
        raise RestRequestError("'signature_name' key must be a string value.")
    return name


def is_row_format(body):
    """True for a row-format body (`instances`), False for a columnar one (`inputs`)."""
    body = parse_body(body)
    if ("instances" in body) == ("inputs" in body):
        raise RestRequestError(
            "The request body needs exactly one of 'instances' (row format) or 'inputs' "
            f"(columnar format), got keys {sorted(body)}."
        )
    return "instances" in body


def rest_to_inputs(body, signature_def):
    """The input arrays a TF Serving REST predict body gives, checked against a signature.

    Args:
        body: the JSON body (text, bytes or an already parsed dict), row or columnar format.
        signature_def: the signature's `SignatureDef` proto, a dict `{signature name:
            SignatureDef}` (the body's `signature_name` picks one; see
            `lmpipe.serving.emulator.compat.read_signature_defs`), or a dict `{input name: dtype}`.

    Returns:
        `{input name: numpy array}` with the signature's dtypes (strings as an object array of
        bytes).

    Raises:
        RestRequestError: what the server would answer with HTTP 400: a malformed body,
            missing or unknown inputs, ragged lists, values of the wrong JSON type or out of
            range, invalid base64.
    """
    body = parse_body(body)
    dtypes = _input_dtypes(signature_def, signature_name(body))
    if is_row_format(body):
        return _from_instances(body["instances"], dtypes)
    return _from_inputs(body["inputs"], dtypes)


def outputs_to_rest(outputs, row_format):
    """The JSON response (as a dict) TF Serving sends for `outputs` `{name: array}`.

    Args:
        outputs: the output arrays of a predict call.
        row_format: True for a row-format request (`{"predictions": [...]}`), False for a
            columnar one (`{"outputs": ...}`).

    Raises:
        ValueError: in row format, outputs without a batch dimension or with different batch
            sizes (the server answers with an error too).
    """
    if not outputs:
        raise ValueError("Cannot convert empty tensor map to JSON")
    arrays = {name: np.asarray(value) for name, value in sorted(outputs.items())}
    if not row_format:
        values = {name: _to_json(name, array) for name, array in arrays.items()}
        return {"outputs": values if len(values) > 1 else next(iter(values.values()))}
    batch_sizes = set()
    for name, array in arrays.items():
        if array.ndim == 0:
            raise ValueError(f"Tensor name: {name} has no shape information")
        batch_sizes.add(array.shape[0])
    if len(batch_sizes) > 1:
        raise ValueError(f"Outputs have inconsistent batch sizes: {sorted(batch_sizes)}")
    columns = {name: _to_json(name, array) for name, array in arrays.items()}
    rows = []
    for index in range(batch_sizes.pop()):
        if len(columns) == 1:
            rows.append(next(iter(columns.values()))[index])
        else:
            rows.append({name: column[index] for name, column in columns.items()})
    return {"predictions": rows}


def format_float(value, dtype=np.float32):
    """A float as TF Serving writes it: `%g`, or `%.9g` (`%.17g` for doubles) if `%g` does not
    read back to the same value, with ".0" added to whole numbers; returned as a Python float
    whose `repr` is that text."""
    value = dtype(value)
    if not np.isfinite(value):
        return float(value)
    text = f"{float(value):g}"
    if dtype(text) != value:
        digits = 9 if dtype == np.float32 else 17
        text = f"{float(value):.{digits}g}"
    return float(text)


# ---------------------------------------------------------------------------- implementation


def _input_dtypes(signature_def, name):
    """`{input name: tf.DType}` of the signature a request calls."""
    if isinstance(signature_def, Mapping):
        values = list(signature_def.values())
        if values and all(hasattr(value, "inputs") for value in values):
            if name not in signature_def:
                raise RestRequestError(
                    f'Serving signature name: "{name}" not found in signature def '
                    f"(available: {sorted(signature_def)})."
                )
            signature_def = signature_def[name]
        else:
            return {key: tf.as_dtype(dtype) for key, dtype in signature_def.items()}
    if not hasattr(signature_def, "inputs"):
        raise TypeError(
            "`signature_def` must be a SignatureDef, a dict of them, or {input name: dtype}, "
            f"got {type(signature_def).__name__}."
        )
    return {key: tf.as_dtype(info.dtype) for key, info in signature_def.inputs.items()}


def _is_b64(value):
    return isinstance(value, Mapping) and len(value) == 1 and isinstance(value.get("b64"), str)


def _from_instances(instances, dtypes):
    if not isinstance(instances, list):
        raise RestRequestError("Excepting 'instances' to be an list/array")
    if not instances:
        raise RestRequestError("No values in 'instances' array")
    objects = isinstance(instances[0], Mapping) and not _is_b64(instances[0])
    if not objects and len(dtypes) > 1:
        raise RestRequestError(
            "instances is a plain list, but expecting list of objects as multiple input "
            f"tensors required as per tensorinfo_map ({', '.join(sorted(dtypes))})"
        )
    columns = {name: [] for name in dtypes}
    for index, instance in enumerate(instances):
        is_object = isinstance(instance, Mapping) and not _is_b64(instance)
        if objects and not is_object:
            raise RestRequestError(f"Expecting object but got list at item {index} of input list")
        if not objects and is_object:
            raise RestRequestError(f"Expecting value/list but got object at item {index}")
        if objects:
            if set(instance) != set(dtypes):
                raise RestRequestError(
                    f"Failed to process element: {index} of 'instances' list. JSON object keys "
                    f"{sorted(instance)} must be equal to: {','.join(sorted(dtypes))}"
                )
            items = instance.items()
        else:
            items = [(next(iter(dtypes)), instance)]
        for name, value in items:
            try:
                array = _to_array(value, dtypes[name])
            except RestRequestError as error:
                raise RestRequestError(
                    f"Failed to process element: {index} key: {name} of 'instances' list. "
                    f"Error: {error}"
                ) from None
            if columns[name] and columns[name][0].shape != array.shape:
                raise RestRequestError(
                    f"Failed to process element: {index} key: {name} of 'instances' list. "
                    f"Expecting shape {list(columns[name][0].shape)} but got: "
                    f"{list(array.shape)}"
                )
            columns[name].append(array)
    return {name: np.stack(arrays) for name, arrays in columns.items()}


def _from_inputs(inputs, dtypes):
    if not isinstance(inputs, Mapping) or _is_b64(inputs):
        if len(dtypes) > 1:
            raise RestRequestError(
                "inputs is a plain value/list, but expecting an object as multiple input "
                f"tensors required as per tensorinfo_map ({', '.join(sorted(dtypes))})"
            )
        name = next(iter(dtypes))
        return {name: _to_array(inputs, dtypes[name])}
    unknown = sorted(set(inputs) - set(dtypes))
    if unknown:
        raise RestRequestError(
            f"'inputs' has {unknown}, not inputs of the signature ({sorted(dtypes)}); "
            "TF Serving would ignore them silently."
        )
    arrays = {}
    for name, dtype in dtypes.items():
        if name not in inputs:
            raise RestRequestError(f"Missing named input: {name} in 'inputs' object.")
        try:
            arrays[name] = _to_array(inputs[name], dtype)
        except RestRequestError as error:
            raise RestRequestError(f"Input {name}: {error}") from None
    return arrays


def _shape(value):
    """The dense shape of nested lists, read along the first elements (as the server does)."""
    shape = []
    while isinstance(value, list):
        shape.append(len(value))
        if not value:
            break
        value = value[0]
    return shape


def _to_array(value, dtype):
    """Nested JSON lists of scalars -> a numpy array of `dtype`, checked strictly."""
    shape = _shape(value)
    if len(shape) > _MAX_RANK:
        raise RestRequestError(
            f"Lists nested {len(shape)} deep: a tensor has at most {_MAX_RANK} dimensions."
        )
    flat = []

    def walk(item, level):
        if isinstance(item, list):
            if level >= len(shape):
                raise RestRequestError(
                    f"Encountered list at unexpected level: {level} expected < {len(shape)}"
                )
            if len(item) != shape[level]:
                raise RestRequestError(
                    f"Encountered list at unexpected size: {len(item)} at level: {level} "
                    f"expected size: {shape[level]}"
                )
            for element in item:
                walk(element, level + 1)
            return
        if level != len(shape):
            raise RestRequestError(
                f"JSON Value: {_show(item)} found at incorrect level: {level + 1} in the JSON "
                f"DOM. Expected at level: {len(shape)}"
            )
        flat.append(_scalar(item, dtype))

    walk(value, 0)
    if dtype == tf.string:
        array = np.empty(len(flat), dtype=object)
        array[:] = flat
    else:
        array = np.array(flat, dtype=dtype.as_numpy_dtype)
    return array.reshape(shape)


def _scalar(value, dtype):
    """One JSON scalar as a value of `dtype`; RestRequestError if the server would reject it."""
    if dtype == tf.string:
        if isinstance(value, str):
            try:
                return value.encode("utf-8")
            except UnicodeEncodeError:  # "\ud800": JSON escapes any code unit, UTF-8 not
                raise RestRequestError(
                    f"JSON Parse error: The surrogate pair in string is invalid: {_show(value)}"
                ) from None
        if _is_b64(value):
            try:
                return base64.b64decode(value["b64"], validate=True)
            except (binascii.Error, ValueError):
                raise RestRequestError("Unable to base64 decode") from None
        if isinstance(value, Mapping):
            raise RestRequestError(
                f"JSON Value: {_show(value)} not formatted correctly for base64 data"
            )
    elif dtype == tf.bool:
        if isinstance(value, bool):
            return value
    elif dtype in _INTEGER_RANGES:
        if isinstance(value, int) and not isinstance(value, bool):
            low, high = _INTEGER_RANGES[dtype]
            if low <= value <= high:
                return value
            raise RestRequestError(
                f"JSON Value: {value} Type: Number is not of expected type: {dtype.name} "
                f"(outside [{low}, {high}])"
            )
    elif dtype in _FLOAT_EXACT_INTEGERS:
        if isinstance(value, int) and not isinstance(value, bool):
            if abs(value) <= _FLOAT_EXACT_INTEGERS[dtype]:
                return value
            raise RestRequestError(
                f"Cannot convert JSON value: {value} to {dtype.name} without loss of precision."
            )
        if isinstance(value, float):
            if not math.isfinite(value) or abs(value) <= _FLOAT_MAX[dtype]:
                return value
            raise RestRequestError(
                f"Cannot convert JSON value: {value} to {dtype.name} without loss of precision."
            )
    else:
        raise RestRequestError(f"Conversion of JSON Value: {_show(value)} to type: {dtype.name}")
    raise RestRequestError(
        f"JSON Value: {_show(value)} Type: {_json_type(value)} is not of expected type: "
        f"{dtype.name}"
    )


def _json_type(value):
    if value is None:
        return "Null"
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, (int, float)):
        return "Number"
    if isinstance(value, str):
        return "String"
    return "Object" if isinstance(value, Mapping) else "Array"


def _show(value):
    """`value` as JSON (ASCII, lone surrogates escaped), cut to 80 characters."""
    try:
        return json.dumps(value)[:80]
    except (RecursionError, TypeError, ValueError):
        return f"<{type(value).__name__} nested too deeply to show>"


def _to_json(name, array):
    """An output array as nested lists of JSON values, as the server writes them."""
    if array.dtype.kind == "f":
        dtype = np.float64 if array.dtype == np.float64 else np.float32
        converted = np.vectorize(lambda x: format_float(x, dtype), otypes=[object])(array)
        return converted.tolist() if array.ndim else converted.item()
    if array.dtype.kind in "OSU":

        def text(item):
            item = item.encode("utf-8") if isinstance(item, str) else bytes(item)
            if name.endswith("_bytes"):
                return {"b64": base64.b64encode(item).decode("ascii")}
            try:
                return item.decode("utf-8")
            except UnicodeDecodeError:
                raise ValueError(
                    f"Output {name!r} holds bytes that are not UTF-8; name it '..._bytes' to "
                    "have it sent as base64."
                ) from None

        converted = np.vectorize(text, otypes=[object])(array)
        return converted.tolist() if array.ndim else converted.item()
    return array.tolist()
