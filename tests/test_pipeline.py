"""build_pipeline: same examples as the naive pipeline, stages in the guide's order, guards."""

from __future__ import annotations

import os

import numpy as np
import pytest
import tensorflow as tf

from tfthroughput.data.pipeline import build_pipeline

# --- helpers ---------------------------------------------------------------------------------


def _double(x, y):
    return x * 2.0, y


def _plus_one_batch(x, y):
    return x + 1.0, y


def _rows(dataset, batched=True):
    """Examples as a list of (x, y) tuples of Python values, batches flattened."""
    rows = []
    for x, y in dataset:
        xs, ys = (x.numpy(), y.numpy()) if batched else (x.numpy()[None], y.numpy()[None])
        rows.extend((tuple(np.atleast_1d(a).tolist()), int(b)) for a, b in zip(xs, ys, strict=True))
    return rows


def _dataset_ops(dataset):
    """The chain of tf.data ops of a dataset, source first, read from its graph."""
    graph = tf.compat.v1.GraphDef.FromString(dataset._as_serialized_graph().numpy())
    nodes = {node.name: node for node in graph.node}
    (node,) = [n for n in graph.node if n.op == "_Retval"]
    ops = []
    while node.input:
        node = nodes[node.input[0].split(":")[0]]
        ops.append(node.op)
    return [op for op in ops[::-1] if op.endswith("Dataset") or "Dataset" in op]


def _counting(fn, counter):
    def counted(*args):
        counter.assign_add(1)
        return fn(*args)

    return counted


def _write_tfrecords(folder, num_files=3, per_file=5):
    paths = []
    for f in range(num_files):
        path = os.path.join(folder, f"part-{f}.tfrecord")
        with tf.io.TFRecordWriter(path) as writer:
            for i in range(per_file):
                example = tf.train.Example(
                    features=tf.train.Features(
                        feature={
                            "x": tf.train.Feature(float_list=tf.train.FloatList(value=[f, i])),
                            "y": tf.train.Feature(
                                int64_list=tf.train.Int64List(value=[f * 10 + i])
                            ),
                        }
                    )
                )
                writer.write(example.SerializeToString())
        paths.append(path)
    return paths


_FEATURES = {
    "x": tf.io.FixedLenFeature([2], tf.float32),
    "y": tf.io.FixedLenFeature([], tf.int64),
}


def _parse(record):
    parsed = tf.io.parse_single_example(record, _FEATURES)
    return parsed["x"], parsed["y"]


X = np.arange(40, dtype=np.float32).reshape(20, 2)
Y = np.arange(20, dtype=np.int64)


# --- same examples as the naive pipeline -----------------------------------------------------


def test_same_multiset_as_naive_pipeline_in_memory():
    naive = tf.data.Dataset.from_tensor_slices((X, Y)).map(_double).batch(4).map(_plus_one_batch)
    built = build_pipeline(
        (X, Y),
        preprocess_fn=_double,
        batch_fn=_plus_one_batch,
        cache=True,
        shuffle_buffer=7,
        batch_size=4,
        seed=1,
    )
    assert sorted(_rows(built)) == sorted(_rows(naive))
    assert len(_rows(built)) == 20


def test_same_order_as_naive_pipeline_when_deterministic():
    naive = tf.data.Dataset.from_tensor_slices((X, Y)).map(_double).batch(3).map(_plus_one_batch)
    built = build_pipeline(
        (X, Y), preprocess_fn=_double, batch_fn=_plus_one_batch, batch_size=3, deterministic=True
    )
    assert _rows(built) == _rows(naive)
    assert built.options().deterministic is True


