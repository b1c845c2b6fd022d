"""Engine overhead per query: everything but model time.

A scripted LLM and a hashing embedder (both ~free) answer over the essay in Qdrant `:memory:`;
the median wall time per query is citeflow's own cost: the workflow runtime, retrieval plumbing,
citation chunking, prompt building, streaming and citation repair. LlamaIndex's built-in
`CitationQueryEngine` runs on the same index, LLM and embedder in the same process for comparison.

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
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from llama_index.core.query_engine import CitationQueryEngine  # noqa: E402
from llama_index.core.schema import Document  # noqa: E402

from citeflow.citations.text import split_sentences  # noqa: E402
from citeflow.knowledge_base import KnowledgeBase  # noqa: E402
from citeflow.query.grading import ScoreGrader  # noqa: E402
from citeflow.settings import Settings  # noqa: E402
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


async def time_workflow(kb: KnowledgeBase, n: int) -> tuple[list[float], list[float], list[float]]:
    """Wall time per query, the part spent inside the LLM and embedder calls, and retrieval."""
    workflow = CitationQueryWorkflow(
        retriever=kb.retriever(top_k=6),
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
    ours, model, retrieval = asyncio.run(time_workflow(kb, args.queries))
    theirs = time_citation_engine(kb, args.queries)
    overhead = [t - m for t, m in zip(ours, model, strict=True)]
    outside = [o - r for o, r in zip(overhead, retrieval, strict=True)]
    print(f"engine overhead per query, {args.queries} queries, essay in Qdrant :memory:")
    print(f"{'':44s} {'median ms':>10s} {'p95 ms':>8s}")
    rows = (
        ("citeflow: wall time", ours),
        ("citeflow: in the fake LLM and embedder calls", model),
        ("citeflow: engine overhead (wall - model)", overhead),
        ("citeflow: of which Qdrant search + thread hop", retrieval),
        ("citeflow: engine overhead outside retrieval", outside),
        ("LlamaIndex CitationQueryEngine: wall time", theirs),
    )
    for name, times in rows:
        ms = sorted(t * 1000 for t in times)
        print(f"{name:44s} {statistics.median(ms):10.2f} {ms[int(0.95 * len(ms)) - 1]:8.2f}")
    print("target: citeflow engine overhead median <= 5 ms")


if __name__ == "__main__":
    main()
