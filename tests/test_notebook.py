"""The quickstart notebook is executed, so it cannot rot."""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbclient import NotebookClient

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "quickstart.ipynb"


def test_quickstart_runs_top_to_bottom(tmp_path, monkeypatch):
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")
    monkeypatch.delenv("MPLBACKEND", raising=False)  # the kernel's inline backend draws the plot
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(
        notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": tmp_path}}
    ).execute()

    def text_of(cell) -> str:
        parts = []
        for output in cell.get("outputs", []):
            parts.append(output.get("text", ""))
            parts.append(output.get("data", {}).get("text/plain", ""))
        return "".join(parts)

    code_cells = [cell for cell in notebook.cells if cell.cell_type == "code"]
    outputs = "\n".join(text_of(cell) for cell in code_cells)
    assert "240 JPEGs" in outputs
    assert "Verdict:" in outputs
    assert "precision policy:" in outputs
    assert "after: float32" in outputs
    images = [o for cell in code_cells for o in cell.outputs if "image/png" in o.get("data", {})]
    assert len(images) == 1  # the per-epoch plot
    assert not any(o.get("output_type") == "error" for cell in code_cells for o in cell.outputs)