def test_tfrecord_glob_same_multiset_and_deterministic_interleave_order(tmp_path):
    paths = _write_tfrecords(str(tmp_path))
    naive = tf.data.TFRecordDataset(paths).map(_parse).batch(4)
    built = build_pipeline(
        str(tmp_path / "*.tfrecord"), preprocess_fn=_parse, shuffle_buffer=5, batch_size=4
    )
    assert sorted(_rows(built)) == sorted(_rows(naive))
    # Deterministic parallel reads alternate between `parallel_reads` files, as a sequential
    # interleave with that cycle length would.
    ordered = build_pipeline(
        paths, preprocess_fn=_parse, batch_size=4, deterministic=True, parallel_reads=2
    )
    naive_interleaved = (
        tf.data.Dataset.from_tensor_slices(paths)
        .interleave(tf.data.TFRecordDataset, cycle_length=2)
        .map(_parse)
        .batch(4)
    )
    assert _rows(ordered) == _rows(naive_interleaved)


def test_jpeg_files_with_labels_through_read_fn(tmp_path):
    paths, labels = [], []
    for i in range(6):
        image = np.full((12, 10, 3), i * 40, dtype=np.uint8)
        path = str(tmp_path / f"img{i}.jpg")
        tf.io.write_file(path, tf.io.encode_jpeg(image, quality=100))
        paths.append(path)
        labels.append(i % 2)

    def decode(data, label):
        image = tf.image.resize(tf.io.decode_jpeg(data, channels=3), (8, 8))
        return tf.reduce_mean(image, axis=[0, 1]), label

    def naive_read(path, label):
        return decode(tf.io.read_file(path), label)

    naive = tf.data.Dataset.from_tensor_slices((paths, labels)).map(naive_read).batch(4)
    built = build_pipeline(
        str(tmp_path / "img*.jpg"),
        labels=labels,
        read_fn=tf.io.read_file,
        preprocess_fn=decode,
        shuffle_buffer=6,
        batch_size=4,
    )
    got = sorted((tuple(np.round(x, 3)), y) for x, y in _rows(built))
    want = sorted((tuple(np.round(x, 3)), y) for x, y in _rows(naive))
    assert got == want and len(got) == 6


def test_read_fn_returning_a_dataset_is_interleaved():
    def records(i):
        return tf.data.Dataset.range(i).map(lambda v: (tf.reshape(v, [1]), i))

    built = build_pipeline(
        tf.data.Dataset.range(4), read_fn=records, batch_size=None, parallel_reads=4
    )
    assert sorted(_rows(built, batched=False)) == [((0,), 1), ((0,), 2), ((0,), 3), ((1,), 2)] + [
        ((1,), 3),
        ((2,), 3),
    ]
    assert "ParallelInterleaveDatasetV4" in _dataset_ops(built)


def test_repeat_count_and_drop_remainder():
    built = build_pipeline((X, Y), batch_size=6, repeat=2, drop_remainder=True)
    sizes = [int(x.shape[0]) for x, _ in built]
    assert sizes == [6, 6, 6, 6, 6, 6]  # 2 x 20 examples, each pass 3 full batches


# --- stages and options ----------------------------------------------------------------------


def test_stages_are_in_the_guides_order():
    built = build_pipeline(
        (X, Y),
        preprocess_fn=_double,
        augment_fn=_double,
        batch_fn=_plus_one_batch,
        cache=True,
        shuffle_buffer=8,
        repeat=True,
        batch_size=4,
    )
    assert _dataset_ops(built) == [
        "TensorSliceDataset",
        "ParallelMapDatasetV2",  # preprocess_fn
        "CacheDatasetV2",
        "ShuffleDatasetV3",
        "RepeatDataset",
        "ParallelMapDatasetV2",  # augment_fn, after the cache
        "ParallelBatchDataset",
        "ParallelMapDatasetV2",  # batch_fn
        "PrefetchDataset",  # last
        "OptionsDataset",
    ]


