"""build_pipeline(service=...): same examples through a real in-process tf.data service, the
stage in the right place, the cache/augment rules kept, and no hang on a dead dispatcher."""

from __future__ import annotations

import socket
import threading
import time

import numpy as np
import pytest
import tensorflow as tf

from tfthroughput.data.description import describe_pipeline
from tfthroughput.data.dispatcher import DataServiceUnavailable
from tfthroughput.data.pipeline import build_pipeline
from tfthroughput.data.service import DataService
from tfthroughput.data.service_cluster import LocalDataService

X = np.arange(40, dtype=np.float32).reshape(20, 2)
Y = np.arange(20, dtype=np.int64)


@pytest.fixture(scope="module")
def two_workers():
    with LocalDataService(workers=2) as service:
        yield service


@pytest.fixture(scope="module")
def one_worker():
    with LocalDataService(workers=1) as service:
        yield service


def _double(x, y):
    return x * 2.0, y


def _plus_one_batch(x, y):
    return x + 1.0, y


def _rows(dataset):
    """Examples as sorted (x..., y) tuples, batches flattened."""
    rows = []
    for x, y in dataset:
        xs, ys = x.numpy(), y.numpy()
        if ys.ndim == 0:
            xs, ys = xs[None], ys[None]
        rows.extend((*a.tolist(), int(b)) for a, b in zip(xs, ys, strict=True))
    return sorted(rows)


def _local_ops(dataset):
    """The tf.data ops that run in this process, source first (the service's part is remote)."""
    graph = tf.compat.v1.GraphDef.FromString(dataset._as_serialized_graph().numpy())
    nodes = {node.name: node for node in graph.node}
    (node,) = [n for n in graph.node if n.op == "_Retval"]
    ops = []
    while node.input:
        node = nodes[node.input[0].split(":")[0]]
        ops.append(node.op)
    return [op for op in ops[::-1] if "Dataset" in op and op != "OptionsDataset"]


def _free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# --- same examples as the local pipeline -----------------------------------------------------


@pytest.mark.parametrize("repeat", [False, 2])
def test_distributed_epoch_yields_the_local_pipelines_multiset(two_workers, repeat):
    arguments = dict(
        preprocess_fn=_double,
        batch_fn=_plus_one_batch,
        cache=True,
        shuffle_buffer=7,
        batch_size=4,
        repeat=repeat,
    )
    local = _rows(build_pipeline((X, Y), **arguments))
    served = _rows(build_pipeline((X, Y), service=two_workers.address, **arguments))
    assert served == local
    assert len(served) == 20 * (1 if repeat is False else repeat)


def test_parallel_epochs_gives_each_worker_whole_epochs(one_worker, two_workers):
    arguments = dict(preprocess_fn=_double, shuffle_buffer=5, batch_size=4)
    local = _rows(build_pipeline((X, Y), **arguments))
    for cluster, copies in ((one_worker, 1), (two_workers, 2)):
        service = DataService(cluster.address, processing_mode="parallel_epochs")
        assert _rows(build_pipeline((X, Y), service=service, **arguments)) == sorted(local * copies)


def test_tfrecord_files_through_the_service(two_workers, tmp_path):
    paths = []
    for f in range(3):
        paths.append(str(tmp_path / f"part-{f}.tfrecord"))
        with tf.io.TFRecordWriter(paths[-1]) as writer:
            for i in range(5):
                writer.write(f"{f}-{i}".encode())
    local = build_pipeline(str(tmp_path / "*.tfrecord"), shuffle_buffer=4, batch_size=None)
    served = build_pipeline(
        str(tmp_path / "*.tfrecord"), shuffle_buffer=4, batch_size=None, service=two_workers.address
    )
    assert sorted(served.as_numpy_iterator()) == sorted(local.as_numpy_iterator())
    assert len(list(served)) == 15


def test_a_shared_job_name_splits_one_epoch_between_two_readers(two_workers):
    service = DataService(two_workers.address, job_name="shared-epoch")
    first = iter(build_pipeline((X, Y), batch_size=None, service=service))
    second = iter(build_pipeline((X, Y), batch_size=None, service=service))
    seen, open_iterators = [], [first, second]
    while open_iterators:
        for iterator in list(open_iterators):
            try:
                seen.append(int(next(iterator)[1]))
            except StopIteration:
                open_iterators.remove(iterator)
    assert sorted(seen) == list(range(20))  # one job: each example once, not once per reader


# --- where the stage goes, and what describe_pipeline says -----------------------------------


