from __future__ import annotations

import pytest

from tfthroughput.hardware.gpu_devices import resolve_visible

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


MIGS = [
    "MIG-1111aaaa-0000-0000-0000-000000000000",
    "MIG-2222bbbb-0000-0000-0000-000000000000",
    "MIG-2222cccc-0000-0000-0000-000000000000",
]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("MIG-2222bbbb-0000-0000-0000-000000000000", [4]),  # positions past the GPUs: slices
        ("MIG-1111,2", [3, 2]),  # unique prefix, mixed with a GPU index
        ("GPU-aaaa,MIG-2222cccc", [0, 5]),
        ("MIG-2222,0", []),  # ambiguous prefix: CUDA stops there
        ("MIG-9999", []),
        ("MIG-1111,MIG-1111aaaa", [3]),  # the same slice twice ends the list
    ],
)
def test_mig_uuids_resolve_to_their_slices(value, expected):
    assert resolve_visible(UUIDS, value, MIGS) == expected


def test_unset_means_every_whole_gpu_even_with_mig_slices_known():
    assert resolve_visible(UUIDS, None, MIGS) == [0, 1, 2]
