"""A stand-in for TF Serving, for tests on machines without the server: what it does with an
export, reproduced with the pieces it is made of. Nothing an export needs lives here.

- `compat`: a fresh process that loads an export as TF Serving does (the TF1 loader,
  `session.run` by tensor names, strict request dtypes), and replays its warmup records;
  `tf_serving_worker` is that process' source.
- `rest`: TF Serving's REST predict JSON (row and columnar) to arrays and back.
"""

from lmpipe.serving.emulator.compat import (
    ServingError,
    ServingProcess,
    read_signature_defs,
    replay_warmup,
    run_tf1_loader,
)
from lmpipe.serving.emulator.rest import RestRequestError, outputs_to_rest, rest_to_inputs

__all__ = [
    "RestRequestError",
    "ServingError",
    "ServingProcess",
    "outputs_to_rest",
    "read_signature_defs",
    "replay_warmup",
    "rest_to_inputs",
    "run_tf1_loader",
]
