"""How the step computes, in either mode: XLA flipped, and the recommended dtype policy.

Inference flips XLA on its best setup (:func:`xla_knob`); training flips it around its
``steps_per_execution`` line's best (``knobs.steps_per_execution``). Both try the policy
``recommend_precision`` recommends (:func:`policy_knob`); training then runs its
``steps_per_execution`` line once more where the policy made a new best.
"""

from __future__ import annotations

from tfthroughput.tuning.engine.search import Search
from tfthroughput.tuning.knobs.steps_per_execution import line_again_on_a_new_best


def xla_knob(search: Search) -> None:
    """XLA flipped on the best setup so far."""
    best = search.best.setup
    search.try_setup(best.with_(jit_compile=not best.jit_compile))


def policy_knob(search: Search) -> None:
    """The knob both modes try: the policy ``recommend_precision`` recommends, where it is not
    the one in force, on the best setup so far (a new arithmetic: its math is checked at the
    mode's tolerance). Where the best setup flipped XLA and the policy on top of it does not
    become the best, the policy is tried with XLA as given too: XLA on a CPU compiles bfloat16
    poorly, so the two knobs are not independent (docs/tuning.md, "Why the search is shaped
    so")."""
    policy, given = search.settings.policy, search.base_setup
    if policy is None or policy == given.policy:
        return
    best = search.best.setup
    search.try_setup(best.with_(policy=policy))
    if best.jit_compile != given.jit_compile and search.best.setup.policy != policy:
        search.try_setup(best.with_(policy=policy, jit_compile=given.jit_compile))


def training_policy_knob(search: Search) -> None:
    """The recommended policy; where it becomes the best setup, ``steps_per_execution`` once
    more on it, from the best's value doubled: a cheaper step leaves the fixed cost of a call
    a larger share, so more steps per call can pay where they did not in float32."""
    before = search.best.setup
    policy_knob(search)
    line_again_on_a_new_best(search, before)
