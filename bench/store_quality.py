"""What the embedded store's HNSW index costs in retrieval quality, measured where it is used.

`citeflow eval` cannot show it: qdrant-edge scans a segment exactly while it holds less than
``full_scan_threshold`` KB of vectors (10,000 KB, about 6,600 384-d chunks) and indexes none under
the optimizer's indexing threshold, so SciFact (5,596 chunks) and HotpotQA (2,493) are searched
exactly, and only larger stores (100k+ chunks) meet the graph. So, per dataset:

1. the eval's cached corpus index is opened as `citeflow eval` opens it (`corpus_index`: same
   settings, embedder, chunking and cache; built or finished first if needed): the ``exact`` row;
2. its points are copied (`Store.copy`, nothing re-embedded) into temporary stores whose shards
   index every segment (HNSW and indexing thresholds of `FORCE_KB`, far below the corpus) with
   m/ef_construct 16/100 (citeflow's `HNSW`), 16/200 and 32/200; `Store.optimize` builds the
   graph (timed), and the shard's info must show every dense vector indexed;
3. each store is searched with the engine's ef (None: ef_construct) and with ``hnsw_ef`` 128 and
   256 (`EdgeEngine`'s ``search_params``) by the eval's own dense, BM25 and hybrid retrievers
   (`DenseIndex.retriever`, `aevaluate_retrieval`: same queries, same metrics).

The query embeddings are computed once per dataset and reused by every row, so rows differ by
the store alone. The tables print, per row:

    build s       `Store.optimize` of the copy (the HNSW build; holds the GIL)
    nDCG@10       dense, BM25 and hybrid as `citeflow eval` runs them (100 documents per query:
                  the dense side fetches 200 chunks); Δ: against the exact row
    R@100         Recall@100 of the same runs
    app nDCG@10   dense and hybrid asked for 10 documents, as the app searches: dense 20 chunks,
                  hybrid 100 per side. The engine searches with an ef of max(ef, limit), so the
                  eval's 200-chunk searches use ef >= 200 whatever the setting: only these
                  columns and the id recalls see the ef of the app's searches
    id R@10       the dense top 10 chunk ids against the exact row's (limit 10), mean per query
    id R@100      the same for the top 100 (limit 100, the hybrid side's candidates)
    rnd R@10      id R@10 for 200 random unit queries (seeded): far from the data the graph is
                  at its weakest, so a value below 1 shows the search really walks the graph
    ms            mean wall time of one dense search (limit 10), one thread, Python included
    unindexed     dense vectors not in an HNSW graph (`Store.unindexed`): the corpus for exact

BM25 is a control: the keyword side has no graph, so it must not move.

    .venv/bin/python bench/store_quality.py [DATASET ...] [--cache-dir DIR]

Opens the eval cache (default ``~/.cache/citeflow/eval``) like `citeflow eval`, so nothing else
may have the same dataset's index open meanwhile; the copies go to a temporary directory.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from contextlib import ExitStack, closing
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from pydantic import PrivateAttr
from qdrant_edge import EdgeConfig, EdgeOptimizersConfig, EdgeShard, HnswIndexConfig, SearchParams

from citeflow.evaluation.dataset import BeirDataset, load_beir
from citeflow.evaluation.dense import COLLECTION, DenseIndex, default_cache_dir
from citeflow.evaluation.runner import EvalContext, aevaluate_retrieval, corpus_index
from citeflow.evaluation.table import text_table
from citeflow.knowledge_base import KnowledgeBase
from citeflow.settings import RetrievalMode, load_settings
from citeflow.store import Store
from citeflow.store.edge import EdgeEngine
from citeflow.store.edge_config import HNSW, ShardConfig, shard_config

DATASETS = ("/work/shared/data/scifact", "/work/shared/data/hotpotqa")
#: HNSW full-scan and optimizer indexing thresholds of the forced stores, in KB: about 66 384-d
#: vectors, so every segment is indexed and searched through its graph (with the search filter,
#: whose matches are nearly all points, too), while no document's chunks are numerous enough to
#: get payload sub-graphs, as in a large store under the default threshold
FORCE_KB = 100
#: (m, ef_construct) of the forced stores; the first is citeflow's
GRAPHS = ((HNSW.m, HNSW.ef_construct), (16, 200), (32, 200))
#: search-time ef: None is the engine's (ef_construct)
EFS = (None, 128, 256)
RANDOM_QUERIES = 200
#: tolerance of issue 18: nDCG@10 within this of the exact search
TOLERANCE = 0.005


class CachedQueries(BaseEmbedding):
    """An embedder whose query embeddings are kept: every row searches with the same vectors,
    computed once."""

    _inner: BaseEmbedding = PrivateAttr()
    _queries: dict[str, list[float]] = PrivateAttr(default_factory=dict)

    def __init__(self, inner: BaseEmbedding) -> None:
        super().__init__(model_name=inner.model_name)
        self._inner = inner

    def _get_query_embedding(self, query: str) -> list[float]:
        found = self._queries.get(query)
        if found is None:
            found = self._queries[query] = self._inner.get_query_embedding(query)
        return found

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._get_query_embedding(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._inner.get_text_embedding(text)


def forced(m: int, ef_construct: int) -> ShardConfig:
    """citeflow's shard layout with a graph of (m, ef_construct) over every segment."""

    def config(dimension: int) -> EdgeConfig:
        base = shard_config(dimension)
        return EdgeConfig(
            vectors=base.vectors,
            sparse_vectors=base.sparse_vectors,
            hnsw_config=HnswIndexConfig(
                m=m, ef_construct=ef_construct, full_scan_threshold=FORCE_KB
            ),
            optimizers=EdgeOptimizersConfig(indexing_threshold=FORCE_KB),
        )

    return config


