"""TF Serving warmup records: `assets.extra/tf_serving_warmup_requests` in a SavedModel.

When TF Serving loads a version, before it serves it, it replays the requests of this file
(a TFRecord of `tensorflow_serving.apis.prediction_log_pb2.PredictionLog`), so that the first
real request does not pay for graph initialization and memory allocation. The records are made
with tensorflow-serving-api's own protos; the server ignores the model name in them.
"""

import os

import numpy as np
import tensorflow as tf

WARMUP_DIRECTORY = "assets.extra"
WARMUP_FILE = "tf_serving_warmup_requests"


def _apis():
    try:
        from tensorflow_serving.apis import model_pb2, predict_pb2, prediction_log_pb2
    except ImportError as error:  # pragma: no cover - a dependency of lmpipe
        raise ImportError(
            "Warmup records need the tensorflow-serving-api package: "
            "pip install 'tensorflow-serving-api==2.21.*'."
        ) from error
    return model_pb2, predict_pb2, prediction_log_pb2


def warmup_path(export_dir):
    """Path of the warmup file in the SavedModel directory `export_dir`."""
    return os.path.join(os.fspath(export_dir), WARMUP_DIRECTORY, WARMUP_FILE)


def prediction_log(model_name, signature_name, inputs):
    """A `PredictionLog` holding one `PredictRequest` for `signature_name`.

    Args:
        model_name: the model's name (put in `model_spec.name`; TF Serving ignores it here).
        signature_name: the signature the request calls.
        inputs: `{input name: array-like}`; every value becomes a `TensorProto` with
            `tf.make_tensor_proto`, keeping its dtype (so it must already be the signature's).
    """
    model_pb2, predict_pb2, prediction_log_pb2 = _apis()
    request = predict_pb2.PredictRequest(
        model_spec=model_pb2.ModelSpec(name=model_name, signature_name=signature_name)
    )
    for name, value in inputs.items():
        request.inputs[name].CopyFrom(tf.make_tensor_proto(value))
    return prediction_log_pb2.PredictionLog(
        predict_log=prediction_log_pb2.PredictLog(request=request)
    )


def write_warmup_requests(export_dir, logs):
    """Write `PredictionLog`s to `export_dir/assets.extra/tf_serving_warmup_requests`."""
    path = warmup_path(export_dir)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with tf.io.TFRecordWriter(path) as writer:
        for log in logs:
            writer.write(log.SerializeToString())
    return path


def read_warmup_requests(export_dir):
    """The `PredictionLog`s of a SavedModel's warmup file, parsed with the serving protos.

    Raises:
        ValueError: the file is missing, or a record is not a `PredictionLog`.
    """
    _, _, prediction_log_pb2 = _apis()
    path = warmup_path(export_dir)
    if not os.path.isfile(path):
        raise ValueError(f"No warmup file: {path} does not exist.")
    logs = []
    for index, record in enumerate(tf.data.TFRecordDataset(path).as_numpy_iterator()):
        log = prediction_log_pb2.PredictionLog()
        try:
            log.ParseFromString(record)
        except Exception as error:  # protobuf's DecodeError
            raise ValueError(f"{path}, record {index}: not a PredictionLog ({error}).") from None
        logs.append(log)
    return logs


def request_inputs(log):
    """`(signature_name, {input name: numpy array})` of a `PredictionLog` with a predict log.

    The signature name is "serving_default" when the request leaves it empty, as for TF
    Serving.
    """
    if log.WhichOneof("log_type") != "predict_log":
        raise ValueError(
            f"Only predict requests are supported, got a {log.WhichOneof('log_type')!r} record."
        )
    request = log.predict_log.request
    inputs = {name: np.asarray(tf.make_ndarray(proto)) for name, proto in request.inputs.items()}
    return request.model_spec.signature_name or "serving_default", inputs
