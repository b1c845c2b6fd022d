"""qdrant-client behind `Store`: a Qdrant server or cluster by URL, or its ``:memory:`` mode.

Collections keep LlamaIndex's hybrid layout (see `citeflow.store.engine`), so a notebook can also
open one with ``QdrantVectorStore``. Collections written before the keyword side existed (one
unnamed dense vector) still work, dense only. On a server, ``doc_id`` and `INCOMPLETE` get
payload indexes, so deletes, listings and the searches' filter stay fast at any size.

Also the reader of stores written by qdrant-client's local mode (a directory), which earlier
versions of citeflow used as their embedded store: `citeflow.store.migration` copies them into
the embedded engine.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from qdrant_client import QdrantClient
from qdrant_client.http import models as rest

from citeflow.store.engine import (
    DENSE_VECTOR,
    INCOMPLETE,
    SPARSE_VECTOR,
    Hits,
    Layout,
    Point,
    Record,
    SearchRequest,
    Where,
    hits_of,
    payload_filter,
    record_of,
)


class ClientEngine:
    """`Store`'s engine over a `QdrantClient` (the operations: `citeflow.store.engine`)."""

    def __init__(self, client: QdrantClient, *, location: str) -> None:
        self.client = client
        self.location = location
        self._layouts: dict[str, Layout] = {}

    @classmethod
    def connect(cls, url: str, api_key: str | None) -> ClientEngine:
        """A Qdrant server or cluster."""
        return cls(QdrantClient(url=url, api_key=api_key, timeout=30), location=url)

    @classmethod
    def in_memory(cls) -> ClientEngine:
        """qdrant-client's ``:memory:`` mode (nothing kept; tests and experiments)."""
        return cls(QdrantClient(location=":memory:"), location=":memory:")

    @property
    def remote(self) -> bool:
        return self.location.startswith(("http://", "https://"))

    def close(self) -> None:
        self.client.close()

    # --- collections -------------------------------------------------------------------------
    def collections(self) -> list[str]:
        return sorted(c.name for c in self.client.get_collections().collections)

    def exists(self, collection: str) -> bool:
        return self.client.collection_exists(collection)

    def create(self, collection: str, dimension: int) -> None:
        self.client.create_collection(
            collection_name=collection,
            vectors_config={
                DENSE_VECTOR: rest.VectorParams(size=dimension, distance=rest.Distance.COSINE)
            },
            sparse_vectors_config={
                SPARSE_VECTOR: rest.SparseVectorParams(
                    index=rest.SparseIndexParams(), modifier=rest.Modifier.IDF
                )
            },
        )
        if self.remote:  # qdrant-client's own modes have no payload indexes
            self.client.create_payload_index(
                collection, "doc_id", field_schema=rest.PayloadSchemaType.KEYWORD
            )
            self.client.create_payload_index(
                collection, INCOMPLETE, field_schema=rest.PayloadSchemaType.BOOL
            )

    def layout(self, collection: str) -> Layout:
        if collection not in self._layouts:
            params = self.client.get_collection(collection).config.params
            vectors = params.vectors
            sparse = params.sparse_vectors or {}
            if isinstance(vectors, dict):
                dense = DENSE_VECTOR if DENSE_VECTOR in vectors else next(iter(vectors), "")
            else:
                dense = ""
            sparse_name = SPARSE_VECTOR if SPARSE_VECTOR in sparse else None
            self._layouts[collection] = Layout(dense=dense, sparse=sparse_name)
        return self._layouts[collection]

    def drop(self, collection: str) -> bool:
        self._layouts.pop(collection, None)
        return self.client.delete_collection(collection)

    def count(self, collection: str) -> int:
        return self.client.count(collection, exact=True).count

    # --- writes ------------------------------------------------------------------------------
    def upsert(self, collection: str, points: Sequence[Point]) -> None:
        layout = self.layout(collection)
        structs = []
        for point in points:
            dense = [float(x) for x in point.dense]
            vector: Any = {layout.dense: dense} if layout.dense else dense
            if layout.sparse and point.sparse is not None and point.sparse.indices:
                vector[layout.sparse] = rest.SparseVector(
                    indices=point.sparse.indices, values=point.sparse.values
                )
            structs.append(rest.PointStruct(id=point.id, vector=vector, payload=point.payload))
        self.client.upsert(collection_name=collection, points=structs, wait=True)

    def delete_key(self, collection: str, ids: Sequence[str], key: str) -> None:
        self.client.delete_payload(
            collection_name=collection, keys=[key], points=list(ids), wait=True
        )

    def delete(self, collection: str, where: Where) -> None:
        selector = rest.FilterSelector(filter=_filter(where) or rest.Filter())
        self.client.delete(collection_name=collection, points_selector=selector, wait=True)

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
        layout = self.layout(collection)
        payload: Any = (
            keys if isinstance(keys, bool) else rest.PayloadSelectorInclude(include=list(keys))
        )
        flt = _filter(where)
        offset: Any = None
        while True:
            points, offset = self.client.scroll(
                collection_name=collection,
                limit=page,
                offset=offset,
                scroll_filter=flt,
                with_payload=payload,
                with_vectors=vectors,
            )
            for point in points:
                yield record_of(point.id, point.payload, point.vector, layout.dense)
            if offset is None:
                return

    def retrieve(
        self, collection: str, ids: Sequence[str], *, payload: bool, dense: bool
    ) -> list[Record]:
        layout = self.layout(collection)
        with_vectors: Any = False
        if dense:
            with_vectors = [layout.dense] if layout.dense else True
        points = self.client.retrieve(
            collection_name=collection,
            ids=list(ids),
            with_payload=payload,
            with_vectors=with_vectors,
        )
        return [record_of(p.id, p.payload, p.vector, layout.dense) for p in points]

    def search(self, collection: str, request: SearchRequest) -> Hits:
        layout = self.layout(collection)
        flt = _filter(request.where)
        requests: list[rest.QueryRequest] = []
        if request.dense is not None:
            requests.append(
                rest.QueryRequest(
                    query=[float(x) for x in request.dense],
                    using=layout.dense or None,
                    limit=request.limit,
                    filter=flt,
                    with_payload=False,
                )
            )
        sparse = request.sparse
        use_sparse = sparse is not None and bool(sparse.indices) and layout.sparse is not None
        if use_sparse:
            assert sparse is not None
            with_vector: bool | list[str] = request.sparse_vectors
            if request.sparse_vectors and layout.dense:
                with_vector = [layout.dense]
            requests.append(
                rest.QueryRequest(
                    query=rest.SparseVector(indices=sparse.indices, values=sparse.values),
                    using=layout.sparse,
                    limit=request.sparse_limit,
                    filter=flt,
                    with_payload=False,
                    with_vector=with_vector,
                )
            )
        if not requests:
            return Hits(dense=[], sparse=[])
        responses = self.client.query_batch_points(collection_name=collection, requests=requests)
        return hits_of(request, [r.points for r in responses], use_sparse, layout.dense)

    def optimize(self, collection: str) -> bool:
        """A Qdrant server indexes in the background; nothing to do."""
        return False

    def unindexed(self, collection: str) -> int:
        return 0


#: the `INCOMPLETE` mark, on incomplete chunks
_MARKED = rest.FieldCondition(key=INCOMPLETE, match=rest.MatchValue(value=True))


def _filter(where: Where | None) -> rest.Filter | None:
    filter_: rest.Filter | None = payload_filter(where, rest, _MARKED, holds_on_incomplete=True)
    return filter_