def test_distributed_epoch_with_finite_epochs_batches_on_the_trainer(two_workers):
    dataset = build_pipeline(
        (X, Y),
        preprocess_fn=_double,
        batch_fn=_plus_one_batch,
        batch_size=4,
        repeat=2,
        service=DataService(two_workers.address, job_name="described"),
    )
    description = describe_pipeline(dataset)
    assert description.transformations == (
        "map",
        "repeat",
        "distribute",
        "batch",
        "map",
        "prefetch",
    )
    stage = description.stages[2]
    assert str(stage) == (
        f"distribute(processing_mode='distributed_epoch', service='{two_workers.address}', "
        "job_name='described')"
    )
    assert "partial batch" in stage.reason and "timeout 30 s" in stage.reason
    # Here run only the check in front of the service's job, the batch, the map and the prefetch.
    assert _local_ops(dataset) == [
        "TensorDataset",
        "MapDataset",
        "FlatMapDataset",
        "ParallelBatchDataset",
        "ParallelMapDatasetV2",
        "PrefetchDataset",
    ]


@pytest.mark.parametrize(
    ("mode", "repeat"), [("parallel_epochs", False), ("distributed_epoch", True)]
)
def test_whole_epochs_or_endless_streams_batch_on_the_workers(two_workers, mode, repeat):
    dataset = build_pipeline(
        (X, Y),
        preprocess_fn=_double,
        batch_fn=_plus_one_batch,
        batch_size=4,
        repeat=repeat,
        service=DataService(two_workers.address, processing_mode=mode),
    )
    description = describe_pipeline(dataset)
    assert description.transformations[-4:] == ("batch", "map", "distribute", "prefetch")
    assert "one transfer per batch" in description.stages[-2].reason
    assert _local_ops(dataset) == [
        "TensorDataset",
        "MapDataset",
        "FlatMapDataset",
        "PrefetchDataset",
    ]
    assert dataset.element_spec[0].shape.as_list() == [None, 2]


# --- the cache/augment rules hold with the service -------------------------------------------


def test_cache_keeps_preprocessing_once_and_augment_draws_anew_each_epoch(one_worker):
    preprocessed, augmented = [], []

    def count_preprocess(x):
        preprocessed.append(1)
        return x

    def preprocess(x, y):
        return tf.py_function(count_preprocess, [x], tf.float32), y

    def count_augment(x):
        augmented.append(1)
        return x

    def augment(x, y):
        x = tf.py_function(count_augment, [x], tf.float32)
        return tf.ensure_shape(x, [2]) + tf.random.uniform([2]), y

    dataset = build_pipeline(
        (X, Y),
        preprocess_fn=preprocess,
        augment_fn=augment,
        cache=True,
        repeat=3,
        batch_size=None,
        service=DataService(one_worker.address, processing_mode="parallel_epochs"),
    )
    assert describe_pipeline(dataset).transformations == (
        "map",
        "cache",
        "repeat",
        "map",
        "distribute",
        "prefetch",
    )
    draws = {}
    for x, y in dataset:
        draws.setdefault(int(y), []).append(x.numpy())
    assert len(preprocessed) == 20  # the worker's cache: once per example, not per epoch
    assert len(augmented) == 60  # after the cache: every epoch
    for y, values in draws.items():
        assert len(values) == 3
        assert not np.allclose(values[0], values[1])  # fresh random draws each epoch
        np.testing.assert_array_less(X[y] * 1.0 - 1e-6, values[0])


def test_the_builders_guards_still_refuse_before_any_contact():
    dead = f"localhost:{_free_port()}"  # nothing listens: any contact would wait the timeout
    start = time.monotonic()
    with pytest.raises(ValueError, match="`cache` needs a finite dataset"):
        build_pipeline(tf.data.Dataset.range(3).repeat(), cache=True, service=dead)
    with pytest.raises(ValueError, match="must return the same structure"):
        build_pipeline((X, Y), augment_fn=lambda x, y: x, service=dead)
    assert time.monotonic() - start < 20  # any contact would have waited the 30 s timeout


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (dict(deterministic=True), "`deterministic=True` cannot hold with `service`"),
        (dict(cache="CACHE_FILE"), "`cache` to a file cannot go with `service`"),
        (
            dict(shuffle_buffer=4, seed=3, service=DataService("h:1", "parallel_epochs")),
            "same order",
        ),
    ],
)
def test_combinations_the_service_cannot_honour_are_refused(tmp_path, arguments, message):
    if arguments.get("cache") == "CACHE_FILE":
        arguments["cache"] = str(tmp_path / "cache")
    arguments.setdefault("service", "localhost:1")
    with pytest.raises(ValueError, match=message):
        build_pipeline((X, Y), **arguments)


