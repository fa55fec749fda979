"""NumPy arrays in diagnose (both modes) and find_batch_size: fed through Keras's array adapter
as fit and predict feed them, with the verdicts and advice a tf.data pipeline gets, one-line
errors naming the argument, and the arrays copied once."""

from __future__ import annotations

import tracemalloc

import keras
import numpy as np
import pytest
import tensorflow as tf
from fakes import CostClock, charge_calls
from user_models import build_autoencoder, build_regression, unlabeled

from tfthroughput import diagnose, find_batch_size
from tfthroughput.data.keras_arrays import as_arrays, is_arrays, keras_array_dataset
from tfthroughput.diagnosis._inputs import input_advice
from tfthroughput.diagnosis.recommendations import _input_recommendations
from tfthroughput.diagnosis.verdict import COMPUTE_BOUND

EXAMPLES, BATCH = 100, 16  # 6 full batches and one of 4, as fit makes them


def _arrays(examples: int = EXAMPLES) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(examples, 8)).astype("float32")
    return x, (x[:, :1] * 0.5).astype("float32")


QUIET = {"steps": 4, "repeats": 1, "utilization_probe": None}


def test_the_pipeline_is_the_one_fit_makes_of_arrays():
    x, y = _arrays()
    arrays = as_arrays(x, y)

    batches = list(keras_array_dataset(arrays, BATCH))
    assert [len(batch[0]) for batch in batches] == [16] * 6 + [4]
    np.testing.assert_array_equal(np.concatenate([batch[0] for batch in batches]), x)  # in order
    full = list(keras_array_dataset(arrays, BATCH, full_batches=True))
    assert [len(batch[1]) for batch in full] == [16] * 6
    # x alone is handed over as x, as fit(x) hands it to train_step.
    assert keras_array_dataset(as_arrays(x), BATCH).element_spec.shape.as_list() == [None, 8]
    assert is_arrays({"a": x}) and is_arrays((x, y)) and not is_arrays([1.0, 2.0])


def _compute_bound(model: keras.Model, clock: CostClock, kind: str = "train") -> keras.Model:
    # 20 ms a step on the injected clock and nothing for the input: a fraction of exactly 0.
    return charge_calls(model, clock, launch=0.0, per_step=0.02, kind=kind)


def test_diagnose_on_arrays_gives_the_verdict_and_advice_of_the_same_tf_data_input():
    x, y = _arrays()
    clock = CostClock()
    model = _compute_bound(build_regression(), clock)
    on_arrays = diagnose(model, x, y, batch_size=BATCH, clock=clock, **QUIET)
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH)
    on_dataset = diagnose(_compute_bound(build_regression(), clock), dataset, clock=clock, **QUIET)

    assert on_arrays.batch_size == BATCH
    assert on_arrays.verdict == on_dataset.verdict == COMPUTE_BOUND
    assert on_arrays.compute_step_seconds == pytest.approx(0.02)
    assert on_arrays.recommendations == on_dataset.recommendations
    assert int(model.optimizer.iterations.numpy()) == 0  # trained, then put back


def test_diagnose_and_find_batch_size_take_the_same_spellings_of_arrays():
    # fit's `x, y`, and `(x, y)` in one tuple (a one-input model, where fit would fail on it).
    x, y = _arrays()
    clock = CostClock()
    reports = [
        diagnose(
            _compute_bound(build_regression(), clock), *data, batch_size=BATCH, clock=clock, **QUIET
        )
        for data in ((x, y), ((x, y),))
    ]
    assert reports[0].batch_size == reports[1].batch_size == BATCH
    for report in reports:
        assert report.compute_step_seconds == pytest.approx(0.02)
    assert reports[0].verdict == reports[1].verdict == COMPUTE_BOUND

    def build() -> keras.Model:  # 10 ms a step on the injected clock
        return charge_calls(build_regression(), clock, launch=0.0, per_step=0.01)

    searches = [
        find_batch_size(build, *data, max_batch_size=8, steps=2, clock=clock)
        for data in ((x, y), ((x, y),))
    ]
    assert (
        searches[0].curve
        == searches[1].curve
        == tuple((size, pytest.approx(100.0 * size)) for size in (1, 2, 4, 8))
    )


def test_diagnose_inference_on_unlabeled_arrays_as_predict_reads_them():
    x, _ = _arrays()
    clock = CostClock()
    model = _compute_bound(build_regression(), clock, kind="predict")
    report = diagnose(model, x, batch_size=BATCH, clock=clock, mode="inference", **QUIET)
    dataset = tf.data.Dataset.from_tensor_slices(x).batch(BATCH)
    model = _compute_bound(build_regression(), clock, kind="predict")
    expected = diagnose(model, dataset, clock=clock, mode="inference", **QUIET)

    assert (report.mode, report.batch_size) == ("inference", BATCH)
    assert report.verdict == expected.verdict == COMPUTE_BOUND
    assert report.recommendations == expected.recommendations


def test_diagnose_trains_a_custom_train_step_on_unlabeled_arrays():
    model = build_autoencoder()
    report = diagnose(model, unlabeled(EXAMPLES), steps=2, repeats=1, utilization_probe=None)

    assert report.batch_size == 32  # fit's default for arrays
    assert report.fit_batches_per_second > 0
    assert int(model.optimizer.iterations.numpy()) == 0


