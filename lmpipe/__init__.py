"""lmpipe: pretrain and fine-tune language models with Keras 3 and TensorFlow, end to end.

The subpackages (`lmpipe.datasets`, `lmpipe.layers`, `lmpipe.models`, `lmpipe.pipelines`,
`lmpipe.tokenizers`) load on first use, so that `import lmpipe` and the `lmpipe` command's
`--help` do not start TensorFlow.
"""

import importlib
import importlib.metadata
import os
import warnings

# Keras 3 picks its backend from the environment; lmpipe's input pipelines, distribution and
# export are TensorFlow, so the backend must be too.
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

# The one place the version is written: setup.cfg reads it (`version = attr: ...`).
__version__ = "0.1.0"
__all__ = ["datasets", "layers", "models", "pipelines", "tokenizers"]

# The Keras minor versions lmpipe's tests passed on, as setup.cfg pins them
# (`keras>=3.15,<3.16`): lmpipe overrides some of Keras' private hooks (see `lmpipe.backend`),
# which another minor version may move.
TESTED_KERAS = ((3, 15),)


def _warn_if_keras_untested(version=None):
    """Warn, in one line, where the installed Keras is not a minor version lmpipe was tested
    with (read from the package's metadata: Keras itself is not imported here)."""
    if version is None:
        try:
            version = importlib.metadata.version("keras")
        except importlib.metadata.PackageNotFoundError:
            return  # importing the subpackages says so
    try:
        minor = tuple(int(part) for part in version.split(".")[:2])
    except ValueError:
        minor = None
    if minor not in TESTED_KERAS:
        tested = ", ".join(f"{major}.{minor}" for major, minor in TESTED_KERAS)
        warnings.warn(
            f"lmpipe was tested with Keras {tested}, but Keras {version} is installed: "
            f"lmpipe.backend's calls into Keras may fail; install keras=={tested}.* "
            "(as setup.cfg pins it) if they do.",
            stacklevel=3,
        )


_warn_if_keras_untested()


def __getattr__(name):
    if name in __all__:
        return importlib.import_module(f"lmpipe.{name}")
    raise AttributeError(f"module 'lmpipe' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + __all__)
