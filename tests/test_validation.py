from __future__ import annotations

import numpy as np
import pytest

from tfthroughput._validation import check_positive_int


@pytest.mark.parametrize("value", [1, 7, np.int64(3)])
def test_positive_ints_pass(value):
    check_positive_int("size", value)


def test_none_passes_only_when_allowed():
    check_positive_int("size", None, allow_none=True)
    with pytest.raises(TypeError, match=r"`size` must be a positive int\. Received: size=None"):
        check_positive_int("size", None)


@pytest.mark.parametrize(
    ("value", "error"),
    [(0, ValueError), (-3, ValueError), (2.0, TypeError), (True, TypeError), ("4", TypeError)],
)
def test_bad_values_name_the_argument_and_value(value, error):
    with pytest.raises(error, match=f"Received: size={value!r}"):
        check_positive_int("size", value, allow_none=True, also="(examples)")
    with pytest.raises(error, match=r"must be a positive int or None \(examples\)"):
        check_positive_int("size", value, allow_none=True, also="(examples)")
