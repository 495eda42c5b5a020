"""The random held-out part of a set of examples, the same for every kind of data."""

import numpy as np

from lmpipe.arguments import check_number, check_seed


def held_out_indices(size, held_out, seed, of):
    """`(rest, held out)`: two sorted lists of indices into `size` items, the held-out ones a
    random `held_out` share (a float in (0, 1)) or number of them, the same for the same
    `seed`.

    Args:
        of: the items as an error names them, e.g. "the 10 sentences of train.conll".

    Raises:
        ValueError: `held_out` out of range, or leaving either part empty.

    >>> held_out_indices(5, 0.4, seed=0, of="5 items")
    ([0, 1, 3], [2, 4])
    """
    check_seed(seed)
    if isinstance(held_out, float):
        check_number("held_out", held_out, above=0, below=1)
        count = round(held_out * size)
    else:
        count = check_number("held_out", held_out, minimum=1, integer=True)
    if not 1 <= count < size:
        raise ValueError(
            f"`held_out`={held_out!r} gives {count} of {of}: both parts must keep at least one."
        )
    held = set(np.random.default_rng(seed).permutation(size)[:count].tolist())
    return [i for i in range(size) if i not in held], sorted(held)