@dataclass
class Row:
    """One store searched one way."""

    name: str
    ndcg: dict[str, float] = field(default_factory=dict)
    """retriever → nDCG@10 as `citeflow eval` runs it"""
    recall: dict[str, float] = field(default_factory=dict)
    """retriever → Recall@100"""
    app: dict[str, float] = field(default_factory=dict)
    """retriever → nDCG@10 of a 10-document run"""
    ids10: list[list[str]] = field(default_factory=list)
    """the dense top 10 ids of each query (the id recalls compare them with the exact row's)"""
    ids100: list[list[str]] = field(default_factory=list)
    random10: list[list[str]] = field(default_factory=list)
    ms: float = 0.0
    unindexed: int = 0
    build: float | None = None
    graph: tuple[int, int] | None = None
    ef: int | None = None


@dataclass
class Probe:
    """The dense searches behind the id recalls."""

    queries: list[list[float]]
    randoms: list[list[float]]


def top_ids(
    store: Store, vectors: Sequence[list[float]], limit: int
) -> tuple[list[list[str]], float]:
    """The dense top ``limit`` ids of each vector, and the mean ms per search."""
    found = []
    started = time.perf_counter()
    for vector in vectors:
        found.append([c.id for c in store.search(COLLECTION, dense=vector, limit=limit).dense])
    return found, 1000 * (time.perf_counter() - started) / max(1, len(vectors))


def overlap(found: Sequence[list[str]], exact: Sequence[list[str]]) -> float:
    shares = [len(set(f) & set(e)) / len(e) for f, e in zip(found, exact, strict=True) if e]
    return float(np.mean(shares)) if shares else 1.0


async def measure(
    row: Row,
    dataset: BeirDataset,
    store: Store,
    embed: CachedQueries,
    index: DenseIndex,
    probe: Probe,
) -> Row:
    """Run the eval's retrievers and the id probes on ``store``; fill ``row``."""
    kb = KnowledgeBase(index.kb.settings, store=store, embed_model=embed, collection=COLLECTION)
    view = DenseIndex(kb, index.info)
    modes: dict[str, RetrievalMode] = {"dense": "dense", "bm25": "keyword", "hybrid": "hybrid"}
    full = {name: view.retriever(mode=mode) for name, mode in modes.items()}
    report = await aevaluate_retrieval(dataset, full, (10, 100), progress=False)
    for name, result in report.retrieval.items():
        row.ndcg[name] = result.metrics["nDCG@10"]
        row.recall[name] = result.metrics["Recall@100"]
    narrow = {name: view.retriever(mode=modes[name]) for name in ("dense", "hybrid")}
    report = await aevaluate_retrieval(dataset, narrow, (10,), progress=False)
    for name, result in report.retrieval.items():
        row.app[name] = result.metrics["nDCG@10"]
    row.ids10, row.ms = top_ids(store, probe.queries, 10)
    row.ids100, _ = top_ids(store, probe.queries, 100)
    row.random10, _ = top_ids(store, probe.randoms, 10)
    row.unindexed = store.unindexed(COLLECTION)
    return row


