"""`lmpipe kernels build`: every kernel built into the cache now, rather than on first use.

One line a kernel: `built` (compiled now), `cached` (its cached library was already good) or
`failed:` and why (a compiler's errors follow, indented); each built or cached library
is also loaded, as a run would. Nothing is built where the cache directory is refused (a
private temporary directory would vanish with this process): one line says why.
"""

import warnings

from lmpipe import kernels
from lmpipe.kernels.cache import directory_problem


def build_all():
    """Build (or find cached) and load every kernel, print one line each; return the exit
    status: 0 where all are there, 1 where one failed."""
    configured = kernels.cache_directory()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the line below says it
        refused = kernels.usable_cache_directory() != configured
    if refused:
        print(
            f"cache: {configured} {directory_problem(configured)}: nothing built (give it mode "
            "700 and your ownership, or point $LMPIPE_KERNEL_CACHE at a directory only you "
            "can write)"
        )
        return 1
    failed = False
    for name in kernels.KERNELS:
        line = build_one(name)
        failed = failed or line.startswith(f"{name}: failed")
        print(line)
    return 1 if failed else 0


def build_one(name):
    """Build (or find cached) and load kernel `name`; the line `build_all` prints for it."""
    try:
        entry = kernels.cache_entry(name)
    except kernels.KernelUnavailableError as error:
        return _failed(name, str(error))
    cached = entry.problem() is None
    module, reason = kernels._load_once(name)  # loaded once a process, as the callers do
    if module is None:
        return _failed(name, reason)
    return f"{name}: {'cached' if cached else 'built'} ({module.library_path})"


def _failed(name, reason):
    """The failure line, and a compiler's errors (the reason's later lines) indented under it."""
    first, *rest = reason.removeprefix(f"lmpipe's {name} kernel is unavailable: ").splitlines()
    return "\n".join([f"{name}: failed: {first}", *("    " + line for line in rest)])
