"""Checks of constructor arguments, so that bad values fail early with the argument's name."""


def check_dropout(name, value):
    """Raise if `value` is not a valid dropout rate in [0, 1)."""
    if not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
        raise ValueError(f"`{name}` must be a number in [0, 1), got {name}={value!r}.")


def check_window(window):
    """Raise unless `window` is None or a positive integer."""
    if window is not None and (
        isinstance(window, bool) or not isinstance(window, int) or window < 1
    ):
        raise ValueError(f"`window` must be a positive integer or None, got window={window!r}.")


def check_positive_int(name, value):
    """Raise unless `value` is a positive integer."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"`{name}` must be a positive integer, got {name}={value!r}.")