def test_options_default_and_ram_budget_in_mib():
    default = build_pipeline((X, Y), batch_size=4).options()
    assert default.deterministic is False
    assert default.autotune.enabled is True
    assert default.experimental_optimization.map_fusion is True
    assert default.autotune.ram_budget is None
    budgeted = build_pipeline((X, Y), batch_size=4, ram_budget_mib=256, deterministic=True)
    assert budgeted.options().autotune.ram_budget == 2**28
    assert budgeted.options().deterministic is True
    assert budgeted.options().threading.private_threadpool_size is None


def test_threadpool_is_sized_for_many_parallel_reads():
    many = (os.cpu_count() or 1) + 3
    wide = build_pipeline(tf.data.Dataset.range(4), batch_size=None, parallel_reads=many)
    assert wide.options().threading.private_threadpool_size == many
    narrow = build_pipeline(tf.data.Dataset.range(4), batch_size=None, parallel_reads=1)
    assert narrow.options().threading.private_threadpool_size is None
    explicit = build_pipeline(tf.data.Dataset.range(4), batch_size=None, threadpool_size=5)
    assert explicit.options().threading.private_threadpool_size == 5


# --- cache and augmentation ------------------------------------------------------------------


def test_cache_file_is_reused_across_epochs_and_builds(tmp_path):
    calls = tf.Variable(0, dtype=tf.int64)
    cache = str(tmp_path / "cache")
    built = build_pipeline(
        (X, Y), preprocess_fn=_counting(_double, calls), cache=cache, batch_size=5
    )
    first = sorted(_rows(built))
    assert int(calls.numpy()) == 20
    assert os.path.exists(cache + ".index")
    second = sorted(_rows(built))
    assert int(calls.numpy()) == 20  # the second epoch read the cache file
    assert first == second
    rebuilt = build_pipeline(
        (X, Y), preprocess_fn=_counting(_double, calls), cache=cache, batch_size=5
    )
    assert sorted(_rows(rebuilt)) == first
    assert int(calls.numpy()) == 20  # a new pipeline on the same file reuses it too


def test_augmentation_is_fresh_each_epoch_while_preprocessing_is_cached():
    preprocess_calls = tf.Variable(0, dtype=tf.int64)
    augment_calls = tf.Variable(0, dtype=tf.int64)

    def jitter(x, y):
        return x + tf.random.uniform(tf.shape(x), 0.0, 1.0), y

    built = build_pipeline(
        (X, Y),
        preprocess_fn=_counting(_double, preprocess_calls),
        augment_fn=_counting(jitter, augment_calls),
        cache=True,
        batch_size=20,
        deterministic=True,
    )
    epoch1 = next(iter(built))[0].numpy()
    epoch2 = next(iter(built))[0].numpy()
    assert int(preprocess_calls.numpy()) == 20
    assert int(augment_calls.numpy()) == 40
    assert not np.allclose(epoch1, epoch2)
    # Both epochs are the cached preprocessing plus noise in [0, 1).
    for epoch in (epoch1, epoch2):
        assert np.all((epoch - X * 2.0 >= 0.0) & (epoch - X * 2.0 < 1.0))


# --- guards ----------------------------------------------------------------------------------


