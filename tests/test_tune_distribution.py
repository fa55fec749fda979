"""tune under a tf.distribute strategy (tuning/training/distribution.py): which strategy the
trials run under and which are refused, the builder wrapped in its scope, the failures only
replicas bring, and what the result tells of the global and the per-replica batch. tune's
trials under a real MirroredStrategy over two logical CPUs: tests/test_tune_strategy.py.

This process has one CPU device: where two replicas are needed, a stand-in strategy gives
what ``describe`` reads of one (its replicas and their devices)."""

from __future__ import annotations

from types import SimpleNamespace

import keras
import numpy as np
import pytest

from tfthroughput.tuning import tune
from tfthroughput.tuning.result import TuneResult, TuneTrial
from tfthroughput.tuning.setup import TuneSetup
from tfthroughput.tuning.training.distribution import (
    TuneDistribution,
    describe,
    find_strategy,
    in_scope,
    may_clear_session,
    per_replica,
    replica_failure,
)

tf = pytest.importorskip("tensorflow")
pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="tf.distribute needs the TensorFlow backend"
)

BASE = TuneSetup(1, False, "float32", batch_size=16)
SMALL_BATCH_NOTE = (
    "each of the 2 replicas trains on {} examples a step: a per-replica batch this small leaves "
    "every device launch-bound; a larger global batch (allow_batch_change=True) is the knob for "
    "that, and it changes the learning dynamics"
)


def build():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    return model


DATA = (np.zeros((64, 4), "float32"), np.zeros((64, 1), "float32"))


class TwoReplicas:
    """What ``describe`` reads of a strategy over two devices."""

    num_replicas_in_sync = 2
    extended = SimpleNamespace(worker_devices=("/gpu:0", "/gpu:1"))


def result(baseline=BASE, chosen=BASE, *tried: TuneSetup) -> TuneResult:
    trials = [TuneTrial(baseline, "as given", "baseline", 1000.0, 1.0)]
    trials += [
        TuneTrial(setup, setup.changes_from(baseline), "faster", 2000.0, 2.0) for setup in tried
    ]
    return TuneResult(baseline, chosen, tuple(trials), 10.0, 60.0, notes=("given note",))


def never_asked():
    raise AssertionError("the global batch was asked for, though every setup has one")


def test_a_strategy_that_is_not_one_is_refused_naming_it():
    with pytest.raises(TypeError, match=r"tf\.distribute\.Strategy.*Received: strategy='mirrored'"):
        tune(build, DATA, strategy="mirrored")
    with pytest.raises(TypeError, match=r"Received: strategy=<object object"):
        find_strategy(object())


@pytest.mark.parametrize(
    "spanning",
    [
        tf.distribute.MultiWorkerMirroredStrategy,
        tf.distribute.experimental.ParameterServerStrategy,
        tf.distribute.TPUStrategy,
    ],
)
def test_strategies_that_span_hosts_are_refused(spanning):
    # Made without __init__: starting a real cluster strategy is not needed to refuse it.
    cluster = object.__new__(spanning)
    with pytest.raises(ValueError, match=rf"cannot run under {spanning.__name__}: each worker"):
        find_strategy(cluster)


def test_without_a_strategy_none_is_used():
    assert find_strategy(None) is None
    assert find_strategy(tf.distribute.get_strategy()) is None  # the default one


def test_under_another_backend_a_strategy_is_refused_and_a_scope_ignored(monkeypatch):
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    monkeypatch.setattr(keras.backend, "backend", lambda: "jax")
    with pytest.raises(ValueError, match=r"needs Keras's TensorFlow backend .* runs on jax\."):
        find_strategy(strategy)
    with strategy.scope():
        assert find_strategy(None) is None
        assert may_clear_session()  # clear_session touches no tf.distribute scope there


def test_clear_session_is_allowed_outside_a_strategys_scope_only():
    assert may_clear_session()
    with tf.distribute.OneDeviceStrategy("/cpu:0").scope():
        assert not may_clear_session()
    assert may_clear_session()


