"""The ``tfthroughput`` command: ``demo``, ``info`` and ``service``."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tfthroughput",
        description="Keep the accelerator busy in TensorFlow/Keras training.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = commands.add_parser(
        "demo",
        help="train a small CNN on synthetic JPEGs with a naive pipeline and with "
        "build_pipeline, monitored, then diagnose (no network or GPU needed)",
        description="Writes a synthetic JPEG dataset, trains a small CNN on a naive tf.data "
        "pipeline and on build_pipeline with GPUMonitor on, prints a comparison and a "
        "diagnosis, and says how to open the runs in TensorBoard.",
    )
    demo.add_argument(
        "--images",
        type=_positive_int,
        default=1200,
        help="synthetic JPEGs to write (default: %(default)s)",
    )
    demo.add_argument(
        "--epochs",
        type=_positive_int,
        default=3,
        help="epochs per training run (default: %(default)s)",
    )
    demo.add_argument(
        "--batch-size",
        type=_positive_int,
        default=32,
        help="examples per batch (default: %(default)s)",
    )
    demo.add_argument(
        "--log-dir",
        default="logs/tfthroughput-demo",
        help="TensorBoard log folder (default: %(default)s)",
    )
    demo.add_argument(
        "--data-dir", default=None, help="where to write the JPEGs (default: <log-dir>/data)"
    )

    commands.add_parser(
        "info",
        help="TensorFlow/Keras versions, devices, NVML status and the precision recommendation",
        description="Prints what tfthroughput sees on this machine.",
    )
    _add_service_parser(commands)
    return parser


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value < 65536:
        raise argparse.ArgumentTypeError(f"expected a port number 0..65535, got {text!r}")
    return value


def _advertised_host(text: str) -> str:
    from tfthroughput.data.service_cluster import check_advertised_host

    try:
        return check_advertised_host(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _add_service_parser(commands: argparse._SubParsersAction) -> None:
    service = commands.add_parser(
        "service",
        help="run a tf.data service (a dispatcher and worker processes) on this machine "
        "until Ctrl-C, for build_pipeline(..., service=...)",
        description="Starts a tf.data service dispatcher in this process and --workers worker "
        "processes, prints the dispatcher's address, and serves until Ctrl-C. TensorFlow's "
        "servers listen on all network interfaces (it has no bind-address option); --host "
        "only sets the address they advertise, so keep the ports firewalled on a shared "
        "network.",
    )
    service.add_argument(
        "--workers", type=_positive_int, default=2, help="worker processes (default: %(default)s)"
    )
    service.add_argument(
        "--port",
        type=_port,
        default=5050,
        help="the dispatcher's port; 0 picks a free one (default: %(default)s)",
    )
    service.add_argument(
        "--worker-port",
        type=_port,
        default=0,
        help="the first worker's port, the others following; 0 picks free ports (default)",
    )
    service.add_argument(
        "--host",
        type=_advertised_host,
        default="localhost",
        help="name or IP that trainers use to reach this machine, advertised for the workers "
        "and printed in the address (default: %(default)s, loopback only)",
    )


def _service(args: argparse.Namespace) -> int:
    from tfthroughput.data.dispatcher import DataServiceUnavailable
    from tfthroughput.data.service_cluster import LocalDataService

    try:
        cluster = LocalDataService(
            args.workers,
            port=args.port,
            worker_port=args.worker_port,
            host=args.host,
            processes=True,
        )
    except (OSError, ValueError, DataServiceUnavailable) as error:
        print(f"tfthroughput service: error: {error}", file=sys.stderr)
        return 1
    with cluster:
        print(cluster, "Ctrl-C stops the service.", sep="\n", flush=True)
        try:
            problem = cluster.wait()
        except KeyboardInterrupt:
            print("Stopping the tf.data service.", flush=True)
            return 0
    print(f"tfthroughput service: error: {problem}", file=sys.stderr)
    return 1


def _info() -> int:
    import keras
    import tensorflow as tf

    from tfthroughput.hardware.devices import visible_gpus
    from tfthroughput.hardware.nvml import NVMLUnavailable, nvml
    from tfthroughput.precision.policy import recommend_precision

    print(f"TensorFlow {tf.__version__}, Keras {keras.__version__}")
    devices = tf.config.list_physical_devices()
    print("TensorFlow devices: " + ", ".join(device.name for device in devices))
    try:
        pynvml = nvml()
    except NVMLUnavailable as error:
        print(f"NVML: unavailable: {error}")
    else:
        driver = pynvml.nvmlSystemGetDriverVersion()
        gpus = visible_gpus(pynvml)
        print(f"NVML: driver {driver}, {len(gpus)} GPU(s) visible to this process")
        for gpu in gpus:
            print(f"  gpu{gpu.index}: {gpu.name} ({gpu.uuid})")
    print(recommend_precision())
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``tfthroughput`` console script; returns the exit status."""
    args = _parser().parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if args.command == "info":
        return _info()
    if args.command == "service":
        return _service(args)
    from tfthroughput.demo import run_demo

    try:
        run_demo(
            images=args.images,
            epochs=args.epochs,
            batch_size=args.batch_size,
            log_dir=args.log_dir,
            data_dir=args.data_dir,
        )
    except (OSError, ValueError) as error:
        print(f"tfthroughput demo: error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
