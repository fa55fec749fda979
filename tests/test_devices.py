from __future__ import annotations

import pytest

from tfthroughput.hardware.devices import resolve_visible

UUIDS = [
    "GPU-aaaa1111-0000-0000-0000-000000000000",
    "GPU-bbbb2222-0000-0000-0000-000000000000",
    "GPU-bbbb3333-0000-0000-0000-000000000000",
]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, [0, 1, 2]),  # unset: every device, NVML order
        ("", []),  # set but empty: CUDA sees nothing
        ("2,0", [2, 0]),  # TensorFlow's /GPU:0 is NVML device 2
        (" 1 , 2 ", [1, 2]),
        ("GPU-bbbb3333-0000-0000-0000-000000000000", [2]),  # full UUID
        ("GPU-aaaa,1", [0, 1]),  # unique prefix, mixed with an index
        ("GPU-bbbb", []),  # ambiguous prefix: CUDA stops there
        ("0,7,1", [0]),  # invalid index truncates the list
        ("-1", []),
        ("1,1", [1]),  # a repeated device ends the list
        ("MIG-12345678-aaaa,0", []),
    ],
)
def test_cuda_visible_devices_decides_which_gpus_and_their_order(value, expected):
    assert resolve_visible(UUIDS, value) == expected
