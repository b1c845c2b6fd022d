"""How citeflow configures new qdrant-edge shards, and how their dense side is searched."""

from __future__ import annotations

from collections.abc import Callable

from qdrant_edge import (
    Distance,
    EdgeConfig,
    EdgeSparseVectorParams,
    EdgeVectorParams,
    HnswIndexConfig,
    Modifier,
    SearchParams,
)

from citeflow.store.engine import DENSE_VECTOR, SPARSE_VECTOR

__all__ = ["HNSW", "SEARCH", "ShardConfig", "shard_config"]

#: HNSW graph parameters (Qdrant's defaults): m=16, ef_construct=100 kept SciFact and HotpotQA
#: nDCG@10 within 0.005 of an exact search (``bench/store_scale.py`` prints dense recall@10).
#: Segments under ``full_scan_threshold`` KB of vectors (about 6,600 384-d chunks) are scanned.
HNSW = HnswIndexConfig(m=16, ef_construct=100, full_scan_threshold=10_000)
#: The dense side searches the graph with an ef of 256 (the engine's own would be ef_construct,
#: 100). Measured on 1,000,000 synthetic chunks (`bench/store_scale.py`): recall@10 against an
#: exact search 0.849 -> 0.934, hybrid p50 8.4 -> 9.2 ms; with the graph forced on SciFact and
#: HotpotQA (`bench/store_quality.py`) nDCG@10 at the app's width -0.0017 / -0.0008 -> 0.0000.
SEARCH = SearchParams(hnsw_ef=256)

#: the configuration of a new shard, made from its dense vectors' dimension
ShardConfig = Callable[[int], EdgeConfig]


def shard_config(dimension: int) -> EdgeConfig:
    """citeflow's shard layout: cosine dense vectors, BM25 sparse vectors with IDF, `HNSW`."""
    return EdgeConfig(
        vectors={DENSE_VECTOR: EdgeVectorParams(size=dimension, distance=Distance.Cosine)},
        sparse_vectors={SPARSE_VECTOR: EdgeSparseVectorParams(modifier=Modifier.Idf)},
        hnsw_config=HNSW,
    )
