"""Run retrievers over a dataset's queries and score them: the retrieval half of ``citeflow eval``.

Any object with ``async def search(query: str, top_k: int) -> list[tuple[doc_id, score]]`` is a
`RetrieverLike`; `DenseSearch` (citeflow's own retrieval: dense, BM25 or hybrid over one cached
index) is one, and others plug in the same way, by name through `RETRIEVERS`::

    dataset = load_beir("/work/shared/data/scifact")
    with DenseIndex.open(dataset, embed_model=embed, embedder="MiniLM", cache_dir=cache) as index:
        report = evaluate_retrieval(dataset, {"dense": index.retriever()})
    print(report.table())
    report.write_json("scifact.json")

Each retriever's queries run concurrently (at most ``concurrency`` in flight), one retriever
after the other so that their timings do not disturb each other.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from tqdm.auto import tqdm

from citeflow.errors import InvalidRequestError
from citeflow.evaluation.dataset import BeirDataset
from citeflow.evaluation.metrics import best_scores, evaluate, metric_name, per_query, rank
from citeflow.evaluation.table import text_table

if TYPE_CHECKING:
    from llama_index.core.base.embeddings.base import BaseEmbedding

    from citeflow.evaluation.dense import DenseIndex
    from citeflow.settings import RetrievalMode, Settings

__all__ = [
    "DEFAULT_K_VALUES",
    "RETRIEVERS",
    "EvalContext",
    "EvalReport",
    "RetrieverFactory",
    "RetrieverLike",
    "RetrieverResult",
    "aevaluate_retrieval",
    "build_citeflow",
    "evaluate_retrieval",
]

DEFAULT_K_VALUES: tuple[int, ...] = (10, 100)
#: how many documents of each query's ranking the JSON report keeps
TOP_IN_REPORT = 10


@runtime_checkable
class RetrieverLike(Protocol):
    """Anything that ranks the corpus' documents for a query."""

    async def search(self, query: str, top_k: int) -> list[tuple[str, float]]:
        """The ``top_k`` best (document id, score) pairs, best first."""
        ...


@dataclass
class RetrieverResult:
    """One retriever's scores on a dataset."""

    name: str
    metrics: dict[str, float]
    """Mean of each metric, e.g. ``{"nDCG@10": 0.64, "Recall@100": 0.92, ...}``."""
    per_query: dict[str, dict[str, float]]
    run: dict[str, dict[str, float]]
    """Query id → {document id: score}: what the retriever returned."""
    queries: int
    seconds: float
    """Wall time of the query phase (index building excluded)."""
    info: dict[str, Any] = field(default_factory=dict)
    """What the retriever says about itself (e.g. the dense index's cache facts)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: metrics, timings, info, and per query its metrics and top documents."""
        return {
            "metrics": {k: round(v, 6) for k, v in self.metrics.items()},
            "queries": self.queries,
            "seconds": round(self.seconds, 3),
            "queries_per_second": round(self.queries / self.seconds, 2) if self.seconds else None,
            "info": self.info,
            "per_query": {
                qid: {
                    **{k: round(v, 6) for k, v in values.items()},
                    "top": rank(self.run.get(qid, {}))[:TOP_IN_REPORT],
                }
                for qid, values in self.per_query.items()
            },
        }


