"""`tune --apply`'s putting of a chosen setup on the script's own model and calls: the compile
knobs on the model, the batch size for this call and later calls of that model only."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

keras = pytest.importorskip("keras")

from tfthroughput.monitor import keras_patch  # noqa: E402
from tfthroughput.monitor.call_capture import CapturedCall  # noqa: E402
from tfthroughput.tuning import TuneResult, TuneSetup, TuneTrial  # noqa: E402
from tfthroughput.tuning.script.call_apply import (  # noqa: E402
    apply_at_call,
    call_pipeline,
    later_calls_hook,
)


def _result(**changes) -> TuneResult:
    given = TuneSetup(1, False, "float32", batch_size=4)
    chosen = given.with_(**changes)
    trials = (
        TuneTrial(given, "as given", "baseline", 100.0, 1.0),
        TuneTrial(chosen, "faster", "faster", 300.0, 3.0, 2.5, 3.5, 0.1),
    )
    return TuneResult(given, chosen, trials, 10.0, 60.0)


def _model():
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    return model


class _Batches(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.batches = 0

    def on_train_batch_end(self, batch, logs=None):
        self.batches += 1


def test_the_chosen_knobs_go_on_the_model_and_the_batch_size_into_the_call():
    model = _model()
    call = CapturedCall("fit", model, {"x": np.ones((8, 2)), "batch_size": 4})
    done = apply_at_call(_result(steps_per_execution=4, batch_size=8), call)

    assert model.steps_per_execution == 4
    assert call.arguments["batch_size"] == 8
    assert done == [
        "model.compile(..., steps_per_execution=4, jit_compile=False) set on the script's model",
        "batch_size=8",
    ]


def test_a_policy_that_cannot_be_put_on_a_built_model_is_said():
    call = CapturedCall("fit", _model(), {"x": np.ones((8, 2))})
    done = apply_at_call(_result(policy="mixed_bfloat16"), call)

    assert done[-1].startswith("dtype policy 'mixed_bfloat16' not applied: the model is built")


def test_nothing_is_changed_where_the_baseline_was_kept():
    model = _model()
    given = TuneSetup(1, False, "float32", batch_size=4)
    kept = TuneResult(given, given, (TuneTrial(given, "as given", "baseline", 1.0, 1.0),), 1, 1)
    call = CapturedCall("fit", model, {"batch_size": 4})

    assert apply_at_call(kept, call) == [
        "the setup as given was the fastest found: the script runs on unchanged"
    ]
    assert call.arguments == {"batch_size": 4} and model.steps_per_execution == 1
    assert later_calls_hook("fit", model, kept) is None


def test_later_fits_of_the_same_model_get_the_batch_size_and_other_models_do_not():
    model, other = _model(), _model()
    keras_patch.patch(lambda kind, callbacks, model: None)
    try:
        keras_patch.set_call_hook(later_calls_hook("fit", model, _result(batch_size=8)))
        x, y = np.ones((16, 2), "float32"), np.ones((16, 1), "float32")
        mine, theirs = _Batches(), _Batches()
        model.fit(x, y, batch_size=4, callbacks=[mine], verbose=0)
        other.fit(x, y, batch_size=4, callbacks=[theirs], verbose=0)
    finally:
        keras_patch.unpatch()

    assert mine.batches == 2  # 16 examples in the chosen batches of 8
    assert theirs.batches == 4  # another model: as the script called it


def test_later_predicts_of_the_same_model_get_the_batch_size():
    model = _model()
    keras_patch.patch(lambda kind, callbacks, model: None)
    try:
        keras_patch.set_call_hook(later_calls_hook("predict", model, _result(batch_size=8)))
        steps = _PredictBatches()
        model.predict(np.ones((16, 2), "float32"), batch_size=4, callbacks=[steps], verbose=0)
    finally:
        keras_patch.unpatch()

    assert steps.batches == 2


class _PredictBatches(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.batches = 0

    def on_predict_batch_end(self, batch, logs=None):
        self.batches += 1


@pytest.mark.tensorflow
@pytest.mark.parametrize(
    "given, steps_per_epoch, repeat, added",
    [
        ("arrays", None, True, "; fit(..., steps_per_epoch=4)"),
        ("arrays", 4, True, ""),
        ("dataset", None, True, "; fit(..., steps_per_epoch=4)"),
        ("dataset of unknown length", None, False, ""),
    ],
)
def test_the_rebuilt_pipeline_ends_each_epoch_where_the_calls_epoch_ends(
    given, steps_per_epoch, repeat, added
):
    # The rebuilt pipeline repeats where it is timed (read on from epoch to epoch). A call
    # without steps_per_epoch ends its epochs at the data's end: data whose length is known
    # (arrays, a dataset's cardinality) keeps the repeating pipeline and gets its batches per
    # pass as steps_per_epoch; a dataset whose length tf.data cannot tell gets one that ends.
    import tensorflow as tf

    model = _model()
    pipeline = {"batch_size": 4, "cache": True, "deterministic": True, "repeat": True}
    tuned = dataclasses.replace(
        _result(steps_per_execution=2, pipeline=True), pipeline_kwargs=pipeline
    )
    x, y = np.ones((16, 2), "float32"), np.ones((16, 1), "float32")
    if given == "arrays":
        arguments = {"x": x, "y": y, "batch_size": 4, "steps_per_epoch": steps_per_epoch}
    else:
        dataset = tf.data.Dataset.from_tensor_slices((x, y))
        if given == "dataset of unknown length":
            dataset = dataset.filter(lambda *_: True)
        arguments = {"x": dataset, "steps_per_epoch": None}
    call = CapturedCall("fit", model, arguments)
    done = apply_at_call(tuned, call)

    assert done[-1] == (
        "data = tfthroughput.build_pipeline(data, batch_size=4, cache=True, "
        f"deterministic=True, repeat={repeat}){added}"
    )
    batches = _Batches()
    model.fit(**call.arguments, epochs=2, verbose=0, callbacks=[batches])
    # 4 steps an epoch (16 examples in 4s, or the call's 4), one batch hook per execution of 2
    assert batches.batches == 2 * 2


@pytest.mark.tensorflow
def test_a_batched_dataset_keeps_its_batches_and_repeats_for_its_batches_per_pass():
    import tensorflow as tf

    pipeline = {"batch_size": None, "deterministic": True, "repeat": True}
    batched = tf.data.Dataset.from_tensor_slices(np.ones((18, 2), "float32")).batch(4)
    kwargs, steps = call_pipeline(pipeline, {"x": batched})
    assert kwargs["repeat"] is True and steps == 5  # 4 full batches and a partial one a pass
    _, none = call_pipeline(pipeline, {"x": batched.repeat()})
    assert none is None  # an endless dataset: no pass to count, nothing added


def test_a_call_that_does_not_shuffle_gets_the_arrays_pipeline_without_its_shuffle():
    pipeline = {"batch_size": 4, "cache": True, "repeat": True, "shuffle_buffer": 16}
    x = np.ones((16, 2), "float32")
    kept, _ = call_pipeline(pipeline, {"x": x, "batch_size": 4})
    dropped, steps = call_pipeline(pipeline, {"x": x, "batch_size": 4, "shuffle": False})
    assert kept["shuffle_buffer"] == 16 and "shuffle_buffer" not in dropped and steps == 4
