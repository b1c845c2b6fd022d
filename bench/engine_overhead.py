"""Engine overhead per query: everything but model time.

A scripted LLM and a hashing embedder (both ~free) answer over the essay in Qdrant `:memory:`;
the median wall time per query is citeflow's own cost: the workflow runtime, retrieval plumbing,
citation chunking, prompt building, streaming and citation repair. LlamaIndex's built-in
`CitationQueryEngine` runs on the same index, LLM and embedder in the same process for comparison.
citeflow runs twice: with dense retrieval (the same search work as `CitationQueryEngine`) and with
its default hybrid retrieval (dense + BM25; in embedded Qdrant the sparse side is scored by
qdrant-client's local mode in Python, a cost that grows with the collection).

    .venv/bin/python bench/engine_overhead.py [--queries 200]
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import sys
import time
import warnings
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from llama_index.core.query_engine import CitationQueryEngine  # noqa: E402
from llama_index.core.schema import Document  # noqa: E402

from citeflow.citations.text import split_sentences  # noqa: E402
from citeflow.knowledge_base import KnowledgeBase  # noqa: E402
from citeflow.query.grading import ScoreGrader  # noqa: E402
from citeflow.query.retrieval import Retriever, SearchOptions  # noqa: E402
from citeflow.settings import RetrievalMode, Settings  # noqa: E402
from citeflow.store import Store  # noqa: E402
from citeflow.workflows.citation_query import CitationQueryWorkflow, QueryOptions  # noqa: E402
from tests.fakes.embedding import HashEmbedding  # noqa: E402
from tests.fakes.llm import ScriptedLLM  # noqa: E402

QUESTIONS = [
    "What did the author work on before college?",
    "Why did the author start Viaweb?",
    "What happened at Y Combinator?",
    "How did the author get into Lisp?",
    "What did the author learn from painting?",
]


def ANSWER(prompt: str) -> str:
    """Quote the first sentence of the first three sources, citing them (one marker wrong)."""
    sources = re.findall(r"^\[(\d+)\][^\n]*\n([^\n]+)", prompt.split("Sources:", 1)[-1], re.M)
    sentences = [f"{split_sentences(text)[0].rstrip('.')} [{n}]." for n, text in sources[:3]]
    return " ".join(sentences) + " It also mentions something else [9]."


def build() -> KnowledgeBase:
    settings = Settings(_env_file=None, chunk_size=512, chunk_overlap=64)  # type: ignore[call-arg]
    kb = KnowledgeBase(
        settings, store=Store.open_path(":memory:"), embed_model=HashEmbedding(), collection="essay"
    )
    text = (ROOT / "data" / "paul_graham_essay.txt").read_text()
    kb.add_documents([Document(id_="essay", text=text, metadata={"file_name": "essay.txt"})])
    return kb


async def time_workflow(
    kb: KnowledgeBase, n: int, mode: RetrievalMode
) -> tuple[list[float], list[float], list[float]]:
    """Wall time per query, the part spent inside the LLM and embedder calls, and retrieval."""
    retriever = Retriever(
        kb.store,
        kb.embed_model,
        collection=kb.collection,
        top_k=6,
        options=replace(SearchOptions.from_settings(kb.settings), mode=mode),
    )
    workflow = CitationQueryWorkflow(
        retriever=retriever,
        llm=ScriptedLLM([ANSWER], chunk_words=8),
        grader=ScoreGrader(0.0),
        options=QueryOptions(),
        timeout=None,
    )
    for q in QUESTIONS:  # warm-up
        await workflow.run(query=q)
    times, model, retrieval = [], [], []
    for i in range(n):
        started = time.perf_counter()
        result = await workflow.run(query=QUESTIONS[i % len(QUESTIONS)])
        times.append(time.perf_counter() - started)
        model.append(result.timings.get("llm", 0.0) + result.timings.get("embed", 0.0))
        retrieval.append(result.timings.get("retrieve", 0.0) - result.timings.get("embed", 0.0))
        assert result.cited, "the workflow produced no citation"
    return times, model, retrieval


def time_citation_engine(kb: KnowledgeBase, n: int) -> list[float]:
    """LlamaIndex's engine, sync API (the store's client is the sync one)."""
    engine = CitationQueryEngine.from_args(
        kb.as_index(),
        llm=ScriptedLLM([lambda p: "An answer citing [1] and [2]."]),
        similarity_top_k=6,
        citation_chunk_size=512,
    )
    for q in QUESTIONS:
        engine.query(q)
    times = []
    for i in range(n):
        started = time.perf_counter()
        engine.query(QUESTIONS[i % len(QUESTIONS)])
        times.append(time.perf_counter() - started)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    kb = build()
    rows: list[tuple[str, list[float]]] = []
    for mode in ("dense", "hybrid"):
        ours, model, retrieval = asyncio.run(time_workflow(kb, args.queries, mode))
        overhead = [t - m for t, m in zip(ours, model, strict=True)]
        outside = [o - r for o, r in zip(overhead, retrieval, strict=True)]
        rows += [
            (f"citeflow {mode}: wall time", ours),
            (f"citeflow {mode}: in the fake LLM and embedder", model),
            (f"citeflow {mode}: engine overhead (wall - model)", overhead),
            (f"citeflow {mode}: of which search + thread hop", retrieval),
            (f"citeflow {mode}: overhead outside retrieval", outside),
        ]
    rows.append(
        ("LlamaIndex CitationQueryEngine: wall time", time_citation_engine(kb, args.queries))
    )
    print(f"engine overhead per query, {args.queries} queries, essay in Qdrant :memory:")
    print(f"{'':48s} {'median ms':>10s} {'p95 ms':>8s}")
    for name, times in rows:
        ms = sorted(t * 1000 for t in times)
        print(f"{name:48s} {statistics.median(ms):10.2f} {ms[int(0.95 * len(ms)) - 1]:8.2f}")
    print("target: citeflow engine overhead median <= 5 ms (dense: the same work as the baseline)")


if __name__ == "__main__":
    main()
