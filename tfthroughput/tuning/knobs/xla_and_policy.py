"""How the step computes, in either mode: XLA flipped on the best setup, and the dtype policy
``recommend_precision`` recommends. (Training flips XLA around its ``steps_per_execution``
line's best instead: ``steps_per_execution.xla_around_the_best``.)
"""

from __future__ import annotations

from tfthroughput.tuning.engine.contract import Proposal, SearchView
from tfthroughput.tuning.knobs.lines import Line


def xla_knob(view: SearchView) -> Line:
    """XLA flipped on the best setup so far."""
    if view.settings.try_xla:
        best = view.best.setup
        yield Proposal(best.with_(jit_compile=not best.jit_compile))
    return view.best.ratio


def policy_knob(view: SearchView) -> Line:
    """The recommended policy, where it is not the one in force, on the best setup so far (a
    new arithmetic: its math is checked at the mode's tolerance). Where the best setup flipped
    XLA and the policy on top of it does not become the best, the policy is tried with XLA as
    given too: XLA on a CPU compiles bfloat16 poorly, so the two knobs are not independent
    (docs/tuning.md, "Why the search is shaped so")."""
    policy, given = view.settings.policy, view.base
    if policy is None or policy == given.policy:
        return view.best.ratio
    best = view.best.setup
    yield Proposal(best.with_(policy=policy))
    if best.jit_compile != given.jit_compile and view.best.setup.policy != policy:
        yield Proposal(best.with_(policy=policy, jit_compile=given.jit_compile))
    return view.best.ratio
