"""Filtering TensorFlow's native start-up log: which lines go, which stay, and the descriptor."""

from __future__ import annotations

import subprocess
import sys
from itertools import zip_longest

from tfthroughput._startup import drop_startup_noise

# Captured from TensorFlow 2.21 starting on a CPU-only machine (stderr of `import tensorflow`
# and the first device listing), plus lines other machines and releases print.
STARTUP_LOG = """\
WARNING: All log messages before absl::InitializeLog() is called are written to STDERR
I0000 00:00:1796003938.030014    9717 cudart_stub.cc:31] Could not find cuda drivers on your machine, GPU will not be used.
I0000 00:00:1796003938.108432    9717 cpu_feature_guard.cc:227] This TensorFlow binary is optimized to use available CPU instructions in performance-critical operations.
To enable the following instructions: AVX2 FMA, in other operations, rebuild TensorFlow with the appropriate compiler flags.
E0000 00:00:1796003942.378148    9717 cuda_platform.cc:52] failed call to cuInit: INTERNAL: CUDA error: Failed call to cuInit: UNKNOWN ERROR (303)
I0000 00:00:1712345678.123456    4242 port.cc:153] oneDNN custom operations are on. You may see slightly different numerical results due to floating-point round-off errors from different computation orders. To turn them off, set the environment variable `TF_ENABLE_ONEDNN_OPTS=0`.
E0000 00:00:1712345678.223344    4242 cuda_dnn.cc:8310] Unable to register cuDNN factory: Attempting to register factory for plugin cuDNN when one has already been registered
W0000 00:00:1712345679.000001    4242 cuda_blas.cc:1418] Unable to register cuBLAS factory: Attempting to register factory for plugin cuBLAS when one has already been registered
2024-01-31 12:00:00.000000: I tensorflow/core/util/port.cc:113] oneDNN custom operations are on.
"""  # noqa: E501

OURS = """\
/work/tfthroughput/thing.py:12: UserWarning: something the user must see
  warnings.warn(
Traceback (most recent call last):
ImportError: libcudart.so.12: cannot open shared object file
F0000 00:00:1796003938.030014    9717 some_check.cc:1] Check failed: fatal lines always show
WARNING:absl:Python-side absl warnings are not start-up log
"""


def test_start_up_lines_go_and_everything_else_stays():
    assert drop_startup_noise(STARTUP_LOG) == ""
    assert drop_startup_noise(OURS) == OURS
    pairs = zip_longest(STARTUP_LOG.splitlines(True), OURS.splitlines(True), fillvalue="")
    mixed = "".join(noise + ours for noise, ours in pairs)
    assert drop_startup_noise(mixed) == OURS


# Writes straight to file descriptor 2 as native code does, inside and after the window.
_CHILD = """
import os, sys
from tfthroughput._startup import native_stderr_filtered

noise = b"I0000 00:00:1796003938.030014    9717 cudart_stub.cc:31] Could not find cuda\\n"
with native_stderr_filtered():
    os.write(2, noise)
    print("a Python warning", file=sys.stderr)
    os.write(2, b"a native line that is not log\\n")
try:
    with native_stderr_filtered():
        os.write(2, noise)
        raise KeyError("inside")
except KeyError:
    pass
os.write(2, noise)  # after the window: the descriptor is the terminal again, unfiltered
"""


def test_descriptor_is_filtered_in_the_window_and_restored_after():
    result = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == [
        "a Python warning",
        "a native line that is not log",
        "I0000 00:00:1796003938.030014    9717 cudart_stub.cc:31] Could not find cuda",
    ]
