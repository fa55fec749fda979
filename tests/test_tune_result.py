"""TuneResult and TuneSetup: the table, the snippet, apply(), JSON and the Text tab entry."""

from __future__ import annotations

import json

import keras
import pytest
from events import summary_values

from tfthroughput.tuning import LossCheck, TuneResult, TuneSetup, TuneTrial

BASE = TuneSetup(1, False, "float32", batch_size=16)
FAST = BASE.with_(steps_per_execution=32, jit_compile=True, pipeline=True)


def result(chosen=FAST) -> TuneResult:
    check = LossCheck(0.5, 0.5000001, False, 0.05)
    trials = (
        TuneTrial(BASE, "as given", "baseline", 1000.0, 1.0, warmup_seconds=0.8),
        TuneTrial(
            FAST,
            FAST.changes_from(BASE),
            "faster",
            5000.0,
            5.0,
            4.5,
            5.5,
            0.1,
            rounds=5,
            warmup_seconds=2.0,
            memory_mib=3.0,
            loss_check=check,
        ),
        TuneTrial(
            BASE.with_(jit_compile=True),
            "XLA on",
            "failed",
            reason="XLA could not compile the train step (...)",
        ),
    )
    kwargs = {"batch_size": 16, "cache": True, "deterministic": True, "repeat": True}
    return TuneResult(
        BASE,
        chosen,
        trials,
        12.5,
        60.0,
        pipeline_kwargs=kwargs,
        notes=("input pipeline tried: input-bound fraction 0.40",),
    )


def test_the_table_lists_every_trial_and_the_choice():
    text = str(result())
    lines = text.splitlines()
    assert lines[0].split()[:3] == ["setting", "examples/s", "x"]
    assert "steps_per_execution=32, XLA on, pipeline rebuilt" in lines[2]
    assert "5.00 [4.50-5.50]" in lines[2] and "ok: 2.0e-07" in lines[2]
    assert lines[3].endswith("failed: XLA could not compile the train step (...)")
    assert (
        "chosen: steps_per_execution=32, XLA on, pipeline rebuilt: 5.00x [4.50-5.50] (median of "
        "5 rounds, 94% interval) over the baseline" in text
    )
    assert "note: input pipeline tried: input-bound fraction 0.40" in text


def test_the_snippet_and_compile_kwargs_apply_the_choice():
    tuned = result()
    assert tuned.compile_kwargs == {"steps_per_execution": 32, "jit_compile": True}
    assert tuned.snippet.splitlines() == [
        "model = build_model()",
        "model.compile(..., steps_per_execution=32, jit_compile=True)  # Keras runs whole "
        "executions: steps_per_epoch a multiple of 32",
        "dataset = tfthroughput.build_pipeline(data, batch_size=16, cache=True, "
        "deterministic=True, repeat=True)",
        "model.fit(dataset, ...)  # it repeats: give fit steps_per_epoch (your epoch's batches)",
    ]
    assert tuned.speedup == 5.0 and tuned.improved


def test_apply_sets_the_knobs_on_a_compiled_model():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    assert result().apply(model) is model
    assert model.steps_per_execution == 32 and model.jit_compile is True
    with pytest.raises(TypeError, match="`model` must be a compiled keras.Model"):
        result().apply(keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)]))


def test_baseline_choice_says_nothing_beat_the_noise():
    text = str(result(chosen=BASE))
    assert "chosen: the baseline, as given: nothing beat it outside the noise" in text
    assert result(chosen=BASE).speedup == 1.0


def test_json_and_the_text_tab_entry_read_back(tmp_path):
    tuned = result()
    assert json.loads(tuned.to_json())["chosen"]["steps_per_execution"] == 32
    tuned.write_to_tensorboard(str(tmp_path))
    entries = {
        value.tag: value.tensor.string_val[0].decode()
        for _, value in summary_values(tmp_path, "text")
    }
    assert "steps_per_execution=32, XLA on, pipeline rebuilt" in entries["tune/result"]
    assert json.loads(entries["tune/result_json"])["speedup"] == 5.0


def test_under_a_strategy_the_table_snippet_and_json_name_both_batches():
    from dataclasses import replace

    from tfthroughput.tuning import TuneDistribution

    wider = FAST.with_(batch_size=48, pipeline=False)
    devices = ("/gpu:0", "/gpu:1")
    given = result(chosen=wider)
    faster = replace(given.trials[1], setup=wider, label=wider.changes_from(BASE))
    distributed = replace(
        given,
        trials=(given.trials[0], faster),
        pipeline_kwargs=None,
        distribution=TuneDistribution("MirroredStrategy", 2, devices, 16, 48),
    )
    lines = str(distributed).splitlines()
    assert (
        "strategy: MirroredStrategy over 2 replicas: global batch 16 (8 per replica); "
        "chosen: global batch 48 (24 per replica)"
    ) in lines
    assert distributed.snippet.splitlines() == [
        "with strategy.scope():  # the MirroredStrategy tune ran under",
        "    model = build_model()",
        "    model.compile(..., steps_per_execution=32, jit_compile=True)  # Keras runs whole "
        "executions: steps_per_epoch a multiple of 32",
        "model.fit(data, batch_size=48, ...)  # global batch 48 (24 per replica)",
    ]
    assert json.loads(distributed.to_json())["distribution"] == {
        "strategy": "MirroredStrategy",
        "replicas": 2,
        "devices": list(devices),
        "baseline_batch_size": 16,
        "chosen_batch_size": 48,
        "baseline_per_replica_batch_size": 8,
        "chosen_per_replica_batch_size": 24,
    }
    assert json.loads(result().to_json())["distribution"] is None
