"""Ask a tf.data service dispatcher, with a deadline, whether it is there and has workers.

TensorFlow's own client retries without a deadline: registering a dataset with a dispatcher that
is not there, or starting an iteration when it is gone or has no worker, waits forever. The
dispatcher's ``GetWorkers`` RPC, asked over gRPC (``grpcio``, which TensorFlow depends on) with
a deadline, answers the question in bounded time; :func:`dispatcher_workers` repeats it until
the workers are there or the timeout has passed.
"""

from __future__ import annotations

import functools
import math
import numbers
import time
from typing import Any

from tfthroughput._validation import check_positive_int

DEFAULT_TIMEOUT = 30.0
_RETRY_SECONDS = 0.25  # between two questions to a dispatcher that is not ready yet
_GET_WORKERS = "/tensorflow.data.DispatcherService/GetWorkers"


class DataServiceUnavailable(ConnectionError):
    """No usable tf.data service: nothing answers, it is not a dispatcher, or it has no worker."""


def dispatcher_workers(
    address: str,
    *,
    count: int = 1,
    timeout: float = DEFAULT_TIMEOUT,
) -> tuple[str, ...]:
    """Wait until the dispatcher at ``address`` answers with at least ``count`` workers.

    Each question is one ``GetWorkers`` RPC with a gRPC deadline, repeated every 0.25 s while
    the dispatcher is unreachable or has too few workers (it may be starting).

    Args:
        address: ``"grpc://host:port"`` or ``"host:port"``.
        count: Workers to wait for. Defaults to 1.
        timeout: Seconds to wait in all. Defaults to 30.

    Returns:
        The addresses the registered workers advertise, e.g. ``("localhost:40211",)``.

    Raises:
        TypeError / ValueError: If ``address`` is not ``[grpc://]host:port``, or ``count`` or
            ``timeout`` is not positive.
        DataServiceUnavailable: If something other than a dispatcher answers (at once), or no
            dispatcher with ``count`` workers answered within ``timeout`` seconds.

    Example:
        >>> dispatcher_workers("localhost:5050", count=2, timeout=60)  # doctest: +SKIP
        ('localhost:40211', 'localhost:40213')
    """
    import grpc

    host_port = dispatcher_host_port(address)
    check_positive_int("count", count)
    check_timeout(timeout)
    deadline = time.monotonic() + timeout
    while True:
        try:
            workers = ask_for_workers(host_port, max(deadline - time.monotonic(), 0.05))
        except grpc.RpcError as error:
            if error.code() == grpc.StatusCode.UNIMPLEMENTED:
                raise DataServiceUnavailable(
                    f"{host_port} answers but is not a tf.data service dispatcher (a worker's "
                    f"address, or another server?): {error.details()}. Received: "
                    f"address={address!r}"
                ) from None
            problem = f"{error.code().name}: {error.details()}"
        else:
            if len(workers) >= count:
                return workers
            problem = f"the dispatcher answers, with {len(workers)} of {count} workers registered"
        if time.monotonic() >= deadline:
            raise DataServiceUnavailable(
                f"No tf.data service dispatcher with {count} worker{'s' * (count > 1)} answered "
                f"at {host_port} within {timeout:g} s ({problem}). Start one with "
                "`tfthroughput service`, check the address, or give it longer with "
                f"DataService(timeout=...). Received: address={address!r}"
            )
        time.sleep(min(_RETRY_SECONDS, max(deadline - time.monotonic(), 0.0)))


def ask_for_workers(host_port: str, timeout: float) -> tuple[str, ...]:
    import grpc

    with grpc.insecure_channel(host_port) as channel:
        get_workers = channel.unary_unary(
            _GET_WORKERS,
            request_serializer=bytes,
            response_deserializer=_get_workers_response().FromString,
        )
        return tuple(worker.address for worker in get_workers(b"", timeout=timeout).workers)


@functools.lru_cache(maxsize=1)
def _get_workers_response() -> type:
    """``GetWorkersResponse`` of TensorFlow's dispatcher.proto, which TF ships no Python for.

    Only the fields read here: ``repeated WorkerInfo workers = 1`` and ``string address = 1``.
    Built in a private descriptor pool, so it never clashes with TensorFlow's own protos.
    """
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    field = descriptor_pb2.FieldDescriptorProto
    proto = descriptor_pb2.FileDescriptorProto(
        name="tfthroughput_dispatcher_probe.proto", package="tfthroughput_probe", syntax="proto3"
    )
    info = proto.message_type.add(name="WorkerInfo")
    info.field.add(name="address", number=1, type=field.TYPE_STRING, label=field.LABEL_OPTIONAL)
    response = proto.message_type.add(name="GetWorkersResponse")
    response.field.add(
        name="workers",
        number=1,
        type=field.TYPE_MESSAGE,
        type_name=".tfthroughput_probe.WorkerInfo",
        label=field.LABEL_REPEATED,
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(
        pool.FindMessageTypeByName("tfthroughput_probe.GetWorkersResponse")
    )


def check_timeout(timeout: Any) -> None:
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real):
        raise TypeError(f"`timeout` must be a number of seconds. Received: timeout={timeout!r}")
    if not math.isfinite(timeout) or timeout <= 0:
        raise ValueError(
            f"`timeout` must be a positive number of seconds. Received: timeout={timeout!r}"
        )


def dispatcher_host_port(address: Any) -> str:
    """``"host:port"`` of ``[grpc://]host:port``, checked."""
    if not isinstance(address, str):
        raise TypeError(
            "`service` must be a dispatcher address such as 'grpc://localhost:5050' or a "
            f"DataService. Received: {address!r} of type {type(address).__name__}"
        )
    rest = address[len("grpc://") :] if address.startswith("grpc://") else address
    host, _, port = rest.rpartition(":")
    if "://" in rest or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(
            "`service` must be a dispatcher address '[grpc://]host:port' (e.g. "
            f"'grpc://localhost:5050'). Received: {address!r}"
        )
    return f"{host}:{int(port)}"
