"""tuning/inference/output_check.py: a candidate's ``predict`` outputs against the baseline's,
element by element, relative to the largest baseline output; a structure, a shape or a
non-finite value that differs is an infinite difference."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tfthroughput.tuning import OutputCheck
from tfthroughput.tuning.inference.output_check import EXACT_OUTPUT_TOLERANCE, compare_outputs


def test_output_check_compares_every_output_against_the_largest():
    base = {"a": np.array([[1.0], [-4.0]]), "b": np.array([0.5, 0.0])}
    same = compare_outputs(base, base, same_arithmetic=True, tolerance=1e-6)
    assert same.passed and (same.max_abs_difference, same.examples) == (0.0, 2)
    moved = {"a": np.array([[1.0], [-4.0]]), "b": np.array([0.5, 0.2])}
    check = compare_outputs(base, moved, same_arithmetic=False, tolerance=0.02)
    assert check == OutputCheck(0.2, 0.05, False, 0.02, 2) and not check.passed
    nan = {"a": np.array([[np.nan], [-4.0]]), "b": np.array([0.5, 0.0])}
    assert not compare_outputs(base, nan, same_arithmetic=False, tolerance=0.5).passed
    assert not compare_outputs(base, {"a": base["a"]}, same_arithmetic=True, tolerance=1).passed


def test_passed_is_within_the_tolerance_inclusive_and_finite():
    assert OutputCheck(0.1, 0.02, False, 0.02, 8).passed
    assert not OutputCheck(0.1, 0.0200001, False, 0.02, 8).passed
    # Not finite fails whatever the tolerance, an infinite one included.
    assert not OutputCheck(math.inf, math.inf, False, math.inf, 8).passed
    assert not OutputCheck(math.nan, math.nan, False, math.inf, 8).passed


def test_the_check_reads_as_its_verdict_then_its_figures():
    moved = OutputCheck(0.2, 0.05, False, 0.02, 2)
    assert str(moved) == "DIFFER: 5.0e-02 (max abs 2.0e-01, changed arithmetic, tolerance 2e-02)"
    exact = OutputCheck(0.0, 0.0, True, EXACT_OUTPUT_TOLERANCE, 64)
    assert str(exact) == "ok: 0.0e+00 (max abs 0.0e+00, same arithmetic, tolerance 1e-06)"


def test_float32_rounding_passes_the_exact_tolerance_and_a_real_change_does_not():
    base = np.array([[1.0, -0.5], [0.25, 2.0]], "float32")
    one_ulp = base.copy()
    one_ulp[1, 1] = np.nextafter(np.float32(2.0), np.float32(3.0))  # 2.4e-7 above 2.0
    check = compare_outputs(base, one_ulp, same_arithmetic=True, tolerance=EXACT_OUTPUT_TOLERANCE)
    assert check.max_abs_difference == pytest.approx(2.0**-22)
    assert check.max_rel_difference == pytest.approx(2.0**-23) and check.passed
    changed = base + np.float32(1e-4)
    check = compare_outputs(base, changed, same_arithmetic=True, tolerance=EXACT_OUTPUT_TOLERANCE)
    assert check.max_rel_difference == pytest.approx(5e-5, rel=1e-3) and not check.passed


def test_the_scale_is_the_largest_baseline_output_so_outputs_near_zero_do_not_inflate_it():
    base = [np.array([1e-9, 100.0]), np.array([[-400.0]])]
    near_zero = [np.array([3e-9, 100.0]), np.array([[-400.0]])]
    check = compare_outputs(base, near_zero, same_arithmetic=False, tolerance=0.02)
    # 2e-9 off an output of 1e-9 is 200 %, but 5e-12 of the outputs' scale.
    assert check.max_rel_difference == pytest.approx(2e-9 / 400.0) and check.passed
    zeros = np.zeros((4, 2))
    check = compare_outputs(zeros, zeros + 1e-3, same_arithmetic=False, tolerance=0.02)
    assert check.max_abs_difference == pytest.approx(1e-3) and not check.passed
    assert check.max_rel_difference == pytest.approx(1e-3 / 1e-12)  # a zero scale is floored


def test_a_shape_or_structure_that_differs_is_an_infinite_difference():
    base = np.zeros((3, 2))
    for candidate in (np.zeros((3, 1)), np.zeros((2, 2)), [base, base]):
        check = compare_outputs(base, candidate, same_arithmetic=False, tolerance=1.0)
        assert check == OutputCheck(math.inf, math.inf, False, 1.0, 3)
        assert str(check).startswith("DIFFER: inf")


def test_non_finite_baseline_outputs_must_be_matched_exactly():
    base = np.array([np.nan, 1.0, np.inf, -np.inf])
    assert compare_outputs(base, base.copy(), same_arithmetic=True, tolerance=1e-6).passed
    for candidate in ([np.nan, 1.0, -np.inf, -np.inf], [0.0, 1.0, np.inf, -np.inf]):
        check = compare_outputs(base, np.array(candidate), same_arithmetic=True, tolerance=1.0)
        assert check.max_abs_difference == math.inf and not check.passed
    # A candidate infinite where the baseline is finite.
    check = compare_outputs(base, np.array([np.nan, np.inf, np.inf, -np.inf]), **EXACT)
    assert check.max_rel_difference == math.inf


EXACT = {"same_arithmetic": True, "tolerance": EXACT_OUTPUT_TOLERANCE}


def test_empty_outputs_are_skipped_and_scalar_outputs_count_no_examples():
    base = {"a": np.zeros((0, 3)), "b": np.array([2.0, 4.0])}
    candidate = {"a": np.zeros((0, 3)), "b": np.array([2.0, 4.2])}
    check = compare_outputs(base, candidate, same_arithmetic=False, tolerance=0.1)
    assert check == OutputCheck(pytest.approx(0.2), pytest.approx(0.05), False, 0.1, 0)
    scalar = compare_outputs(np.float32(3.0), np.float32(3.0), **EXACT)
    assert scalar.examples == 0 and scalar.max_abs_difference == 0.0 and scalar.passed
