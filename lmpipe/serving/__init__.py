"""SavedModel export for TensorFlow Serving, and tools that reproduce how the server loads it.

- `export_saved_model(base_dir, model, tokenizer, seq_len)`: `<base_dir>/<version>/`, written
  atomically, with the `serving_default`, `serve_text` and `serve_text_pair` signatures and
  warmup records.
- `export_text_function(base_dir, module, function)`: a text-in signature (translation,
  generation, word vectors) as `serving_default`, written the same way.
- `lmpipe.serving.emulator` (for tests, apart from what an export needs): `compat`, a fresh
  process that loads an export as TF Serving does (TF1 loader, `session.run` by tensor names,
  strict request dtypes) and replays its warmup records; `rest`, TF Serving's REST predict
  JSON (row and columnar) to arrays and back. Its names are re-exported here.
"""

from lmpipe.datasets.examples.packing import pack_texts, truncate_longest_first
from lmpipe.serving.emulator.compat import (
    ServingError,
    ServingProcess,
    read_signature_defs,
    replay_warmup,
    run_tf1_loader,
)
from lmpipe.serving.emulator.rest import RestRequestError, outputs_to_rest, rest_to_inputs
from lmpipe.serving.export import (
    SERVE_TEXT,
    SERVE_TEXT_PAIR,
    SERVING_DEFAULT,
    ServingModule,
    export_saved_model,
    saveable_variables,
)
from lmpipe.serving.text_export import export_text_function
from lmpipe.serving.warmup import read_warmup_requests

__all__ = [
    "SERVE_TEXT",
    "SERVE_TEXT_PAIR",
    "SERVING_DEFAULT",
    "RestRequestError",
    "ServingError",
    "ServingModule",
    "ServingProcess",
    "export_saved_model",
    "export_text_function",
    "outputs_to_rest",
    "pack_texts",
    "read_signature_defs",
    "read_warmup_requests",
    "replay_warmup",
    "rest_to_inputs",
    "run_tf1_loader",
    "saveable_variables",
    "truncate_longest_first",
]
