"""``tfthroughput service``: a tf.data service (a dispatcher and worker processes) until Ctrl-C."""

from __future__ import annotations

import argparse

from tfthroughput._startup import load_tensorflow
from tfthroughput.cli.options import SubParsers, add_command, port, positive_int


def advertised_host(text: str) -> str:
    """argparse type: the name or IP trainers reach this machine by."""
    from tfthroughput.data.service_cluster import check_advertised_host

    try:
        return check_advertised_host(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def add(commands: SubParsers) -> None:
    """Declare ``service`` and its options."""
    service = add_command(
        commands,
        "service",
        run,
        help="run a tf.data service (a dispatcher and worker processes) on this machine "
        "until Ctrl-C, for build_pipeline(..., service=...)",
        description="Starts a tf.data service dispatcher in this process and --workers worker "
        "processes, prints the dispatcher's address, and serves until Ctrl-C. TensorFlow's "
        "servers listen on all network interfaces (it has no bind-address option); --host "
        "only sets the address they advertise, so keep the ports firewalled on a shared "
        "network.",
    )
    service.add_argument(
        "--workers", type=positive_int, default=2, help="worker processes (default: %(default)s)"
    )
    service.add_argument(
        "--port",
        type=port,
        default=5050,
        help="the dispatcher's port; 0 picks a free one (default: %(default)s)",
    )
    service.add_argument(
        "--worker-port",
        type=port,
        default=0,
        help="the first worker's port, the others following; 0 picks free ports (default)",
    )
    service.add_argument(
        "--host",
        type=advertised_host,
        default="localhost",
        help="name or IP that trainers use to reach this machine, advertised for the workers "
        "and printed in the address (default: %(default)s, loopback only)",
    )


def run(args: argparse.Namespace) -> int:
    """Serve until Ctrl-C (exit status 0); a cluster that fails while serving raises."""
    load_tensorflow(verbose=args.verbose)
    from tfthroughput.data.service_cluster import LocalDataService

    # Errors starting the cluster (a port in use, no dispatcher answering) are OSErrors or
    # ValueErrors: `main` prints them as one line.
    cluster = LocalDataService(
        args.workers,
        port=args.port,
        worker_port=args.worker_port,
        host=args.host,
        processes=True,
    )
    with cluster:
        print(cluster, "Ctrl-C stops the service.", sep="\n", flush=True)
        try:
            problem = cluster.wait()
        except KeyboardInterrupt:  # the way to stop it, not a failure
            print("Stopping the tf.data service.", flush=True)
            return 0
    raise RuntimeError(problem)
