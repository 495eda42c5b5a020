"""Checks of constructor arguments, so that bad values fail early with the argument's name."""

import math
import numbers


def check_dropout(name, value):
    """Raise if `value` is not a valid dropout rate in [0, 1)."""
    check_number(name, value, minimum=0, below=1)


def check_window(window):
    """Raise unless `window` is None or a positive integer."""
    if window is not None and (
        isinstance(window, bool) or not isinstance(window, int) or window < 1
    ):
        raise ValueError(f"`window` must be a positive integer or None, got window={window!r}.")


def check_positive_int(name, value):
    """Raise unless `value` is a positive integer."""
    check_number(name, value, minimum=1, integer=True)


def check_number(
    name, value, *, minimum=None, above=None, maximum=None, below=None, integer=False, none=False
):
    """Raise a ValueError naming `name` unless `value` is a finite real number in the bounds.

    The one check of numeric options everywhere lmpipe takes them (layers, model configs,
    pipelines, training options): NaN, infinities, bools and non-numbers are refused, with the
    option's name and value, before any work starts.

    Args:
        name: the option's name, for the message.
        value: what was given.
        minimum, above: `value >= minimum`, `value > above` (None: no lower bound).
        maximum, below: `value <= maximum`, `value < below` (None: no upper bound).
        integer: `value` must be an integer (a Python or NumPy integer).
        none: None is allowed too.

    Returns:
        `value`.

    Example:

    >>> check_number("weight_decay", float("nan"), minimum=0)
    Traceback (most recent call last):
    ...
    ValueError: `weight_decay` must be a finite number >= 0, got weight_decay=nan.
    """
    if value is None and none:
        return value
    kind = numbers.Integral if integer else numbers.Real
    valid = isinstance(value, kind) and not isinstance(value, bool)
    # An int of any size is finite (math.isfinite would overflow converting it to a float).
    valid = valid and (isinstance(value, numbers.Integral) or math.isfinite(value))
    if valid:
        valid = (
            (minimum is None or value >= minimum)
            and (above is None or value > above)
            and (maximum is None or value <= maximum)
            and (below is None or value < below)
        )
    if not valid:
        bounds = [
            f"{sign} {bound}"
            for sign, bound in ((">=", minimum), (">", above), ("<=", maximum), ("<", below))
            if bound is not None
        ]
        what = "an integer" if integer else "a finite number"
        requirement = " ".join([what, " and ".join(bounds)]).strip()
        if bounds == [">= 1"] and integer:
            requirement = "a positive integer"
        elif bounds == ["> 0"] and not integer:
            requirement = "a positive finite number"
        alternative = " or None" if none else ""
        raise ValueError(f"`{name}` must be {requirement}{alternative}, got {name}={value!r}.")
    return value