# --- a dead or wrong dispatcher: a clear error within the timeout ----------------------------


def test_nothing_listening_fails_the_build_after_the_timeout():
    address = f"grpc://localhost:{_free_port()}"
    start = time.monotonic()
    with pytest.raises(DataServiceUnavailable, match="No tf.data service dispatcher") as error:
        build_pipeline((X, Y), service=DataService(address, timeout=1.5))
    elapsed = time.monotonic() - start
    assert 1.5 <= elapsed < 20, elapsed  # the timeout, then a reply: not a hang
    assert "UNAVAILABLE" in str(error.value) and "tfthroughput service" in str(error.value)


def test_a_workers_address_is_named_as_not_a_dispatcher(one_worker):
    start = time.monotonic()
    with pytest.raises(DataServiceUnavailable, match="is not a tf.data service dispatcher"):
        build_pipeline((X, Y), service=DataService(one_worker.worker_addresses[0], timeout=60))
    assert time.monotonic() - start < 30  # a wrong server is not worth waiting for


def test_a_dispatcher_without_workers_fails_after_the_timeout():
    dispatcher = tf.data.experimental.service.DispatchServer()
    try:
        start = time.monotonic()
        with pytest.raises(DataServiceUnavailable, match="with 0 of 1 workers registered"):
            build_pipeline((X, Y), service=DataService(dispatcher.target, timeout=1.0))
        assert 1.0 <= time.monotonic() - start < 20  # the timeout, then a reply: not a hang
    finally:
        dispatcher.stop()


def test_a_dispatcher_gone_after_the_build_fails_the_next_iteration_within_the_timeout():
    cluster = LocalDataService(workers=1)
    dataset = build_pipeline((X, Y), batch_size=4, service=DataService(cluster.address, timeout=2))
    assert len(_rows(dataset)) == 20
    cluster.stop()
    outcome = {}

    def iterate():
        try:
            list(dataset)
        except tf.errors.OpError as error:
            outcome["error"] = error

    start = time.monotonic()
    reader = threading.Thread(target=iterate, daemon=True)
    reader.start()
    reader.join(timeout=30)  # TensorFlow alone would wait for the dispatcher indefinitely
    assert not reader.is_alive(), "the iteration hung on a dead dispatcher"
    assert 2 <= time.monotonic() - start < 30  # within the join: not TensorFlow's endless wait
    assert "DataServiceUnavailable: No tf.data service dispatcher" in str(outcome["error"])


# --- DataService ------------------------------------------------------------------------------


def test_data_service_normalises_the_address_and_keeps_its_options():
    service = DataService("localhost:5050", processing_mode="parallel_epochs", job_name="j")
    assert service.target == "grpc://localhost:5050"
    assert DataService("grpc://10.0.0.2:6000").target == "grpc://10.0.0.2:6000"
    assert (service.processing_mode, service.job_name) == ("parallel_epochs", "j")
    assert service.timeout == 30


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        (dict(address=5050), TypeError, "Received: 5050 of type int"),
        (dict(address="localhost"), ValueError, "'\\[grpc://\\]host:port'"),
        (dict(address="http://localhost:5050"), ValueError, "Received: 'http://localhost:5050'"),
        (dict(address="localhost:0"), ValueError, "Received: 'localhost:0'"),
        (dict(processing_mode="epochs"), ValueError, "Received: processing_mode='epochs'"),
        (dict(job_name=""), ValueError, "`job_name` must not be empty"),
        (dict(job_name=3), TypeError, "`job_name` must be a string or None"),
        (dict(timeout=0), ValueError, "Received: timeout=0"),
        (dict(timeout="10"), TypeError, "Received: timeout='10'"),
    ],
)
def test_data_service_refuses_bad_arguments(arguments, error, message):
    arguments = {"address": "localhost:5050", **arguments}
    with pytest.raises(error, match=message):
        DataService(**arguments)


def test_build_pipeline_refuses_a_service_of_the_wrong_type():
    with pytest.raises(TypeError, match="`service` must be a dispatcher address"):
        build_pipeline((X, Y), service=5050)


def test_keras_fit_trains_from_the_service_across_epochs(one_worker):
    import keras

    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    dataset = build_pipeline(
        (X, Y.astype(np.float32)),
        shuffle_buffer=20,
        repeat=True,
        batch_size=5,
        service=DataService(one_worker.address, processing_mode="parallel_epochs"),
    )
    history = model.fit(dataset, epochs=3, steps_per_epoch=4, shuffle=False, verbose=0)
    assert len(history.history["loss"]) == 3
    assert all(np.isfinite(history.history["loss"]))