def build(source: Store, root: Path, graph: tuple[int, int]) -> tuple[float, str]:
    """Copy the corpus into a forced-HNSW store at ``root`` and index it; the seconds of the
    build and what the shard says of itself."""
    root.mkdir(parents=True)
    engine = EdgeEngine(root, config=forced(*graph))
    with closing(Store(engine)) as store:
        source.copy(COLLECTION, store, COLLECTION, None)
        started = time.perf_counter()
        store.optimize(COLLECTION)
        seconds = time.perf_counter() - started
    with closing(EdgeShard.load(str(engine.shards_dir / COLLECTION))) as shard:
        info = shard.info()
    facts = (
        f"{info.points_count} points, {info.segments_count} segments, "
        f"{info.indexed_vectors_count} vectors indexed (dense + BM25)"
    )
    if info.indexed_vectors_count < 2 * info.points_count:
        raise RuntimeError(f"m={graph[0]}, ef_construct={graph[1]}: not all indexed: {facts}")
    return seconds, facts


def label(row: Row) -> str:
    if row.graph is None:
        return row.name
    m, efc = row.graph
    ef = f"ef {row.ef}" if row.ef is not None else f"ef ({efc})"
    return f"m{m}/efc{efc} {ef}"


#: (heading, cell of a row given the exact row) of the first table: as `citeflow eval` runs it
EVAL_COLUMNS: list[tuple[str, Callable[[Row, Row], str]]] = [
    ("store, search", lambda r, _: label(r)),
    ("build s", lambda r, _: f"{r.build:.1f}" if r.build is not None else "-"),
    ("dense nDCG@10", lambda r, _: f"{r.ndcg['dense']:.4f}"),
    ("Δ", lambda r, base: f"{r.ndcg['dense'] - base.ndcg['dense']:+.4f}"),
    ("hybrid nDCG@10", lambda r, _: f"{r.ndcg['hybrid']:.4f}"),
    ("Δ", lambda r, base: f"{r.ndcg['hybrid'] - base.ndcg['hybrid']:+.4f}"),
    ("bm25 nDCG@10", lambda r, _: f"{r.ndcg['bm25']:.4f}"),
    ("dense R@100", lambda r, _: f"{r.recall['dense']:.4f}"),
    ("hybrid R@100", lambda r, _: f"{r.recall['hybrid']:.4f}"),
    ("id R@10", lambda r, base: f"{overlap(r.ids10, base.ids10):.4f}"),
]
#: the second table's: at the app's search width, and the engine
APP_COLUMNS: list[tuple[str, Callable[[Row, Row], str]]] = [
    ("store, search", lambda r, _: label(r)),
    ("app dense nDCG@10", lambda r, _: f"{r.app['dense']:.4f}"),
    ("Δ", lambda r, base: f"{r.app['dense'] - base.app['dense']:+.4f}"),
    ("app hybrid nDCG@10", lambda r, _: f"{r.app['hybrid']:.4f}"),
    ("Δ", lambda r, base: f"{r.app['hybrid'] - base.app['hybrid']:+.4f}"),
    ("id R@100", lambda r, base: f"{overlap(r.ids100, base.ids100):.4f}"),
    ("rnd R@10", lambda r, base: f"{overlap(r.random10, base.random10):.4f}"),
    ("ms", lambda r, _: f"{r.ms:.2f}"),
    ("unindexed", lambda r, _: str(r.unindexed)),
]