@dataclass
class EvalReport:
    """The evaluation of one or more retrievers on one dataset split."""

    dataset: dict[str, Any]
    k_values: tuple[int, ...]
    retrieval: dict[str, RetrieverResult]
    created: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))
    extra: dict[str, Any] = field(default_factory=dict)
    """Room for other sections (e.g. citation metrics), written as top-level JSON keys."""

    @property
    def headline(self) -> list[str]:
        """The table's metric columns: nDCG and MRR at the smallest k, Recall at the largest."""
        small, large = min(self.k_values), max(self.k_values)
        return [metric_name("nDCG", small), metric_name("Recall", large), metric_name("MRR", small)]

    def table(self) -> str:
        """A plain-text table: one row per retriever."""
        columns = ["retriever", *self.headline, "queries", "seconds"]
        rows = [
            [
                name,
                *(f"{result.metrics.get(m, 0.0):.4f}" for m in self.headline),
                str(result.queries),
                f"{result.seconds:.1f}",
            ]
            for name, result in self.retrieval.items()
        ]
        title = (
            f"{self.dataset.get('name', '?')}/{self.dataset.get('split', '?')}: "
            f"{self.dataset.get('queries', '?')} queries, "
            f"{self.dataset.get('documents', '?')} documents"
        )
        if not self.dataset.get("full_corpus", True):
            title += " (corpus slice: not comparable with published figures)"
        return text_table(title, columns, rows)

    def to_dict(self) -> dict[str, Any]:
        """The JSON report."""
        from citeflow import __version__

        return {
            "citeflow": __version__,
            "created": self.created,
            "dataset": self.dataset,
            "k_values": list(self.k_values),
            "retrieval": {name: r.to_dict() for name, r in self.retrieval.items()},
            **self.extra,
        }

    def write_json(self, path: str | Path) -> Path:
        """Write the JSON report (parent folders created); returns the path."""
        target = Path(path).expanduser()
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(self.to_dict(), indent=2) + "\n", encoding="utf-8")
        return target


def dataset_facts(dataset: BeirDataset) -> dict[str, Any]:
    """What the report says about the dataset."""
    return {
        "name": dataset.name,
        "path": str(dataset.path),
        "split": dataset.split,
        "queries": len(dataset.queries),
        "documents": len(dataset.corpus),
        "judgements": dataset.judgements,
        "full_corpus": dataset.full_corpus,
        "evidence_queries": len(dataset.evidence),
    }


async def _run_one(
    name: str,
    retriever: RetrieverLike,
    queries: Mapping[str, str],
    *,
    top_k: int,
    concurrency: int,
    progress: bool,
) -> tuple[dict[str, dict[str, float]], float]:
    gate = asyncio.Semaphore(concurrency)
    run: dict[str, dict[str, float]] = {}
    with tqdm(total=len(queries), desc=name, unit="query", disable=not progress) as bar:

        async def one(qid: str, text: str) -> None:
            async with gate:
                hits = await retriever.search(text, top_k)
            run[qid] = best_scores(hits)
            bar.update(1)

        started = time.perf_counter()
        try:
            async with asyncio.TaskGroup() as group:
                for qid, text in queries.items():
                    group.create_task(one(qid, text))
        except BaseExceptionGroup as group_error:
            raise group_error.exceptions[0] from None
    return run, time.perf_counter() - started


async def aevaluate_retrieval(
    dataset: BeirDataset,
    retrievers: Mapping[str, RetrieverLike],
    k_values: Sequence[int] = DEFAULT_K_VALUES,
    *,
    progress: bool = True,
    concurrency: int = 8,
) -> EvalReport:
    """Run each retriever on every query of ``dataset`` and score it (see `evaluate_retrieval`)."""
    ks = tuple(sorted(set(k_values)))
    if not ks or ks[0] < 1:
        raise InvalidRequestError(f"k values must be positive integers, got {list(k_values)}")
    if concurrency < 1:
        raise InvalidRequestError(f"concurrency must be at least 1, got {concurrency}")
    results: dict[str, RetrieverResult] = {}
    for name, retriever in retrievers.items():
        run, seconds = await _run_one(
            name,
            retriever,
            dataset.queries,
            top_k=max(ks),
            concurrency=concurrency,
            progress=progress,
        )
        info = getattr(retriever, "info", None)
        results[name] = RetrieverResult(
            name=name,
            metrics=evaluate(run, dataset.qrels, ks),
            per_query=per_query(run, dataset.qrels, ks),
            run=run,
            queries=len(dataset.queries),
            seconds=seconds,
            info=dict(info) if isinstance(info, Mapping) else {},
        )
    return EvalReport(dataset=dataset_facts(dataset), k_values=ks, retrieval=results)


