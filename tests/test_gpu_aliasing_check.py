"""`benchmarks/gpu_aliasing_check.py` runs end to end against the fake NVML library.

The script is meant for a real GPU; here `--load none` replaces the matmul bursts by sleeps and
the fake's GPU-Util buffer holds 100, 0, 0, 0, 0 every 200 ms while its point value says 0, so
the plumbing (pollers, the sampler at its default interval, the table) is checked with known
answers: the pollers see 0 %, the sampler the buffer's 20 %.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from fake_nvml import run_python_with_fake_nvml

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_aliasing_check.py"


def test_the_aliasing_check_reports_polling_and_buffer_through_the_fake(fake_nvml_dir):
    try:
        result = run_python_with_fake_nvml(
            f"import runpy, sys; sys.argv = ['x', '--load', 'none', '--seconds', '2'];"
            f"runpy.run_path({str(SCRIPT)!r}, run_name='__main__')",
            fake_nvml_dir,
            env={
                "FAKE_NVML_DEVICE_COUNT": "1",
                "FAKE_NVML_SAMPLES_GPU": "100,0,0,0,0",
                "FAKE_NVML_UTILIZATION_GPU": "0",
            },
            timeout=120,
        )
    except subprocess.TimeoutExpired as error:  # pragma: no cover - reported, not hidden
        raise AssertionError(f"the check hung: {error}") from error
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "gpu0 = Fake GPU 0 (GPU-00000000-0000-0000-0000-000000000000); " + (
        "load: no GPU work (plumbing check)"
    )
    assert re.fullmatch(
        r"GPU-Util sampling period: buffer timestamps 200 ms apart \(median\); point value "
        r"polled every 10 ms for 3 s: 1 changes, n/a apart \(median\)",
        lines[1],
    ), lines[1]
    rows = [line for line in lines if re.match(r"\| 0\.\d\d s", line)]
    assert len(rows) == 3
    for row in rows:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        assert cells[2].startswith("0.0 % (")  # 1 s polling of the point value: 0
        assert cells[3] == "0.0 %"
        mean, samples = re.fullmatch(r"([\d.]+) % \((\d+) buffer samples\)", cells[4]).groups()
        # 2 s of 200 ms samples, one in five is 100: ~20 % over ~10 samples
        assert 8 <= int(samples) <= 12
        assert float(mean) == round(100 * round(float(mean) * int(samples) / 100) / int(samples), 1)
        assert 5.0 <= float(mean) <= 40.0
    assert lines[-1].startswith("SUMMARY gpu aliasing: worst |GPU-Util - true busy share|")