def tables(name: str, rows: list[Row]) -> str:
    def table(title: str, columns: list[tuple[str, Callable[[Row, Row], str]]]) -> str:
        cells = [[cell(r, rows[0]) for _, cell in columns] for r in rows]
        return text_table(title, [heading for heading, _ in columns], cells)

    first = table(f"{name}: as citeflow eval runs it (Δ against exact)", EVAL_COLUMNS)
    second = table(f"{name}: at the app's search width (10 documents), and the engine", APP_COLUMNS)
    return f"{first}\n{second}"


def verdict(name: str, rows: list[Row]) -> list[str]:
    """Per graph at the engine's ef: the largest nDCG@10 change, and whether it is within
    `TOLERANCE`."""
    base = rows[0]
    lines = []
    for r in rows[1:]:
        if r.ef is not None:
            continue
        worst = max(abs(r.ndcg[k] - base.ndcg[k]) for k in ("dense", "hybrid", "bm25"))
        worst_app = max(abs(r.app[k] - base.app[k]) for k in ("dense", "hybrid"))
        ok = "within" if max(worst, worst_app) <= TOLERANCE else "NOT within"
        lines.append(
            f"{name} {label(r)}: largest |Δ nDCG@10| {worst:.4f} (eval), {worst_app:.4f} (app "
            f"width): {ok} {TOLERANCE}"
        )
    return lines


async def run_dataset(path: Path, args: argparse.Namespace, stack: ExitStack) -> list[str]:
    settings = load_settings()
    dataset = load_beir(path, split="test")
    context = EvalContext(settings=settings, cache_dir=args.cache_dir, stack=stack, progress=False)
    index = corpus_index(dataset, context)
    for note in context.notes:
        say(note)
    assert context.embed_model is not None
    embed = CachedQueries(context.embed_model)
    queries = [embed.get_query_embedding(text) for text in dataset.queries.values()]
    rng = np.random.default_rng(18)
    randoms = rng.standard_normal((RANDOM_QUERIES, len(queries[0]))).astype(np.float32)
    randoms /= np.linalg.norm(randoms, axis=1, keepdims=True)
    probe = Probe(queries=queries, randoms=[list(map(float, v)) for v in randoms])

    source = index.kb.store
    rows = [await measure(Row("exact"), dataset, source, embed, index, probe)]
    say(f"{dataset.name}: exact done")
    scratch = Path(tempfile.mkdtemp(prefix="store_quality-", dir=args.scratch))
    try:
        for graph in GRAPHS:
            root = scratch / f"m{graph[0]}-efc{graph[1]}"
            seconds, facts = build(source, root, graph)
            say(f"{dataset.name} m{graph[0]}/efc{graph[1]}: built in {seconds:.1f} s: {facts}")
            for ef in EFS:
                params = SearchParams(hnsw_ef=ef) if ef is not None else None
                row = Row("hnsw", build=seconds, graph=graph, ef=ef)
                with closing(Store(EdgeEngine(root, search_params=params))) as store:
                    rows.append(await measure(row, dataset, store, embed, index, probe))
                say(f"{dataset.name} {label(row)} done")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    info = index.info
    title = (
        f"{dataset.name}/test: {len(dataset.queries)} queries, {info.chunks} chunks "
        f"({info.embedder}, {info.chunk_size}/{info.chunk_overlap}); forced stores: HNSW over "
        f"every segment (thresholds {FORCE_KB} KB)"
    )
    print(title)
    print(tables(dataset.name, rows))
    print()
    sys.stdout.flush()
    return verdict(dataset.name, rows)


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


async def run(args: argparse.Namespace) -> None:
    started = time.perf_counter()
    lines: list[str] = []
    for path in args.datasets:
        with ExitStack() as stack:
            lines += await run_dataset(Path(path), args, stack)
    print("\n".join(lines))
    print(f"total {time.perf_counter() - started:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("datasets", nargs="*", default=list(DATASETS), help="BEIR folders")
    parser.add_argument("--cache-dir", type=Path, default=default_cache_dir())
    parser.add_argument(
        "--scratch", type=Path, default=None, help="where the copies go (default: the temp dir)"
    )
    args = parser.parse_args()
    warnings.filterwarnings("ignore", message="Payload indexes have no effect")
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