def test_input_advice_for_arrays_is_about_what_keras_does_with_them():
    advice = _input_recommendations(10.0, 100.0, 10.0, 0.9, lint=None, slowest_stage=None)
    assert [rec.action for rec in advice] == [
        "build_pipeline: parallel map (num_parallel_calls=tf.data.AUTOTUNE)",
        "build_pipeline: cache (in memory or to a file)",
    ]
    made = keras_array_dataset(as_arrays(*_arrays()), BATCH)

    replaced = input_advice(advice, made)
    assert [rec.action for rec in replaced] == [
        "tfthroughput.build_pipeline((x, y), batch_size=...) in place of the arrays "
        "(x alone when unlabeled)"
    ]
    assert replaced[0].reason.startswith(advice[0].reason)
    assert "NumPy arrays (100 examples in batches of 16): fit gathers each batch" in (
        replaced[0].reason
    )
    assert "predict gathers" in input_advice(advice, made, "predict")[0].reason
    assert input_advice(advice, made.repeat()) == tuple(advice)  # only Keras's own pipeline


def test_the_arrays_are_copied_once_while_diagnosing():
    """The arrays become tensors once (TensorFlow copies a NumPy array into a new one it then
    shares, which tracemalloc sees); every measurement reads those tensors, and nothing tiles
    or copies them again."""
    x = np.random.default_rng(0).normal(size=(2048, 512)).astype("float32")  # 4 MiB
    y = x[:, :1].copy()
    model = keras.Sequential([keras.Input((512,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        diagnose(model, x, y, batch_size=256, steps=2, repeats=1, utilization_probe=None)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    copy = x.nbytes + y.nbytes
    assert copy <= peak - before < 1.5 * copy


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (
            lambda m, x, y: diagnose(m, x, y[:90]),
            ValueError,
            r"`dataset` and `y` must hold the same number of examples \(their first axis\), as "
            r"fit requires. Received: dataset with \[100\], y with \[90\] examples",
        ),
        (
            lambda m, x, y: diagnose(m, {"a": x, "b": x[:5]}, y),
            ValueError,
            r"Received: dataset with \[5, 100\], y with \[100\] examples",
        ),
        (
            lambda m, x, y: diagnose(m, np.float32(3.0)),
            ValueError,
            r"`dataset` must be arrays with a first axis of examples. Received: dataset holding "
            r"an array of shape \(\)",
        ),
        (
            lambda m, x, y: diagnose(m, x[:0], y[:0]),
            ValueError,
            r"`dataset` must hold at least one example. Received: 0 examples",
        ),
        (
            lambda m, x, y: diagnose(m, tf.data.Dataset.from_tensor_slices((x, y)).batch(4), y),
            ValueError,
            r"`y` is for NumPy arrays only: a dataset holds its own targets and batches. "
            r"Received: y=array\(",
        ),
        (
            lambda m, x, y: diagnose(m, x, y, batch_size=0),
            ValueError,
            r"`batch_size` must be a positive int. Received: batch_size=0",
        ),
        (
            lambda m, x, y: find_batch_size(build_regression, (x, y[:3])),
            ValueError,
            r"`data\[0\]` and `data\[1\]` must hold the same number of examples .* Received: "
            r"data\[0\] with \[100\], data\[1\] with \[3\] examples",
        ),
        (
            lambda m, x, y: find_batch_size(
                build_regression, tf.data.Dataset.from_tensor_slices(x), y
            ),
            ValueError,
            r"`y` is for NumPy arrays only, as in `find_batch_size\(build, x, y\)`",
        ),
        (
            lambda m, x, y: find_batch_size(build_regression, (x, y), min_batch_size=128),
            ValueError,
            r"`min_batch_size` must not exceed the 100 examples in `data`. "
            r"Received: min_batch_size=128",
        ),
    ],
)
def test_bad_arrays_get_one_line_naming_the_argument(call, error, message):
    x, y = _arrays()
    with pytest.raises(error, match=message) as raised:
        call(build_regression(), x, y)
    assert "\n" not in str(raised.value)


def test_find_batch_size_feeds_arrays_in_full_batches_up_to_all_their_examples():
    x, y = _arrays()
    clock = CostClock()

    def build() -> keras.Model:  # 10 ms a step on the injected clock
        return charge_calls(build_regression(), clock, launch=0.0, per_step=0.01)

    search = find_batch_size(build, (x, y), max_batch_size=64, steps=2, clock=clock)
    assert search.largest_fitting == 64 and search.complete
    assert search.curve == tuple(
        (size, pytest.approx(100.0 * size)) for size in (1, 2, 4, 8, 16, 32, 64)
    )

    # x alone, and no batch larger than the 100 examples can fill.
    def build_unlabeled() -> keras.Model:
        return charge_calls(build_autoencoder(), clock, launch=0.0, per_step=0.01)

    search = find_batch_size(
        build_unlabeled, unlabeled(EXAMPLES), min_batch_size=64, steps=2, clock=clock
    )
    assert [trial.batch_size for trial in search.trials] == [64, 100]
    assert search.largest_fitting == 100 and search.reached_max
