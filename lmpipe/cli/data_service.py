"""`lmpipe data-service`: a tf.data service dispatcher and workers for `--data-service`."""

from lmpipe.cli import flags

HELP = "run a tf.data service (dispatcher and workers) for --data-service"
DESCRIPTION = (
    "Run a tf.data service dispatcher and workers until stopped (Ctrl-C or "
    "SIGTERM); training commands given --data-service HOST:PORT have their batches built "
    "here. With --join, run one worker for a dispatcher on another machine."
)


def add_parser(commands, common):
    """Add `lmpipe data-service` to the `commands` sub-parsers."""
    service = flags.add_verb(commands, "data-service", common, help=HELP, description=DESCRIPTION)
    service.add_argument(
        "--port", type=int, default=5050, help="the dispatcher's port (with --join: the worker's)"
    )
    service.add_argument("--workers", type=int, default=1, help="workers started here")
    service.add_argument(
        "--host", default="localhost", help="the name trainers and workers reach this machine by"
    )
    service.add_argument(
        "--worker-addresses",
        nargs="+",
        default=[],
        metavar="HOST:PORT",
        help="workers started on other machines with --join, which the dispatcher waits for",
    )
    service.add_argument(
        "--join",
        default=None,
        metavar="HOST:PORT",
        help="run one worker (on --port) for the dispatcher at this address",
    )
    service.set_defaults(run=run)


def run(arguments):
    from lmpipe.training.data_service import (
        check_data_service,
        serve_until_stopped,
        start_data_service,
        start_worker,
    )

    flags.check_positive(arguments, "port")
    if arguments.workers < 0:
        raise SystemExit(f"error: --workers must be 0 or more, got {arguments.workers}")
    try:
        for address in [arguments.join, *arguments.worker_addresses]:
            check_data_service(address)
    except ValueError as error:
        raise SystemExit(f"error: {str(error).replace('`data_service`', 'an address')}") from None
    # The workers run lmpipe's input pipelines, whose tokenizers are tensorflow-text ops
    # (NormalizeUTF8, ...): a process that serves them must have registered those ops.
    import tensorflow_text  # noqa: F401

    address = f"{arguments.host}:{arguments.port}"
    if arguments.join is not None:
        worker = start_worker(arguments.join, arguments.port, address)
        print(
            f"tf.data service worker {address} serving the dispatcher {arguments.join}",
            flush=True,
        )
        try:
            serve_until_stopped()
        finally:
            worker.stop()
    try:
        service = start_data_service(
            arguments.port, arguments.workers, arguments.host, arguments.worker_addresses
        )
    except ValueError as error:
        raise SystemExit(f"error: {flags.as_flags(str(error))}") from None
    waits = f", waiting for {len(arguments.worker_addresses)} more" * bool(
        arguments.worker_addresses
    )
    print(
        f"tf.data service dispatcher {address} with {arguments.workers} worker(s) here{waits}; "
        f"train with --data-service {address}",
        flush=True,
    )
    try:
        service.join()
    finally:
        service.stop()
