"""`nvidia-smi` polled in the background, the reference the GPU checks compare against."""

from __future__ import annotations

import math
import statistics
import subprocess
import threading
import time


class NvidiaSmiPoller:
    """`nvidia-smi --query-gpu=utilization.gpu,memory.used -lms 100` for one GPU, each row kept
    with the monotonic time it arrived (nvidia-smi's own timestamps have 1 s resolution).

    Args:
        gpu_id: What ``nvidia-smi --id`` takes: an index, a UUID or a PCI bus id. A UUID names
            the same GPU as NVML whatever the index order.
    """

    def __init__(self, gpu_id: str) -> None:
        self.rows: list[tuple[float, float, float]] = []
        self._process = subprocess.Popen(
            [
                "nvidia-smi",
                f"--id={gpu_id}",
                "--query-gpu=utilization.gpu,memory.used",
                "--format=csv,noheader,nounits",
                "-lms",
                "100",
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        for line in self._process.stdout:
            try:
                utilization, memory = (float(field) for field in line.split(","))
            except ValueError:
                continue  # "[N/A]" or a partial line
            self.rows.append((time.monotonic(), utilization, memory))

    def window(self, start: float, end: float) -> tuple[float, float, int]:
        """Mean GPU-Util (%) and memory used (MiB) of the rows that arrived in [start, end],
        and how many rows that was."""
        rows = [row for row in self.rows if start <= row[0] <= end]
        if not rows:
            return math.nan, math.nan, 0
        return (
            statistics.fmean(row[1] for row in rows),
            statistics.fmean(row[2] for row in rows),
            len(rows),
        )

    def stop(self) -> None:
        self._process.terminate()
        self._process.wait(timeout=10)
        self._thread.join(timeout=10)
