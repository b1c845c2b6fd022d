"""`EdgeEngine`'s ``config`` and ``search_params`` reach the engine: a shard configured to index
every segment searches through its HNSW graph, and the search's ef is the one asked for (the
seam ``bench/store_quality.py`` measures the graph's cost in retrieval quality through)."""

from __future__ import annotations

from contextlib import closing
from pathlib import Path

import numpy as np
from qdrant_edge import EdgeConfig, EdgeOptimizersConfig, HnswIndexConfig, SearchParams

from citeflow.store import Store
from citeflow.store.edge import EdgeEngine
from citeflow.store.edge_config import shard_config
from tests.store_helpers import DIM, fill

N = 2000


def indexed_everywhere(dimension: int) -> EdgeConfig:
    base = shard_config(dimension)
    return EdgeConfig(
        vectors=base.vectors,
        sparse_vectors=base.sparse_vectors,
        hnsw_config=HnswIndexConfig(m=4, ef_construct=8, full_scan_threshold=10),
        optimizers=EdgeOptimizersConfig(indexing_threshold=10),
    )


def top10(store: Store, queries: np.ndarray) -> list[set[str]]:
    return [{c.id for c in store.search("kb", dense=q.tolist(), limit=10).dense} for q in queries]


def test_config_and_search_params_reach_the_engine(tmp_path: Path) -> None:
    queries = np.random.default_rng(0).standard_normal((50, DIM)).astype(np.float32)
    for name in ("default", "forced"):
        (tmp_path / name).mkdir()

    default = Store(EdgeEngine(tmp_path / "default"))
    forced = Store(EdgeEngine(tmp_path / "forced", config=indexed_everywhere))
    for store in (default, forced):
        fill(store, "kb", N)  # random vectors
        store.optimize("kb")
    assert default.unindexed("kb") == N  # small: scanned, as citeflow's default config says
    assert forced.unindexed("kb") == 0
    exact = top10(default, queries)
    default.close()
    forced.close()

    def recall(params: SearchParams | None) -> float:
        with closing(Store(EdgeEngine(tmp_path / "forced", search_params=params))) as store:
            found = top10(store, queries)
        return float(np.mean([len(f & e) / 10 for f, e in zip(found, exact, strict=True)]))

    assert recall(SearchParams(exact=True)) == 1.0
    graph = recall(None)  # a tiny graph on random vectors misses neighbours
    assert graph < 1.0
    assert recall(SearchParams(hnsw_ef=500)) > graph
