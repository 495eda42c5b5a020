"""lmpipe: pretrain and fine-tune language models with Keras 3 and TensorFlow, end to end."""

import os

# Keras 3 picks its backend from the environment; lmpipe's input pipelines, distribution and
# export are TensorFlow, so the backend must be too.
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

from lmpipe import datasets, layers, models, pipelines  # noqa: E402

__version__ = "0.1.0"
__all__ = ["datasets", "layers", "models", "pipelines"]
