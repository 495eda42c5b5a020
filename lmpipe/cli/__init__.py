"""The `lmpipe` command. Standard library only at import: a command line is checked before
TensorFlow is imported."""

from lmpipe.cli.main import main

__all__ = ["main"]
