"""Reproduces what TF Serving does with an export, for tests on machines without the server.

The TF Serving binary cannot be installed everywhere (nor docker), so these tools follow its
loading and request path with the pieces it is made of:

- `ServingProcess` / `run_tf1_loader`: a fresh Python process that imports only tensorflow and
  tensorflow_text (never lmpipe: the SavedModel must stand alone), loads the export
  with the TF1 loader (`tf.compat.v1.saved_model.loader.load(session, ["serve"], dir)`, what
  the server's C++ loader does), checks every request against the signature's `SignatureDef`
  as the server does (input names; dtypes strictly: int64 values for an int32 input are an
  error, not a cast) and runs it with `session.run` on the signature's tensor names.
- `ServingProcess.predict_rest`: a REST predict body through `lmpipe.serving.emulator.rest` (TF
  Serving's documented JSON API) and the same process.
- `replay_warmup`: every request of `assets.extra/tf_serving_warmup_requests` through that
  process, as the server replays them before serving a version.

Example:

    with ServingProcess("serving/bert/1") as server:
        outputs = server.predict("serve_text", {"text": np.array([b"To be, or not to be"])})
        response = server.predict_rest({"instances": [{"text": "To be, or not to be"}]})
"""

import contextlib
import importlib.resources
import os
import pickle
import shutil
import struct
import subprocess
import sys
import tempfile

from lmpipe.serving.emulator import rest
from lmpipe.serving.warmup import read_warmup_requests, request_inputs

LOADERS = ("tf1", "tf2")


class ServingError(RuntimeError):
    """A request the served model rejected or failed on, with the message the server gives."""

    def __init__(self, message, error_type=None):
        super().__init__(message)
        self.error_type = error_type


class ServingProcess:
    """A SavedModel loaded in a fresh process as TF Serving loads it; answers predict requests.

    The process is started once and keeps the model loaded, so a test can send many requests
    for the price of one load (a few seconds). Use it as a context manager, or call `close`.

    Args:
        export_dir: the SavedModel (version) directory.
        loader: "tf1" (the default): TF Serving's path, the TF1 loader and `session.run` by
            the signature's tensor names. "tf2": `tf.saved_model.load` and the signature's
            concrete function, as a TF2 Python client would.

    Attributes:
        signatures: `{signature name: {"inputs": {key: info}, "outputs": {key: info}}}` as the
            process sees them, each info a dict of `name` (tensor name), `dtype`, `shape`
            (-1 for unknown).
        modules: the top-level modules imported in the process after loading.

    Raises:
        ServingError: the process could not load the model (with its message).
    """

    def __init__(self, export_dir, loader="tf1"):
        if loader not in LOADERS:
            raise ValueError(f"`loader` must be one of {LOADERS}, got loader={loader!r}.")
        self.export_dir = os.path.abspath(os.fspath(export_dir))
        if not os.path.isfile(os.path.join(self.export_dir, "saved_model.pb")):
            raise ValueError(f"{self.export_dir} is not a SavedModel (no saved_model.pb).")
        self.loader = loader
        source = (
            importlib.resources.files("lmpipe.serving.emulator")
            .joinpath("tf_serving_worker.py")
            .read_text(encoding="utf-8")
        )
        # An empty working directory: `python -c` puts it first on sys.path, and nothing in it
        # may shadow a module.
        self._workdir = tempfile.mkdtemp(prefix="lmpipe-serving-")
        self._stderr_path = os.path.join(self._workdir, "stderr.log")
        env = dict(os.environ)
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        with open(self._stderr_path, "wb") as stderr:  # the child keeps its own descriptor
            self._process = subprocess.Popen(
                [sys.executable, "-c", source, self.export_dir, loader],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
                cwd=self._workdir,
                env=env,
            )
        try:
            kind, *payload = self._receive()
            if kind != "ready":
                raise ServingError(
                    f"Loading {self.export_dir} failed: {payload[0]}: {payload[1]}", payload[0]
                )
        except BaseException:
            self.close()
            raise
        self.signatures = payload[0]["signatures"]
        self.modules = payload[0]["modules"]

    def predict(self, signature_name, inputs, output_names=None):
        """Run one predict request; `{output name: numpy array}`.

        Args:
            signature_name: the signature to call.
            inputs: `{input name: array}`, exactly the signature's inputs with its dtypes
                (strings as bytes or str arrays).
            output_names: optional subset of outputs to fetch (TF Serving's `output_filter`).

        Raises:
            ServingError: what the server would answer: unknown signature, missing or extra
                inputs, a wrong dtype, a failed assertion or op in the graph.
        """
        self._send(("predict", signature_name, dict(inputs), output_names))
        kind, *payload = self._receive()
        if kind != "ok":
            raise ServingError(f"{payload[0]}: {payload[1]}", payload[0])
        return payload[0]

    def predict_rest(self, body):
        """A REST predict request body (JSON text or dict) -> the JSON response, as a dict.

        The body is translated with `lmpipe.serving.emulator.rest.rest_to_inputs` against this
        process' signatures, run with `predict`, and the outputs laid out as the server does
        (`{"predictions": ...}` for rows, `{"outputs": ...}` for columns).
        """
        body = rest.parse_body(body)
        name = rest.signature_name(body)
        if name not in self.signatures:
            raise rest.RestRequestError(
                f'Serving signature name: "{name}" not found in signature def '
                f"(available: {sorted(self.signatures)})."
            )
        dtypes = {key: info["dtype"] for key, info in self.signatures[name]["inputs"].items()}
        inputs = rest.rest_to_inputs(body, dtypes)
        return rest.outputs_to_rest(self.predict(name, inputs), rest.is_row_format(body))

    def close(self):
        """Stop the process and remove its files."""
        process = getattr(self, "_process", None)
        if process is not None and process.poll() is None:
            try:
                self._send(("close",))
                process.stdin.close()
                process.wait(timeout=30)
            except (OSError, ServingError, subprocess.TimeoutExpired):
                process.kill()
                process.wait()
        if process is not None:
            process.stdout.close()
            if process.stdin and not process.stdin.closed:
                process.stdin.close()
        self._process = None
        if getattr(self, "_workdir", None) is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def __del__(self):
        # At interpreter exit, modules close needs may already be gone.
        with contextlib.suppress(Exception):
            self.close()

    def _send(self, message):
        data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        try:
            self._process.stdin.write(struct.pack(">Q", len(data)) + data)
            self._process.stdin.flush()
        except (BrokenPipeError, AttributeError):
            raise ServingError(f"The serving process has stopped.{self._stderr_tail()}") from None

    def _receive(self):
        header = self._process.stdout.read(8)
        if len(header) < 8:
            self._process.wait()
            raise ServingError(
                f"The serving process stopped (exit code {self._process.returncode})."
                f"{self._stderr_tail()}"
            )
        (size,) = struct.unpack(">Q", header)
        return pickle.loads(self._process.stdout.read(size))

    def _stderr_tail(self, lines=20):
        try:
            with open(self._stderr_path, "rb") as file:
                tail = file.read().decode("utf-8", "replace").splitlines()[-lines:]
        except (OSError, AttributeError):
            return ""
        return "\nIts last output:\n" + "\n".join(tail) if tail else ""


