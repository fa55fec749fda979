"""Advice from the cores the input pipeline got while it was timed alone.

Two cases look alike in a throughput figure (a parallel pipeline running at the speed of a
sequential one) and have different fixes: another program holding cores (Linux shares cores
between programs, not threads, so tf.data's threads get what is left whatever AUTOTUNE set),
and AUTOTUNE keeping a parallel stage at one call while cores sit idle. Pure rules, no
TensorFlow; both diagnosis modes apply them to their advice.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tfthroughput.diagnosis.recommendations import SLOWEST_STAGE_ACTION, Recommendation
from tfthroughput.hardware.cpu_share import CpuShare

# Iterators whose parallelism AUTOTUNE sets (the names tf.data's trace gives them).
PARALLEL_ITERATORS = ("ParallelMapV2", "ParallelMap", "MapAndBatch", "ParallelBatch")
# Cores left unused from which one call at a time counts as leaving the machine idle.
IDLE_CORES = 0.5


def cpu_advice(
    advice: Sequence[Recommendation], input_cpu: CpuShare | None, slowest_stage: Any
) -> tuple[Recommendation, ...]:
    """``advice`` with what the CPU share says: a stage AUTOTUNE kept at one call with cores
    idle goes first among the pipeline's advice; cores another program held, last."""
    advice = list(advice)
    capped = capped_stage_recommendation(slowest_stage, input_cpu)
    if capped is not None:
        slowest = [i for i, r in enumerate(advice) if r.action.startswith(SLOWEST_STAGE_ACTION)]
        advice.insert(slowest[0] if slowest else len(advice), capped)
    if input_cpu is not None and input_cpu.contended:
        advice.append(contention_recommendation(input_cpu))
    return tuple(advice)


def capped_stage_recommendation(stage: Any, input_cpu: CpuShare | None) -> Recommendation | None:
    """A parallel stage left at ``parallelism=1`` while at least ``IDLE_CORES`` sat idle, or
    ``None``."""
    if stage is None or input_cpu is None or input_cpu.cores < 2 or input_cpu.contended:
        return None
    tuned = dict(stage.tuned)
    if stage.iterator not in PARALLEL_ITERATORS or tuned.get("parallelism") != 1:
        return None
    idle = input_cpu.cores - input_cpu.own_cores - (input_cpu.other_cores or 0.0)
    if idle < IDLE_CORES:
        return None
    where = "+".join(map(str, stage.positions)) or "(inner)"
    return Recommendation(
        f"stage {where} ({stage.iterator}): num_parallel_calls={input_cpu.cores} "
        "(a fixed count) instead of tf.data.AUTOTUNE",
        f"AUTOTUNE kept stage {where} at parallelism=1 while the input pipeline ran alone: "
        f"{input_cpu.describe()}, so {idle:.2f} cores sat idle and the stage ran one call at "
        "a time. A fixed count runs that many calls whatever the autotuner decides; if the "
        "dataset's tf.data.Options set autotune.cpu_budget or ram_budget, a higher budget "
        "lets AUTOTUNE choose more.",
    )


def contention_recommendation(input_cpu: CpuShare) -> Recommendation:
    """Other programs held cores while the input pipeline was timed."""
    return Recommendation(
        "measure again with the CPU cores free: other programs held some while the input "
        "pipeline was timed",
        f"While the input pipeline ran alone, {input_cpu.describe()}. Linux shares the cores "
        "between programs, not threads: tf.data's parallel stages got what the other "
        "programs left, whatever AUTOTUNE set, so the input figure (a) is lower than on a "
        "quiet machine. Stop or pause the other work (a second training, a data job), or give "
        "it other cores (taskset), then diagnose again.",
    )
