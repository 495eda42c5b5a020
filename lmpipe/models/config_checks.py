"""Validation shared by the model configuration dataclasses; errors name the field."""


def check_positive_integers(config, *names, optional=()):
    """Raise ValueError unless each field in `names` is a positive int (and each field in
    `optional` is one or None)."""
    for name in names + tuple(optional):
        value = getattr(config, name)
        if value is None and name in optional:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            allowed = " or None" if name in optional else ""
            raise ValueError(f"`{name}` must be a positive integer{allowed}, got {name}={value!r}.")


def check_rates(config, *names):
    """Raise ValueError unless each field in `names` (a dropout rate) is in [0, 1)."""
    for name in names:
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
            raise ValueError(f"`{name}` must be in [0, 1), got {name}={value!r}.")


def check_heads(config):
    """Raise ValueError unless `hidden_dim` divides into `num_heads` heads."""
    if config.hidden_dim % config.num_heads:
        raise ValueError(
            f"`hidden_dim` ({config.hidden_dim}) must be divisible by `num_heads` "
            f"({config.num_heads})."
        )