def test_the_builder_builds_every_model_in_the_strategys_scope():
    def regression_model():
        return build()

    assert in_scope(regression_model, None) is regression_model
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    scoped = in_scope(regression_model, strategy)
    assert scoped.__name__ == "regression_model"  # as the user's builder is named in errors
    assert scoped().distribute_strategy is strategy
    assert build().distribute_strategy is not strategy
    assert not tf.distribute.has_strategy()  # the scope is left after each build


def test_failures_only_replicas_bring_are_told_why():
    placeholder = RuntimeError("... You must feed a value for placeholder tensor 'iterator' ...")
    assert replica_failure(placeholder).endswith("(keras-team/keras#19246)")
    resource = ValueError("Trying to access resource dense/kernel/replica_1 on another device")
    assert replica_failure(resource).startswith("XLA compiles all replicas' step as one program")
    assert replica_failure(MemoryError("out of memory")) is None


def test_the_per_replica_batch_is_the_largest_share():
    assert [per_replica(batch, 4) for batch in (64, 65, 67, 3, None)] == [16, 17, 17, 1, None]
    uneven = TuneDistribution("MirroredStrategy", 3, ("a", "b", "c"), 64, None)
    assert str(uneven) == (
        "MirroredStrategy over 3 replicas: global batch 64 (up to 22 per replica); chosen: "
        "global batch unknown"
    )
    assert uneven.to_dict() == {
        "strategy": "MirroredStrategy",
        "replicas": 3,
        "devices": ["a", "b", "c"],
        "baseline_batch_size": 64,
        "chosen_batch_size": None,
        "baseline_per_replica_batch_size": 22,
        "chosen_per_replica_batch_size": None,
    }
    same = TuneDistribution("MirroredStrategy", 2, ("a", "b"), 64, 64)
    assert str(same) == "MirroredStrategy over 2 replicas: global batch 64 (32 per replica)"


def test_without_a_strategy_the_result_is_returned_as_it_is():
    given = result()
    assert describe(given, None, never_asked) is given


def test_a_small_per_replica_batch_gets_a_note_where_the_batch_was_not_tried():
    described = describe(result(), TwoReplicas(), never_asked)
    assert described.distribution == TuneDistribution(
        "TwoReplicas", 2, ("/gpu:0", "/gpu:1"), 16, 16
    )
    assert described.notes == ("given note", SMALL_BATCH_NOTE.format(8))
    # A larger batch tried: the user has seen the knob, no note; the chosen batch is told.
    wider = BASE.with_(batch_size=32)
    described = describe(result(BASE, wider, wider), TwoReplicas(), never_asked)
    assert described.distribution.chosen_per_replica_batch_size == 16
    assert described.notes == ("given note",)
    # 32 examples per replica (a global 64): not small.
    large = BASE.with_(batch_size=64)
    assert describe(result(large, large), TwoReplicas(), never_asked).notes == ("given note",)


def test_a_batched_datasets_global_batch_is_asked_once():
    asked = []

    def examples_per_step():
        asked.append(1)
        return 20

    batched = BASE.with_(batch_size=None)
    described = describe(
        result(batched, batched.with_(steps_per_execution=4)), TwoReplicas(), examples_per_step
    )
    assert len(asked) == 1
    assert (
        described.distribution.baseline_batch_size,
        described.distribution.chosen_batch_size,
    ) == (20, 20)
    assert described.notes[-1] == SMALL_BATCH_NOTE.format(10)


def test_one_replica_is_never_told_its_batch_is_small():
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    eight = BASE.with_(batch_size=8)
    described = describe(result(eight, eight), strategy, never_asked)
    assert described.distribution == TuneDistribution(
        "OneDeviceStrategy", 1, ("/job:localhost/replica:0/task:0/device:CPU:0",), 8, 8
    )
    assert str(described.distribution) == (
        "OneDeviceStrategy over 1 replica: global batch 8 (8 per replica)"
    )
    assert described.notes == ("given note",)