def test_cache_on_an_infinite_dataset_is_refused():
    with pytest.raises(ValueError, match=r"`cache` needs a finite dataset.*Received: cache=True"):
        build_pipeline(tf.data.Dataset.range(5).repeat(), cache=True, batch_size=2)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"shuffle_buffer": 0}, ValueError, r"`shuffle_buffer` .*Received: shuffle_buffer=0"),
        ({"shuffle_buffer": -3}, ValueError, r"Received: shuffle_buffer=-3"),
        ({"shuffle_buffer": 2.5}, TypeError, r"`shuffle_buffer` .*Received: shuffle_buffer=2.5"),
        ({"batch_size": 0}, ValueError, r"`batch_size` must be a positive int.*batch_size=0"),
        ({"batch_size": -1}, ValueError, r"Received: batch_size=-1"),
        ({"batch_size": "32"}, TypeError, r"Received: batch_size='32'"),
        ({"batch_size": True}, TypeError, r"Received: batch_size=True"),
        ({"repeat": 0}, ValueError, r"`repeat` .*Received: repeat=0"),
        ({"repeat": "yes"}, TypeError, r"Received: repeat='yes'"),
        ({"parallel_reads": 0}, ValueError, r"Received: parallel_reads=0"),
        ({"ram_budget_mib": -1}, ValueError, r"Received: ram_budget_mib=-1"),
        ({"threadpool_size": 0}, ValueError, r"Received: threadpool_size=0"),
        ({"deterministic": "no"}, TypeError, r"`deterministic` must be a bool.*'no'"),
        ({"drop_remainder": 1}, TypeError, r"Received: drop_remainder=1"),
        ({"seed": 1.5}, TypeError, r"Received: seed=1.5"),
        ({"preprocess_fn": 3}, TypeError, r"`preprocess_fn` must be a callable.*=3"),
        ({"augment_fn": "flip"}, TypeError, r"Received: augment_fn='flip'"),
        ({"cache": 3}, TypeError, r"`cache` must be a bool .*Received: cache=3"),
        ({"cache": ""}, ValueError, r"Received: cache=''"),
        ({"batch_size": None, "batch_fn": _plus_one_batch}, ValueError, r"`batch_fn`"),
        ({"labels": [0, 1]}, ValueError, r"`labels` goes with a list of files"),
    ],
)
def test_bad_arguments_are_refused_naming_argument_and_value(kwargs, error, message):
    with pytest.raises(error, match=message):
        build_pipeline((X, Y), **kwargs)


def test_bad_source_type_is_refused():
    with pytest.raises(TypeError, match=r"`source` must be .*Received: source=42 of type int"):
        build_pipeline(42)
    with pytest.raises(TypeError, match=r"Received: source=\{\} of type dict"):
        build_pipeline({})


def test_glob_that_matches_nothing_is_refused(tmp_path):
    pattern = str(tmp_path / "*.tfrecord")
    with pytest.raises(ValueError, match=r"matches no file. Received: source='.*\*\.tfrecord'"):
        build_pipeline(pattern)


def test_missing_path_and_folder_are_refused(tmp_path):
    with pytest.raises(ValueError, match=r"does not exist. Received: source='.*nope.tfrecord'"):
        build_pipeline(str(tmp_path / "nope.tfrecord"))
    with pytest.raises(ValueError, match=r"pass a glob pattern"):
        build_pipeline(str(tmp_path))


def test_cache_folder_missing_or_not_writable_is_refused(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match=r"does not exist. Received: cache='.*missing/cache'"):
        build_pipeline((X, Y), cache=str(tmp_path / "missing" / "cache"))
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    if os.access(locked, os.W_OK):
        # Running as root, where permission bits are not enforced: deny the write check for
        # this folder the way the kernel would for anyone else.
        real_access = os.access

        def access(path, mode, **kwargs):
            if os.fspath(path) == str(locked) and mode & os.W_OK:
                return False
            return real_access(path, mode, **kwargs)

        monkeypatch.setattr(os, "access", access)
    try:
        with pytest.raises(ValueError, match=r"not writable. Received: cache='.*locked/c'"):
            build_pipeline((X, Y), cache=str(locked / "c"))
    finally:
        locked.chmod(0o700)


def test_map_function_returning_none_is_refused():
    def forgot_return(x, y):
        x * 2  # noqa: B018

    with pytest.raises(TypeError, match=r"`preprocess_fn` must return .*returned None"):
        build_pipeline((X, Y), preprocess_fn=forgot_return)
    with pytest.raises(TypeError, match=r"`batch_fn` must return"):
        build_pipeline((X, Y), batch_fn=forgot_return)


def test_augment_changing_structure_is_refused():
    def drops_label(x, y):
        return x

    with pytest.raises(ValueError, match=r"`augment_fn` must return the same structure"):
        build_pipeline((X, Y), augment_fn=drops_label)