def run_tf1_loader(export_dir, signature_name, inputs, output_names=None):
    """One request through TF Serving's loading path in a fresh process; the output arrays.

    Starts a `ServingProcess` (TF1 loader, `session.run` by tensor names, strict dtype checks),
    sends `inputs` to `signature_name` and stops it. To send several requests, use a
    `ServingProcess` directly and load once.
    """
    with ServingProcess(export_dir, loader="tf1") as server:
        return server.predict(signature_name, inputs, output_names)


def replay_warmup(export_dir, server=None):
    """Run every request of the export's warmup file as TF Serving does before serving it.

    Args:
        export_dir: the SavedModel (version) directory.
        server: an open `ServingProcess` on `export_dir` to use; a new one by default.

    Returns:
        A list of `(signature_name, outputs)`, one per record.

    Raises:
        ValueError: no warmup file, or a record that is not a predict `PredictionLog`.
        ServingError: a request fails (the server would refuse to load the version).
    """
    requests = [request_inputs(log) for log in read_warmup_requests(export_dir)]
    if not requests:
        raise ValueError(f"The warmup file of {export_dir} has no record.")
    if server is not None:
        return [(name, server.predict(name, inputs)) for name, inputs in requests]
    with ServingProcess(export_dir) as own_server:
        return [(name, own_server.predict(name, inputs)) for name, inputs in requests]


def read_signature_defs(export_dir, tags=("serve",)):
    """`{name: SignatureDef}` of the MetaGraph with `tags`, read from `saved_model.pb` (no
    graph is loaded); the internal `__saved_model_init_op` is left out."""
    from tensorflow.core.protobuf import saved_model_pb2

    path = os.path.join(os.fspath(export_dir), "saved_model.pb")
    saved_model = saved_model_pb2.SavedModel()
    with open(path, "rb") as file:
        saved_model.ParseFromString(file.read())
    for meta_graph in saved_model.meta_graphs:
        if set(meta_graph.meta_info_def.tags) == set(tags):
            return {
                name: signature
                for name, signature in meta_graph.signature_def.items()
                if not name.startswith("__")
            }
    raise ValueError(f"{path} has no MetaGraph with tags {sorted(tags)}.")
