"""`monitor.fit_watch`: finding the Keras `fit` on the stack and telling, from another thread,
whether it is still running, without holding its frame."""

from __future__ import annotations

import threading
from types import FrameType

import keras
import pytest
from fits import RaiseDuringEpoch, fit, tiny_model

from tfthroughput.monitor.fit_watch import FitCall, find_fit, fit_locals


class WatchFit(keras.callbacks.Callback):
    """Finds the fit at train begin; asks from another thread whether it runs at epoch end."""

    def __init__(self) -> None:
        super().__init__()
        self.call: FitCall | None = None
        self.running_seen_from_another_thread: list[bool] = []

    def on_train_begin(self, logs=None):
        self.call = find_fit()

    def on_epoch_end(self, epoch, logs=None):
        asker = threading.Thread(
            target=lambda: self.running_seen_from_another_thread.append(self.call.is_running())
        )
        asker.start()
        asker.join()


def test_outside_fit_there_is_none():
    assert find_fit() is None


def test_the_fit_is_found_and_seen_running_until_it_returns():
    watch = WatchFit()
    fit(tiny_model(), [watch], epochs=2)
    call = watch.call
    assert call is not None
    assert call.code.co_name == "fit" and call.thread_id == threading.get_ident()
    assert watch.running_seen_from_another_thread == [True, True]
    assert not call.is_running()
    # It holds numbers and a code object: nothing that keeps fit's locals alive.
    assert not any(isinstance(value, FrameType) for value in vars(call).values())


def test_a_fit_left_by_an_exception_is_seen_gone():
    watch = WatchFit()
    with pytest.raises(RuntimeError):
        fit(tiny_model(), [watch, RaiseDuringEpoch(0, 1, RuntimeError("boom"))], epochs=2)
    assert watch.call is not None and not watch.call.is_running()


class AskDuringFit(keras.callbacks.Callback):
    def __init__(self, call: FitCall) -> None:
        super().__init__()
        self.call = call
        self.answers: list[bool] = []

    def on_epoch_end(self, epoch, logs=None):
        self.answers.append(self.call.is_running())


def test_the_next_fit_on_the_same_thread_is_not_taken_for_the_one_watched():
    # The next fit's frame usually gets the same address: the id alone would say "running".
    first = WatchFit()
    fit(tiny_model(), [first], epochs=1)
    ask = AskDuringFit(first.call)
    fit(tiny_model(), [ask], epochs=1)
    assert ask.answers == [False]


def test_a_fit_kept_alive_by_its_traceback_is_not_running_either():
    first = WatchFit()
    with pytest.raises(RuntimeError) as kept:  # keeps the traceback, and fit's frame, alive
        fit(tiny_model(), [first, RaiseDuringEpoch(0, 1, RuntimeError("boom"))], epochs=1)
    assert first.call.dispatcher() is not None
    ask = AskDuringFit(first.call)
    fit(tiny_model(), [ask], epochs=1)
    assert ask.answers == [False]
    assert kept.value.__traceback__ is not None


def test_fit_locals_reads_what_fit_bound_and_nothing_outside_fit():
    seen = {}

    class ReadLocals(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            seen.update(fit_locals("x", "batch_size", "epoch_iterator", "not_a_local"))

    model = tiny_model()
    fit(model, [ReadLocals()], epochs=1)
    assert sorted(seen) == ["batch_size", "epoch_iterator", "x"]
    assert seen["batch_size"] == 8 and seen["x"].shape == (32, 3)
    assert seen["epoch_iterator"].data_adapter.batch_size == 8
    assert fit_locals("x") == {}


def test_a_stack_link_that_is_not_a_frame_is_no_proof_the_fit_is_over(monkeypatch):
    # Another thread's stack is read while it runs on; a link read mid-change was once a
    # SymbolicTensor, and the AttributeError stopped the sampler. Now the call counts as still
    # running (the sampler's next sample reads the stack again).
    import sys

    call = FitCall(threading.get_ident(), test_outside_fit_there_is_none.__code__, 0, None)
    monkeypatch.setattr(sys, "_current_frames", lambda: {call.thread_id: object()})

    assert call.is_running()
