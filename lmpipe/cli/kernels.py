"""`lmpipe kernels status|build`: lmpipe's compiled kernels; the work is lmpipe.kernels'."""

from lmpipe.cli import flags

HELP = "lmpipe's C++ kernels"


def add_parser(commands, common):
    """Add `lmpipe kernels` to the `commands` sub-parsers."""
    kernels = flags.add_verb(commands, "kernels", common, help=HELP)
    kernels.add_argument(
        "action", choices=["status", "build"], help="status: cache, load, use; build: all now"
    )
    kernels.set_defaults(run=run)


def run(arguments):
    """Print the kernels' status, or build every kernel now (exit 1 when one fails)."""
    from lmpipe.kernels import build, status

    return build.build_all() if arguments.action == "build" else status.print_status()
