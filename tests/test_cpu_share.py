"""The cores a measurement got: the meter on known counters, the kernel's counters against a
child process that burns a known CPU time, and the advice diagnose draws from the share."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest

from tfthroughput.diagnosis.cpu_advice import cpu_advice
from tfthroughput.diagnosis.recommendations import Recommendation
from tfthroughput.hardware.cpu_share import (
    CpuShare,
    CpuShareMeter,
    machine_busy_seconds,
    own_cpu_seconds,
)


class Counters:
    """Wall clock, own and machine CPU seconds, each advanced by hand."""

    def __init__(self) -> None:
        self.wall = self.own = self.machine = 0.0

    def spend(self, seconds: float, own_cores: float, other_cores: float) -> None:
        self.wall += seconds
        self.own += seconds * own_cores
        self.machine += seconds * (own_cores + other_cores)

    def meter(self, cores: int = 2, machine_cores: int = 2) -> CpuShareMeter:
        return CpuShareMeter(
            read_machine=lambda: self.machine,
            read_own=lambda: self.own,
            clock=lambda: self.wall,
            cores=cores,
            machine_cores=machine_cores,
        )


def test_the_share_is_cpu_seconds_per_wall_second_over_every_stretch():
    counters = Counters()
    meter = counters.meter()
    assert meter.share() is None
    meter.start()
    counters.spend(1.0, own_cores=1.0, other_cores=1.0)  # another program held a core
    meter.stop()
    counters.spend(5.0, own_cores=0.0, other_cores=2.0)  # between stretches: not counted
    meter.start()
    counters.spend(3.0, own_cores=2.0, other_cores=0.0)
    meter.stop()
    share = meter.share()
    assert share == CpuShare(seconds=4.0, cores=2, own_cores=1.75, other_cores=0.25)
    assert not share.contended
    assert share.describe() == "this process used 1.75 of the 2 cores; other programs took 0.25"


def test_half_a_core_taken_by_others_is_contended():
    counters = Counters()
    meter = counters.meter()
    meter.start()
    counters.spend(2.0, own_cores=1.5, other_cores=0.5)
    meter.stop()
    assert meter.share().contended


def test_others_are_not_counted_where_the_machine_has_cores_this_process_cannot_use():
    counters = Counters()
    meter = counters.meter(cores=2, machine_cores=64)  # a container pinned to 2 of 64
    meter.start()
    counters.spend(1.0, own_cores=2.0, other_cores=40.0)
    meter.stop()
    share = meter.share()
    assert share.other_cores is None and not share.contended
    assert share.describe() == "this process used 2.00 of the 2 cores"


def test_stop_without_start_is_an_error():
    with pytest.raises(RuntimeError, match="without start"):
        Counters().meter().stop()


def test_the_kernels_counters_see_a_child_burn_its_cpu_time():
    # The child spins until it has spent 0.3 s of its own CPU time, however loaded the
    # machine is, then waits: this process's count (children included) and the machine's
    # both grow by at least that much.
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "while time.process_time() < 0.3: pass\n"
            "print('spent', flush=True)\n"
            "sys.stdin.read()\n",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    own, machine = own_cpu_seconds(), machine_busy_seconds()
    try:
        assert child.stdout.readline() == "spent\n"
        assert own_cpu_seconds() - own >= 0.25  # the child's 0.3 s, less its start-up before
        assert machine_busy_seconds() - machine >= 0.25
    finally:
        child.stdin.close()
        child.wait()
        child.stdout.close()


def _stage(iterator="ParallelMapV2", parallelism=1):
    return SimpleNamespace(iterator=iterator, positions=(2,), tuned=(("parallelism", parallelism),))


SLOWEST = Recommendation("make stage 2 (ParallelMapV2) cheaper: it is the slowest stage", "...")
CACHE = Recommendation("build_pipeline: cache (in memory or to a file)", "...")


def test_other_programs_holding_cores_is_said_last():
    share = CpuShare(seconds=1.0, cores=2, own_cores=1.0, other_cores=0.98)
    advice = cpu_advice([SLOWEST, CACHE], share, _stage(parallelism=2))
    assert advice[:2] == (SLOWEST, CACHE)
    assert advice[2].action.startswith("measure again with the CPU cores free")
    assert "this process used 1.00 of the 2 cores; other programs took 0.98" in advice[2].reason


def test_a_stage_left_at_one_call_with_cores_idle_comes_before_the_slowest_stage():
    share = CpuShare(seconds=1.0, cores=2, own_cores=1.02, other_cores=0.05)
    advice = cpu_advice([SLOWEST, CACHE], share, _stage(parallelism=1))
    assert advice[0].action == (
        "stage 2 (ParallelMapV2): num_parallel_calls=2 (a fixed count) instead of tf.data.AUTOTUNE"
    )
    assert "0.93 cores sat idle" in advice[0].reason
    assert advice[1:] == (SLOWEST, CACHE)


@pytest.mark.parametrize(
    ("share", "stage"),
    [
        (CpuShare(1.0, 2, 1.9, 0.0), _stage(parallelism=1)),  # no core idle
        (CpuShare(1.0, 2, 1.0, 0.9), _stage(parallelism=1)),  # held by others: said otherwise
        (CpuShare(1.0, 2, 1.0, 0.0), _stage(parallelism=2)),  # already parallel
        (CpuShare(1.0, 2, 1.0, 0.0), _stage(iterator="Map", parallelism=1)),  # not tuned
        (CpuShare(1.0, 1, 0.5, 0.0), _stage(parallelism=1)),  # one core: nothing to gain
        (None, _stage(parallelism=1)),
    ],
)
def test_no_parallelism_advice_where_more_calls_could_not_help(share, stage):
    advice = cpu_advice([SLOWEST], share, stage)
    assert advice[0] == SLOWEST
