"""The checks of arguments and options, used wherever lmpipe takes a value from its user.

Every floor (layers, datasets, models, pipelines, serving, the CLI) checks the values it takes
with these functions, once, where the value enters: a bad value fails before any work with an
error that names it. The module imports nothing of lmpipe's, so that every floor can use it.
"""

import math
import numbers
import os


def check_inside(folder, name, source, key):
    """Raise unless the relative path `name` (read from the file `source`, under `key`) stays
    inside `folder` once joined to it: no absolute path, no `..` leading out and, for a local
    folder, no symbolic link leading out. Return the joined path.

    A saved folder names its own files; a name that leaves it would read (and an export would
    publish) any file of the machine.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"{source}: `{key}` must be a file name, got {name!r}.")
    folder = os.fspath(folder)
    path = os.path.join(folder, name)
    normalized = os.path.normpath(name.replace("\\", "/"))
    leaves = os.path.isabs(normalized) or normalized.split("/")[0] == ".."
    if not leaves and "://" not in folder:
        root = os.path.realpath(folder)
        leaves = os.path.commonpath([root, os.path.realpath(path)]) != root
    if leaves:
        raise ValueError(
            f"{source}: `{key}` names {name!r}, which is outside {folder!r}; a saved folder may "
            "only name files inside it."
        )
    return path


def check_dropout(name, value):
    """Raise if `value` is not a valid dropout rate in [0, 1)."""
    check_number(name, value, minimum=0, below=1)


def check_window(window):
    """Raise unless `window` is None or a positive integer."""
    check_number("window", window, minimum=1, integer=True, none=True)


def check_positive_int(name, value, none=False):
    """Raise unless `value` is a positive integer (or None, with `none=True`); return it."""
    return check_number(name, value, minimum=1, integer=True, none=none)


def check_seed(seed, name="seed"):
    """Raise unless `seed` is an integer (what every random choice of lmpipe is keyed by)."""
    return check_number(name, seed, integer=True)


def check_bool(name, value):
    """Raise unless `value` is True or False; return it."""
    if not isinstance(value, bool):
        raise ValueError(f"`{name}` must be True or False, got {name}={value!r}.")
    return value


def check_choice(name, value, choices):
    """Raise unless `value` is one of `choices` (compared with ==); return it."""
    if not any(value == choice and type(value) is type(choice) for choice in choices):
        listed = ", ".join(repr(choice) for choice in choices)
        raise ValueError(f"`{name}` must be one of {listed}, got {name}={value!r}.")
    return value


def check_texts(name, texts):
    """Raise unless `texts` is a list (or other sequence) of `str`; return it as a list.

    >>> check_texts("texts", "one text")
    Traceback (most recent call last):
    ...
    ValueError: `texts` must be a list of strings, got a single string: 'one text'.
    """
    if isinstance(texts, (str, bytes)):
        raise ValueError(f"`{name}` must be a list of strings, got a single string: {texts!r}.")
    try:
        texts = list(texts)
    except TypeError:
        raise ValueError(
            f"`{name}` must be a list of strings, got {type(texts).__name__}."
        ) from None
    for index, text in enumerate(texts):
        if not isinstance(text, str):
            raise ValueError(f"`{name}[{index}]` must be a string, got {text!r}.")
    return texts


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


# Configuration dataclasses: the same checks on their fields, by name.


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
