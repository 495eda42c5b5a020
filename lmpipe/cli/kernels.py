"""`lmpipe kernels status`: lmpipe's compiled kernels; the work is lmpipe.kernels'."""

from lmpipe.cli import flags

HELP = "show lmpipe's C++ kernels"


def add_parser(commands, common):
    """Add `lmpipe kernels` to the `commands` sub-parsers."""
    status = flags.add_verb(commands, "kernels", common, help=HELP)
    status.add_argument("action", choices=["status"], help="cache, build, load, who uses them")
    status.set_defaults(run=run)


def run(arguments):
    from lmpipe.kernels.status import print_status

    return print_status()
