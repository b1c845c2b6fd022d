"""Engine overhead per query: everything but model time.

A scripted LLM and a hashing embedder (both ~free) answer over the essay in the embedded store
(qdrant-edge, in a temporary directory, as `citeflow ingest` leaves it: indexed);
the median wall time per query is citeflow's own cost: the workflow runtime, retrieval plumbing,
citation chunking, prompt building, streaming and citation repair. LlamaIndex's built-in
`CitationQueryEngine` runs on the same index, LLM and embedder in the same process for comparison.
citeflow runs twice: with dense retrieval (the same search work as `CitationQueryEngine`) and with
its default hybrid retrieval (dense + BM25), and hybrid once more with the opt-in step cache
(`citeflow.speedups`).

Observability (issue 19's target: metrics and tracing add at most 1 ms per answer): the hybrid
workflow runs twice more, its events streamed as the server streams them: once bare, then through
`Metrics.observe_events` (every answer metric recorded, as ``/metrics`` counts a stream) with an
OpenTelemetry SDK tracer provider set (a span per run and per step, batched to an exporter that
drops them: the cost of making spans, not of a collector). The provider is global and stays set,
so that variant runs last.

    .venv/bin/python bench/engine_overhead.py [--queries 200]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import re
import statistics
import tempfile
import time
import timeit
import warnings
from collections.abc import AsyncIterator
from typing import Any

from llama_index.core.query_engine import CitationQueryEngine
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from workflows.events import StopEvent

from citeflow.api.metrics import Metrics
from citeflow.citations.text import split_sentences
from citeflow.knowledge_base import KnowledgeBase
from citeflow.query.grading import ScoreGrader
from citeflow.query.retrieval import Retriever
from citeflow.result import CitedResponse
from citeflow.settings import RetrievalMode, Settings
from citeflow.speedups import with_step_cache
from citeflow.store import Store
from citeflow.testing.embedding import HashEmbedding
from citeflow.testing.llm import ScriptedLLM
from citeflow.workflows.citation_query import CitationQueryWorkflow
from common import essay_kb, p50_p95_ms

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


class Dropped(SpanExporter):
    """An exporter that drops what it is given."""

    def export(self, spans: Any) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def build() -> KnowledgeBase:
    settings = Settings(_env_file=None, chunking={"size": 512, "overlap": 64})
    store = Store.open_path(tempfile.mkdtemp(prefix="engine-overhead-"))
    kb = essay_kb(settings, store, HashEmbedding(), {"file_name": "essay.txt"})
    kb.store.optimize(kb.collection)
    return kb


async def _streamed(workflow: CitationQueryWorkflow, query: str) -> AsyncIterator[Any]:
    """The run's stream events, then its result, as the server's `Engine.events` yields them."""
    handler = workflow.run(query=query)
    async for event in handler.stream_events():
        if not isinstance(event, StopEvent):
            yield event
    yield await handler


async def time_workflow(
    kb: KnowledgeBase,
    n: int,
    mode: RetrievalMode,
    *,
    streamed: bool = False,
    metrics: Metrics | None = None,
    step_cache: bool = False,
) -> tuple[list[float], list[float], list[float]]:
    """Wall time per query, the part spent inside the LLM and embedder calls, and retrieval."""
    retriever = Retriever(
        kb.store,
        kb.embed_model,
        collection=kb.collection,
        settings=kb.settings.retrieval.model_copy(update={"mode": mode}),
        top_k=6,
    )
    build = with_step_cache(CitationQueryWorkflow) if step_cache else CitationQueryWorkflow
    workflow = build(
        retriever=retriever,
        llm=ScriptedLLM([ANSWER], chunk_words=8),
        grader=ScoreGrader(0.0),
        timeout=None,
    )

    async def answer(query: str) -> CitedResponse:
        if not streamed:
            result: CitedResponse = await workflow.run(query=query)
            return result
        items = _streamed(workflow, query)
        if metrics is not None:
            items = metrics.observe_events(items, lambda r: {"prompt_tokens": 1})
        async for item in items:
            if isinstance(item, CitedResponse):
                result = item
        return result

    for q in QUESTIONS:  # warm-up
        await answer(q)
    times, model, retrieval = [], [], []
    for i in range(n):
        started = time.perf_counter()
        result = await answer(QUESTIONS[i % len(QUESTIONS)])
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
    questions = itertools.cycle(QUESTIONS)
    return timeit.repeat(lambda: engine.query(next(questions)), "gc.enable()", repeat=n, number=1)


def minus(values: list[float], parts: list[float]) -> list[float]:
    """Each value less its part (the same query's)."""
    return [v - p for v, p in zip(values, parts, strict=True)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    kb = build()
    rows: list[tuple[str, list[float]]] = []
    for mode in ("dense", "hybrid"):
        ours, model, retrieval = asyncio.run(time_workflow(kb, args.queries, mode))
        overhead = minus(ours, model)
        outside = minus(overhead, retrieval)
        rows += [
            (f"citeflow {mode}: wall time", ours),
            (f"citeflow {mode}: in the fake LLM and embedder", model),
            (f"citeflow {mode}: engine overhead (wall - model)", overhead),
            (f"citeflow {mode}: of which search + thread hop", retrieval),
            (f"citeflow {mode}: overhead outside retrieval", outside),
        ]
    cached, model, _ = asyncio.run(time_workflow(kb, args.queries, "hybrid", step_cache=True))
    rows.append(("citeflow hybrid, CITEFLOW_STEP_CACHE: engine overhead", minus(cached, model)))
    rows.append(
        ("LlamaIndex CitationQueryEngine: wall time", time_citation_engine(kb, args.queries))
    )
    observed: dict[str, list[float]] = {}
    for name in ("streamed", "streamed + metrics + tracing"):
        if name != "streamed":
            provider = TracerProvider()
            provider.add_span_processor(BatchSpanProcessor(Dropped()))
            trace.set_tracer_provider(provider)
        run = time_workflow(
            kb, args.queries, "hybrid", streamed=True, metrics=Metrics() if "+" in name else None
        )
        ours, model, _ = asyncio.run(run)
        observed[name] = minus(ours, model)
        rows.append((f"citeflow hybrid {name}: engine overhead", observed[name]))
    print(f"engine overhead per query, {args.queries} queries, essay in the embedded store")
    print(f"{'':48s} {'median ms':>10s} {'p95 ms':>8s}")
    for name, times in rows:
        p50, p95 = p50_p95_ms(times)
        print(f"{name:48s} {p50:10.2f} {p95:8.2f}")
    added = statistics.median(observed["streamed + metrics + tracing"]) - statistics.median(
        observed["streamed"]
    )
    print(f"metrics + tracing add {added * 1000:.2f} ms per answer (median against median)")
    print("target: citeflow engine overhead median <= 5 ms (dense: the same work as the baseline)")
    print("target: metrics and tracing add <= 1 ms per answer")


if __name__ == "__main__":
    main()
