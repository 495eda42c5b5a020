"""lmpipe: pretrain and fine-tune language models with Keras 3 and TensorFlow, end to end.

The subpackages (`lmpipe.datasets`, `lmpipe.layers`, `lmpipe.models`, `lmpipe.pipelines`,
`lmpipe.tokenizers`) load on first use, so that `import lmpipe` and the `lmpipe` command's
`--help` do not start TensorFlow.
"""

import importlib
import os

# Keras 3 picks its backend from the environment; lmpipe's input pipelines, distribution and
# export are TensorFlow, so the backend must be too.
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

# The one place the version is written: setup.cfg reads it (`version = attr: ...`).
__version__ = "0.1.0"
__all__ = ["datasets", "layers", "models", "pipelines", "tokenizers"]


def __getattr__(name):
    if name in __all__:
        return importlib.import_module(f"lmpipe.{name}")
    raise AttributeError(f"module 'lmpipe' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + __all__)
