"""What several benchmarks share: the data they read, percentiles, the essay's knowledge base,
and a process's memory figures.

Imports nothing heavy at module level: `store_scale`'s workers import it and measure their own
peak memory.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from llama_index.core.base.embeddings.base import BaseEmbedding

    from citeflow.knowledge_base import KnowledgeBase
    from citeflow.settings import Settings
    from citeflow.store import Store

ROOT = Path(__file__).resolve().parents[1]
#: BEIR SciFact (corpus, queries, qrels), beside the checkout
SCIFACT = ROOT.parent / "shared" / "data" / "scifact"
ESSAY = ROOT / "data" / "paul_graham_essay.txt"


def p50_p95_ms(times: Sequence[float]) -> tuple[float, float]:
    """Median and 95th percentile (the value at rank 0.95 n), in milliseconds."""
    ms = sorted(t * 1000 for t in times)
    return statistics.median(ms), ms[max(0, int(0.95 * len(ms)) - 1)]


def essay_kb(
    settings: Settings, store: Store, embed_model: BaseEmbedding, metadata: Mapping[str, Any]
) -> KnowledgeBase:
    """Paul Graham's essay (`data/`) as one document with ``metadata``, in collection "essay"."""
    from llama_index.core.schema import Document

    from citeflow.knowledge_base import KnowledgeBase

    kb = KnowledgeBase(settings, store=store, embed_model=embed_model, collection="essay")
    text = ESSAY.read_text(encoding="utf-8")
    kb.add_documents([Document(id_="essay", text=text, metadata=dict(metadata))])
    return kb


def proc_status_kb(pid: int | str, *keys: str) -> dict[str, int]:
    """The ``keys`` of ``/proc/<pid>/status`` that it shows (``VmHWM``: peak RSS), in kB."""
    fields = (line.partition(":") for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    return {key: int(value.split()[0]) for key, _, value in fields if key in keys}