def test_examples_of_unknown_shape_cannot_be_batched():
    def ragged(x, y):
        return x[: tf.cast(y % 2 + 1, tf.int32)], y

    with pytest.raises(ValueError, match=r"fully known shapes.*`preprocess_fn`.*element_spec="):
        build_pipeline((X, Y), preprocess_fn=ragged, batch_size=4)
    # Without batching the same pipeline is fine.
    unbatched = build_pipeline((X, Y), preprocess_fn=ragged, batch_size=None, deterministic=True)
    assert [int(x.shape[0]) for x, _ in unbatched][:3] == [1, 2, 1]


def test_labels_must_match_files(tmp_path):
    paths = _write_tfrecords(str(tmp_path), num_files=2, per_file=1)
    with pytest.raises(ValueError, match=r"one label per file \(2 files\). Received: 3 labels"):
        build_pipeline(paths, labels=[0, 1, 2], read_fn=tf.io.read_file)
    with pytest.raises(ValueError, match=r"`labels` needs a `read_fn`"):
        build_pipeline(paths, labels=[0, 1])


def _stages_run(dataset: tf.data.Dataset) -> list[str]:
    """The stages tf.data ran after its graph rewrites, read from the autotuning model."""
    iterator = iter(dataset)
    next(iterator)
    model = tf.data.experimental.get_model_proto(iterator)
    return [node.name for node in model.nodes.values()]


def test_consecutive_maps_run_fused_with_the_same_elements():
    def preprocess(x, y):
        return x * 2.0, y

    def augment(x, y):
        return x + 1.0, y

    fused = build_pipeline(
        (X, Y), preprocess_fn=preprocess, augment_fn=augment, batch_size=4, deterministic=True
    )
    unfused_options = tf.data.Options()
    unfused_options.experimental_optimization.map_fusion = False
    unfused = fused.with_options(unfused_options)

    assert _stages_run(unfused).count("ParallelMapV2") == 2
    assert _stages_run(fused).count("ParallelMapV2") == 1
    for got, expected in zip(fused, unfused, strict=True):
        np.testing.assert_array_equal(got[0].numpy(), expected[0].numpy())
        np.testing.assert_array_equal(got[1].numpy(), expected[1].numpy())


def test_a_cpu_bound_per_example_map_is_built_as_benchmarked():
    # benchmarks/pipeline_cpu_map.py: this pipeline kept more than 1.6 of the 2 cores busy in
    # 20 of 20 epochs on a quiet machine, and its one-core epochs were another program's
    # share of the cores, not these settings (docs/benchmarks.md). The choice, pinned: every
    # parallel stage on AUTOTUNE, the autotuner on its default algorithm and budgets.
    from tfthroughput.data._graph import DatasetGraph

    def fft_chain(x):
        signal = tf.signal.ifft(tf.signal.fft(tf.cast(x, tf.complex64)))
        return tf.math.real(signal)

    source = tf.data.Dataset.from_tensor_slices(np.zeros((64, 128), np.float32))
    built = build_pipeline(source, preprocess_fn=fft_chain, batch_size=32)
    graph = DatasetGraph(built)
    parallel = {s.op: graph.argument(s, "num_parallel_calls") for s in graph.stages}
    assert _dataset_ops(built) == [
        "TensorSliceDataset",
        "ParallelMapDatasetV2",
        "ParallelBatchDataset",
        "PrefetchDataset",
        "OptionsDataset",
    ]
    assert parallel["ParallelMapDatasetV2"] == tf.data.AUTOTUNE
    assert parallel["ParallelBatchDataset"] == tf.data.AUTOTUNE
    options = built.options()
    assert options.deterministic is False
    assert options.experimental_optimization.map_fusion is True
    assert options.autotune.enabled is True
    assert options.autotune.cpu_budget is None
    assert options.autotune.autotune_algorithm is None  # tf.data's default
