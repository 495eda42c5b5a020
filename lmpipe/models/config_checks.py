"""Validation shared by the model configuration dataclasses; errors name the field.

Built on `lmpipe.layers.arguments.check_number`, the one check of numeric options, so that a
NaN, an infinity or a string in a config is refused as it is anywhere else."""

from lmpipe.layers.arguments import check_number


def check_positive_integers(config, *names, optional=()):
    """Raise ValueError unless each field in `names` is a positive int (and each field in
    `optional` is one or None)."""
    for name in names + tuple(optional):
        check_number(name, getattr(config, name), minimum=1, integer=True, none=name in optional)


def check_positive_numbers(config, *names):
    """Raise ValueError unless each field in `names` (an epsilon, an initializer's range) is
    a finite number > 0."""
    for name in names:
        check_number(name, getattr(config, name), above=0)


def check_rates(config, *names):
    """Raise ValueError unless each field in `names` (a dropout rate) is in [0, 1)."""
    for name in names:
        check_number(name, getattr(config, name), minimum=0, below=1)


def check_heads(config):
    """Raise ValueError unless `hidden_dim` divides into `num_heads` heads."""
    if config.hidden_dim % config.num_heads:
        raise ValueError(
            f"`hidden_dim` ({config.hidden_dim}) must be divisible by `num_heads` "
            f"({config.num_heads})."
        )
