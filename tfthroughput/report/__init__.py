"""`tfthroughput report`: one HTML page comparing the monitored runs under a log folder."""

from __future__ import annotations

from tfthroughput._lazy import lazy_exports

# Public name -> module that defines it.
_EXPORTS: dict[str, str] = {
    "RunComparison": "tfthroughput.report.run_comparison",
    "compare_runs": "tfthroughput.report.run_comparison",
    "write_report": "tfthroughput.report.html",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
