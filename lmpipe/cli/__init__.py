"""The `lmpipe` command (`lmpipe.cli.main.main`; `python -m lmpipe.cli`). Nothing is imported
here: a command line is checked before TensorFlow is imported."""
