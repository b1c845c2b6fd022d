"""The embedded engine: Qdrant's own engine in-process (qdrant-edge), one shard per collection.

Each collection is an `EdgeShard` in ``<store>/shards/<name>/`` (see `citeflow.store.directory`
for the rest of the directory): a write-ahead log, so that every acknowledged write survives a
crash, segments with HNSW indexes for the dense vectors, sparse indexes with the IDF modifier
for BM25, and keyword/bool payload indexes on ``doc_id`` and `INCOMPLETE`. Opening reads segment
headers and memory-maps the rest: no point is loaded into Python.

**Indexing is deferred.** qdrant-edge has no background optimizer: new points are searched by an
exact scan until `optimize` builds the HNSW index, and ``optimize()`` holds the GIL for its whole
run (seconds at 10,000 chunks, about a minute at 100,000; see ``bench/store_scale.py``), stalling
every other thread of the process, the server's event loop included. So nothing on a request
path calls it: ``citeflow ingest`` and ``citeflow migrate`` optimize at their end, and
``citeflow optimize`` does it for a store fed through the server's API (with the server stopped).

Scores keep their meaning: the dense side is cosine similarity (vectors stored normalised), the
keyword side BM25 (the IDF modifier times citeflow's stored term weights), as on a Qdrant server.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import qdrant_edge
from qdrant_edge import (
    CountRequest,
    EdgeShard,
    Filter,
    IdfParams,
    IsEmptyCondition,
    PayloadSchemaType,
    Query,
    QueryBatchRequest,
    QueryRequest,
    ScrollRequest,
    SearchParams,
    UpdateOperation,
)
from qdrant_edge import Point as EdgePoint
from qdrant_edge import SparseVector as EdgeSparse

from citeflow.store.directory import SHARDS, require_room
from citeflow.store.edge_config import SEARCH, ShardConfig, shard_config
from citeflow.store.edge_failures import load_shard, reading
from citeflow.store.engine import (
    DENSE_VECTOR,
    INCOMPLETE,
    SPARSE_VECTOR,
    Hits,
    Layout,
    Point,
    Record,
    SearchRequest,
    Vector,
    Where,
    hits_of,
    payload_filter,
    record_of,
)

LAYOUT = Layout(dense=DENSE_VECTOR, sparse=SPARSE_VECTOR)

#: BM25's IDF over the points that exist. The engine's own statistics count a deleted or
#: overwritten chunk of an indexed segment until an optimize vacuums it (BM25 scores were off
#: by up to 26% and the order changed after a re-ingest); a corpus filter matching every point
#: counts live points only, as qdrant-client does (`tests/test_store_parity.py`). It costs a
#: pass over the points per query (sparse search 0.7 -> 2.8 ms at 100,000 chunks, about 20 ms
#: at 1,000,000: `bench/store_scale.py`), so it is asked for only while a collection may hold
#: such chunks (`STALE_IDF`).
LIVE_IDF = SearchParams(idf=IdfParams(corpus=Filter()))
#: a file in a shard's directory while deleted or overwritten chunks may linger in its indexed
#: segments (written at the first such change, removed by an optimize that leaves none)
STALE_IDF = "citeflow-stale-idf"

#: chunks without the `INCOMPLETE` mark ("has the key": qdrant-edge 0.9.0 turns
#: MatchValue(value=True) into the integer 1, which matches no stored ``true``; the mark is only
#: ever True, or absent)
_UNMARKED = IsEmptyCondition(key=INCOMPLETE)


def edge_filter(where: Where | None) -> Filter | None:
    filter_: Filter | None = payload_filter(
        where, qdrant_edge, _UNMARKED, holds_on_incomplete=False
    )
    return filter_


def dense_for_edge(vector: Vector) -> Any:
    """A dense vector as qdrant-edge takes it: a list of floats or a float32 array, as is (a
    copy per element cost a fifth of an upsert's time)."""
    if isinstance(vector, np.ndarray):
        return vector.astype(np.float32, copy=False)
    return vector if isinstance(vector, list) else list(vector)


class EdgeEngine:
    """`Store`'s engine over qdrant-edge shards in ``<root>/shards/`` (the operations:
    `citeflow.store.engine`).

    Shards are opened when first used and stay open until `close`.

    ``config`` makes the configuration of each shard this engine creates (`shard_config`; a
    shard keeps the configuration it was created with); ``search_params`` are the dense side's
    search parameters (`SEARCH`; None: the engine's, an HNSW ef of ef_construct, or the limit
    when that is larger). citeflow keeps both defaults; ``bench/store_quality.py`` creates
    shards whose every segment is HNSW-indexed and searches them with other ef values, to
    measure what the approximate index costs in retrieval quality.
    """

    def __init__(
        self,
        root: Path,
        *,
        config: ShardConfig = shard_config,
        search_params: SearchParams | None = SEARCH,
    ) -> None:
        self.root = root
        self.location = str(root)
        self.config = config
        self.search_params = search_params
        self._shards: dict[str, EdgeShard] = {}
        self._stale: set[str] = set()  # collections whose BM25 needs `LIVE_IDF`

    @property
    def shards_dir(self) -> Path:
        return self.root / SHARDS

    def _path(self, collection: str) -> Path:
        return self.shards_dir / collection

    def _shard(self, collection: str) -> EdgeShard:
        shard = self._shards.get(collection)
        if shard is None:
            path = self._path(collection)
            require_room(self.root)
            shard = load_shard(path)
            self._shards[collection] = shard
            if (path / STALE_IDF).exists():
                self._stale.add(collection)
        return shard

    def _changed(self, collection: str) -> None:
        """Deleted or overwritten chunks may now linger in indexed segments (`STALE_IDF`)."""
        if collection not in self._stale:
            (self._path(collection) / STALE_IDF).touch()
            self._stale.add(collection)

    def close(self) -> None:
        shards, self._shards = self._shards, {}
        for shard in shards.values():
            shard.close()

    # --- collections -------------------------------------------------------------------------
    def collections(self) -> list[str]:
        if not self.shards_dir.is_dir():
            return []
        return sorted(
            p.name for p in self.shards_dir.iterdir() if p.is_dir() and not p.name.startswith(".")
        )

    def exists(self, collection: str) -> bool:
        return collection in self._shards or self._path(collection).is_dir()

    def create(self, collection: str, dimension: int) -> None:
        """Create the collection's shard with citeflow's layout and payload indexes."""
        path = self._path(collection)
        require_room(self.root)
        path.parent.mkdir(parents=True, exist_ok=True)
        shard = EdgeShard.create(str(path), self.config(dimension))
        try:
            shard.update(UpdateOperation.create_field_index("doc_id", PayloadSchemaType.Keyword))
            shard.update(UpdateOperation.create_field_index(INCOMPLETE, PayloadSchemaType.Bool))
        finally:
            shard.close()
        self._shards[collection] = load_shard(path)

    def layout(self, collection: str) -> Layout:
        return LAYOUT

    def _forget(self, collection: str) -> None:
        """Close the collection's shard, if open, and forget its state (before its directory
        moves or goes)."""
        self._stale.discard(collection)
        shard = self._shards.pop(collection, None)
        if shard is not None:
            shard.close()

    def drop(self, collection: str) -> bool:
        self._forget(collection)
        path = self._path(collection)
        if not path.is_dir():
            return False
        # renamed first, so that a crash mid-delete leaves no half shard under the name
        doomed = path.with_name(f".{collection}.deleting")
        shutil.rmtree(doomed, ignore_errors=True)
        path.rename(doomed)
        shutil.rmtree(doomed, ignore_errors=True)
        return True

    def rename(self, collection: str, name: str) -> None:
        """Give a (complete) collection its final name: one directory rename."""
        self._forget(collection)  # its `STALE_IDF` flag file moves with it
        self._path(collection).rename(self._path(name))

    def count(self, collection: str) -> int:
        with reading(self._path(collection)):
            return self._shard(collection).count(CountRequest(exact=True))

    # --- writes ------------------------------------------------------------------------------
    def upsert(self, collection: str, points: Sequence[Point]) -> None:
        shard = self._shard(collection)
        require_room(self.root, len(points))
        edge_points = []
        for point in points:
            vectors: dict[str, Any] = {DENSE_VECTOR: dense_for_edge(point.dense)}
            if point.sparse is not None and point.sparse.indices:
                vectors[SPARSE_VECTOR] = EdgeSparse(
                    indices=point.sparse.indices, values=point.sparse.values
                )
            edge_points.append(EdgePoint(point.id, vectors, point.payload))
        watch = collection not in self._stale  # once stale, no need to count
        with reading(self._path(collection)):
            before = shard.info().points_count if watch else 0
            shard.update(UpdateOperation.upsert_points(edge_points))
            if watch and shard.info().points_count - before < len({p.id for p in points}):
                self._changed(collection)

    def delete_key(self, collection: str, ids: Sequence[str], key: str) -> None:
        shard = self._shard(collection)
        require_room(self.root, len(ids))
        with reading(self._path(collection)):
            # a point of an indexed segment is copied out of it to be changed (once stale, no
            # need to look)
            indexed = collection not in self._stale and shard.info().indexed_vectors_count > 0
            shard.update(UpdateOperation.delete_payload(list(ids), [key]))
        if indexed:
            self._changed(collection)

    def delete(self, collection: str, where: Where) -> None:
        shard = self._shard(collection)
        require_room(self.root)
        flt = edge_filter(where)
        if flt is None:
            raise ValueError("refusing to delete without a condition")
        with reading(self._path(collection)):
            shard.update(UpdateOperation.delete_points_by_filter(flt))
        self._changed(collection)

    # --- reads -------------------------------------------------------------------------------
    def scroll(
        self,
        collection: str,
        where: Where | None,
        keys: Sequence[str] | bool,
        *,
        vectors: bool = False,
        page: int = 1024,
    ) -> Iterator[Record]:
        shard = self._shard(collection)
        payload: Any = keys if isinstance(keys, bool) else list(keys)
        flt = edge_filter(where)
        offset: Any = None
        while True:
            with reading(self._path(collection)):
                records, offset = shard.scroll(
                    ScrollRequest(
                        offset=offset,
                        limit=page,
                        filter=flt,
                        with_payload=payload,
                        with_vector=vectors,
                    )
                )
            for record in records:
                yield record_of(record.id, record.payload, record.vector if vectors else None)
            if offset is None:
                return

    def retrieve(
        self, collection: str, ids: Sequence[str], *, payload: bool, dense: bool
    ) -> list[Record]:
        with reading(self._path(collection)):
            found = self._shard(collection).retrieve(
                list(ids), with_payload=payload, with_vector=[DENSE_VECTOR] if dense else False
            )
        return [record_of(r.id, r.payload, r.vector if dense else None) for r in found]

    def search(self, collection: str, request: SearchRequest) -> Hits:
        """Both sides in one planned batch (``query_batch``); fusion stays citeflow's own
        (`citeflow.query.fusion`: the engine's RRF and DBSF are not its relative fusion)."""
        shard = self._shard(collection)
        flt = edge_filter(request.where)
        queries: list[QueryRequest] = []
        if request.dense is not None:
            queries.append(
                QueryRequest(
                    limit=request.limit,
                    query=Query.Nearest(dense_for_edge(request.dense), using=DENSE_VECTOR),
                    filter=flt,
                    params=self.search_params,
                    with_payload=False,
                )
            )
        sparse = request.sparse
        use_sparse = sparse is not None and bool(sparse.indices)
        if use_sparse:
            assert sparse is not None
            queries.append(
                QueryRequest(
                    limit=request.sparse_limit,
                    query=Query.Nearest(
                        EdgeSparse(indices=sparse.indices, values=sparse.values),
                        using=SPARSE_VECTOR,
                    ),
                    filter=flt,
                    params=LIVE_IDF if collection in self._stale else None,
                    with_payload=False,
                    with_vector=[DENSE_VECTOR] if request.sparse_vectors else False,
                )
            )
        if not queries:
            return Hits(dense=[], sparse=[])
        with reading(self._path(collection)):
            results = shard.query_batch(QueryBatchRequest(queries))
        return hits_of(request, results, use_sparse, DENSE_VECTOR)

    def optimize(self, collection: str) -> bool:
        """Build the HNSW index of what was written since the last optimize (holds the GIL)."""
        shard = self._shard(collection)
        size = sum(f.stat().st_size for f in self._path(collection).rglob("*") if f.is_file())
        require_room(self.root, extra_bytes=size)  # the new segment is written beside the old
        with reading(self._path(collection)):
            done = shard.optimize()
            shard.flush()
            info = shard.info()
        if collection in self._stale and info.indexed_vectors_count == 2 * info.points_count:
            # everything indexed, and no deleted chunk left in a segment: the engine's IDF holds
            (self._path(collection) / STALE_IDF).unlink(missing_ok=True)
            self._stale.discard(collection)
        return done

    def unindexed(self, collection: str) -> int:
        """An estimate: each point has two vectors (dense and BM25), and the BM25 side is
        indexed as it is written, so the shortfall is the dense vectors awaiting HNSW."""
        with reading(self._path(collection)):
            info = self._shard(collection).info()
        return max(0, 2 * info.points_count - info.indexed_vectors_count)
