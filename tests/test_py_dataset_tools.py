"""diagnose, tune and find_batch_size on a keras.utils.PyDataset with worker threads (read as
fit reads it, through Keras's own adapter), and tune's respect for the user's epoch length.
Real fits on tiny models; decisions asserted, never timings."""

from __future__ import annotations

import threading

import pytest
from user_models import LabelledBatches, build_regression

from tfthroughput import diagnose, find_batch_size, tune
from tfthroughput.data.keras_inputs import keras_dataset, made_from_py_dataset
from tfthroughput.tuning.result import BASELINE, PROBE

SMALL_TUNE = {"steps": 8, "rounds": 2, "time_budget": 60, "precision": False, "xla": False}


def _worker_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("Worker_")]


def test_keras_dataset_yields_what_fit_gets_and_stops_the_workers():
    batches = LabelledBatches(workers=2, examples=100)
    with keras_dataset(batches) as dataset:
        sizes = [int(x.shape[0]) for x, y in dataset.take(6)]
        assert made_from_py_dataset(dataset)
    assert sizes == [32, 32, 32, 4, 32, 32]  # pass after pass, the last batch smaller
    assert _worker_threads() == []


def test_diagnose_times_a_py_dataset_with_its_workers():
    model = build_regression()
    report = diagnose(model, LabelledBatches(workers=2), steps=4, repeats=1, utilization_probe=None)

    assert report.batch_size == 32
    assert report.input_batches_per_second > 0 and report.fit_batches_per_second > 0
    # Keras's generator over Python code is not a tf.data pipeline: advice about its workers.
    assert not any(rec.action.startswith("build_pipeline") for rec in report.recommendations)
    assert _worker_threads() == []
    assert int(model.optimizer.iterations.numpy()) == 0


def test_diagnose_inference_reads_a_py_dataset_as_predict_would():
    model = build_regression()
    report = diagnose(
        model,
        LabelledBatches(workers=2),
        steps=2,
        repeats=1,
        utilization_probe=None,
        mode="inference",
    )
    assert report.batch_size == 32
    assert report.fit_batches_per_second > 0
    assert _worker_threads() == []


def test_tune_measures_a_py_dataset_and_reports_its_input_side():
    result = tune(
        build_regression, LabelledBatches(workers=2), max_steps_per_execution=2, **SMALL_TUNE
    )

    assert [t.status for t in result.trials][:2] == [BASELINE, PROBE]
    notes = [note for note in result.notes if note.startswith("input side: ")]
    assert len(notes) == 1
    assert notes[0].startswith(
        "input side: a PyDataset with 2 worker threads, input-bound fraction "
    )
    # The epoch ends with the data (no steps_per_epoch): Keras stops there, nothing to divide.
    assert not any("divides the epoch" in note for note in result.notes)
    with pytest.raises(ValueError, match="`batch_size` must be None for a keras.utils.PyDataset"):
        tune(build_regression, LabelledBatches(), batch_size=16)


def test_tune_tries_only_steps_per_execution_that_divide_the_epoch():
    result = tune(
        build_regression,
        LabelledBatches(batch_size=8),  # 32 batches a pass; the user's epoch is 6 steps
        steps_per_epoch=6,
        max_steps_per_execution=16,
        pipeline=False,
        **SMALL_TUNE,
    )

    # 2 divides 6 and is tried; 4 does not, and the line stops there (before any patience).
    assert [t.setup.steps_per_execution for t in result.trials] == [1, 2]
    assert result.chosen.steps_per_execution in (1, 2)
    assert "steps_per_execution=4 and above not tried: they do not divide the epoch (6 steps)" in (
        result.notes
    )
    assert "steps_per_execution divides the epoch (6 steps, steps_per_epoch): Keras runs " in (
        " ".join(result.notes)
    )
    with pytest.raises(ValueError, match="`steps_per_epoch` must be a positive int or None"):
        tune(build_regression, LabelledBatches(), steps_per_epoch=0)


def test_find_batch_size_takes_a_py_dataset_per_batch_size():
    search = find_batch_size(
        build_regression,
        lambda size: LabelledBatches(batch_size=size, workers=2),
        min_batch_size=8,
        max_batch_size=16,
        steps=2,
    )
    assert [t.batch_size for t in search.trials] == [8, 16]
    assert all(t.fits for t in search.trials)
    assert _worker_threads() == []
    with pytest.raises(TypeError, match="a PyDataset makes batches of its own size"):
        find_batch_size(build_regression, LabelledBatches())


def test_pipeline_advice_becomes_advice_about_the_workers():
    from tfthroughput.diagnosis.py_dataset_advice import for_py_dataset
    from tfthroughput.diagnosis.recommendations import Recommendation

    advice = [
        Recommendation("build_pipeline: parallel map", "the input delivers 10 batches/s."),
        Recommendation("build_pipeline: cache", "40% of each fit step waits on input."),
        Recommendation("a larger batch: find_batch_size", "steps are short."),
    ]
    replaced = for_py_dataset(advice, "2 worker threads")
    assert [rec.action for rec in replaced] == [
        "PyDataset(workers=..., use_multiprocessing=True), or a tf.data pipeline "
        "(tfthroughput.build_pipeline)",
        "a larger batch: find_batch_size",
    ]
    assert replaced[0].reason.startswith(
        "the input delivers 10 batches/s. The input is a PyDataset with 2 worker threads"
    )
    assert for_py_dataset(advice[2:], "no workers") == advice[2:]
