"""The walkthrough notebook runs top to bottom (SmolLM2 through llama.cpp, real MiniLM)."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from citeflow.providers.models import smollm2_path

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "walkthrough.ipynb"


@pytest.mark.slow
def test_walkthrough_notebook_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CITEFLOW_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("CITEFLOW_LOCAL_MODEL_PATH", str(smollm2_path()))
    monkeypatch.setenv("CITEFLOW_LLM_MAX_TOKENS", "96")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(
        nb,
        timeout=600,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOK.parent)}},
    ).execute()
    outputs = [cell.get("outputs", []) for cell in nb.cells]
    text = "\n".join("".join(o.get("text", "") for o in cell) for cell in outputs)
    assert "paul_graham_essay.txt" in text
    assert "1 unchanged" in text  # the second ingest skipped the unchanged file
    assert "cited:" in text and "[1]" in text
    assert "[searching]" in text and "[done]" in text
    assert "search query:" in text
    assert "hybrid" in text and "nDCG@10" in text  # the evaluation table
    images = [o for cell in outputs for o in cell if "image/png" in o.get("data", {})]
    assert images, "the evaluation plot was not drawn"