def evaluate_retrieval(
    dataset: BeirDataset,
    retrievers: Mapping[str, RetrieverLike],
    k_values: Sequence[int] = DEFAULT_K_VALUES,
    progress: bool = True,
    *,
    concurrency: int = 8,
) -> EvalReport:
    """Run each retriever on every query of ``dataset``, ``max(k_values)`` documents per query,
    and score the runs with nDCG, Recall and MRR at each k.

    Runs its own event loop; from async code (a notebook cell, a server) await
    `aevaluate_retrieval` instead.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise RuntimeError("evaluate_retrieval() inside an event loop: await aevaluate_retrieval()")
    return asyncio.run(
        aevaluate_retrieval(
            dataset, retrievers, k_values, progress=progress, concurrency=concurrency
        )
    )


# --- retrievers by name (for the command line) ---------------------------------------------------
@dataclass
class EvalContext:
    """What retriever factories may use: settings, the cache, the embedder, cleanup."""

    settings: Settings
    cache_dir: Path
    stack: ExitStack
    progress: bool = True
    chunk_size: int | None = None
    chunk_overlap: int | None = None
    embed_model: BaseEmbedding | None = None
    embedder_name: str | None = None
    notes: list[str] = field(default_factory=list)
    """Lines for people (e.g. how an index was obtained), printed by the command."""
    index: DenseIndex | None = None
    """The corpus index, once opened: every retriever of the evaluation shares it."""

    def embedder(self) -> tuple[BaseEmbedding, str]:
        """The embedder (built from the settings on first use) and its name."""
        if self.embed_model is None:
            from citeflow.providers.embeddings import build_embed_model

            self.embed_model = build_embed_model(self.settings)
        return self.embed_model, self.embedder_label()

    def embedder_label(self) -> str:
        """The embedder's name (the settings' unless one was given), without loading it."""
        if self.embedder_name is None:
            from citeflow.providers.embeddings import describe_embeddings

            self.embedder_name = describe_embeddings(self.settings)
        return self.embedder_name

    def chunking(self) -> tuple[int, int]:
        """The chunk size and overlap: the options', else the settings'."""
        size = self.chunk_size or self.settings.chunking.size
        overlap = self.chunk_overlap
        return size, self.settings.chunking.overlap if overlap is None else overlap


#: builds a retriever for a dataset; registers its cleanup on ``context.stack``
RetrieverFactory = Callable[[BeirDataset, EvalContext], RetrieverLike]


def index_key_of(dataset: BeirDataset, context: EvalContext) -> str:
    """The corpus index's cache key, computed without opening it or loading the embedder."""
    from citeflow.evaluation.dense import index_key

    size, overlap = context.chunking()
    name = context.embedder_label()
    key, _ = index_key(dataset, embedder=name, chunk_size=size, chunk_overlap=overlap)
    return key


def corpus_index(dataset: BeirDataset, context: EvalContext) -> DenseIndex:
    """The cached index of the dataset's corpus, opened once per evaluation."""
    from citeflow.evaluation.dense import DenseIndex

    if context.index is not None:
        return context.index
    embed_model, name = context.embedder()
    index = context.index = DenseIndex.open(
        dataset,
        embed_model=embed_model,
        embedder=name,
        cache_dir=context.cache_dir,
        settings=context.settings,
        chunk_size=context.chunk_size,
        chunk_overlap=context.chunk_overlap,
        progress=context.progress,
    )
    context.stack.callback(index.close)
    info = index.info
    how = (
        "reused"
        if info.reused
        else f"built ({info.embedded_chunks} chunks embedded"
        + (f", {info.resumed_documents} documents resumed" if info.resumed_documents else "")
        + ")"
    )
    context.notes.append(
        f"corpus index ({info.embedder}, chunks {info.chunk_size}/{info.chunk_overlap}, "
        f"dense + BM25): {info.documents} documents, {info.chunks} chunks, {how} in "
        f"{info.seconds:.1f} s at {info.directory}"
    )
    return index


def build_citeflow(
    dataset: BeirDataset, context: EvalContext, mode: RetrievalMode = "dense"
) -> RetrieverLike:
    """citeflow's own retrieval over the corpus index, searching ``mode``'s side(s)."""
    return corpus_index(dataset, context).retriever(mode=mode)


#: retriever name → factory: dense (the embedder's cosine similarity), bm25 (BM25 sparse vectors
#: with Qdrant's IDF), hybrid (both fused as the settings say: citeflow's default search)
RETRIEVERS: dict[str, RetrieverFactory] = {
    "dense": partial(build_citeflow, mode="dense"),
    "bm25": partial(build_citeflow, mode="keyword"),
    "hybrid": partial(build_citeflow, mode="hybrid"),
}
