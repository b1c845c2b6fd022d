"""The Qdrant store: one client, one collection per knowledge base.

Embedded by default (qdrant-client's local mode in a directory, or ``:memory:``); a URL and API
key point the same code at a Qdrant server or cluster.

A collection has LlamaIndex's hybrid layout: a dense vector ``text-dense`` (the embedder's) and a
sparse vector ``text-sparse-new`` (BM25 term weights, see `citeflow.bm25`) declared with Qdrant's
IDF modifier. Payloads are LlamaIndex node payloads, so a notebook can open a collection with
``QdrantVectorStore`` (also with ``enable_hybrid=True``). Collections written before the keyword
side existed (one unnamed dense vector) still work, dense only.

qdrant-client's local mode is not thread-safe and admits one process per directory: every call
goes through one lock, and async callers hop to a worker thread so the event loop never blocks.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt
from llama_index.core.schema import BaseNode, MetadataMode, TextNode
from llama_index.core.vector_stores.utils import (
    legacy_metadata_dict_to_node,
    metadata_dict_to_node,
    node_to_metadata_dict,
)
from llama_index.vector_stores.qdrant import QdrantVectorStore
from qdrant_client import QdrantClient
from qdrant_client.http import models as rest

from citeflow.bm25 import BM25Encoder, SparseVector
from citeflow.disk import disk_space
from citeflow.errors import CollectionNotFoundError, EmptyCollectionError, StoreLockedError
from citeflow.local_index import LocalIndex
from citeflow.settings import Settings

T = TypeVar("T")
#: a dense vector: a list from Qdrant, a numpy array from the embedded store's index
Vector = Sequence[float] | npt.NDArray[np.float32]
log = logging.getLogger("citeflow.store")

#: vector names of LlamaIndex's hybrid Qdrant layout (QdrantVectorStore's defaults)
DENSE_VECTOR = "text-dense"
SPARSE_VECTOR = "text-sparse-new"

#: payload key of a chunk whose document is being written: set on every chunk as it is stored,
#: removed from all of them once the document's last chunk is stored (`Store.mark_complete`).
#: Searches leave such chunks out, so a write cut short (a crash, ``kill -9``, a full disk)
#: never reaches an answer, and listings show the document as incomplete.
INCOMPLETE = "incomplete"

#: payload keys kept per document (one copy on each of its chunks); ``chunk_count`` is how many
#: chunks the document was written with, so that one cut short (a crash, Ctrl-C) is seen as such
#: also in collections written before `INCOMPLETE` existed
DOC_KEYS = ("doc_id", "content_hash", "chunk_count", "file_path", "file_name", "title", INCOMPLETE)


@dataclass(frozen=True, slots=True)
class Layout:
    """How a collection stores its vectors."""

    dense: str
    """name of the dense vector ("" for a collection with one unnamed vector)"""
    sparse: str | None
    """name of the BM25 sparse vector, or None when the collection has no keyword side"""


@dataclass(frozen=True, slots=True)
class Candidate:
    """One search hit before its payload is loaded: a point id and its score."""

    id: str
    score: float


@dataclass(frozen=True, slots=True)
class Hits:
    """One search's candidates per side, best first (either side may be empty).

    Candidates come without payloads: ranking needs ids and scores only, and turning a payload
    into a LlamaIndex node costs more than the search itself on a small collection. Load the
    chosen ones with `Store.nodes`.
    """

    dense: list[Candidate]
    sparse: list[Candidate]
    vectors: dict[str, Vector] = field(default_factory=dict)
    """dense vectors of keyword candidates, by point id (when asked for; numpy arrays from the
    embedded store)"""


@dataclass(frozen=True, slots=True)
class DocumentRecord:
    """What the store knows of one ingested document."""

    doc_id: str
    content_hash: str
    file_path: str
    file_name: str
    title: str
    chunks: int
    expected_chunks: int | None = None
    """chunks the document was written with (None: written before this was recorded)"""
    unfinished: bool = False
    """a write of the document began and did not finish (its chunks still carry `INCOMPLETE`,
    or a replaced version is still stored beside the new one)"""

    @property
    def complete(self) -> bool:
        """Whether the document is stored whole and its write finished (an interrupted write
        leaves chunks missing, or marked `INCOMPLETE` and kept out of answers)."""
        if self.unfinished:
            return False
        return self.expected_chunks is None or self.chunks == self.expected_chunks

    @property
    def stored(self) -> str:
        """The chunks stored, for people: ``19 of 40`` (``19`` when the count is unknown)."""
        if self.expected_chunks is None:
            return str(self.chunks)
        return f"{self.chunks} of {self.expected_chunks}"


class Store:
    """Owns the Qdrant client; hands out one `QdrantVectorStore` per collection."""

    def __init__(self, client: QdrantClient, *, location: str) -> None:
        self.client = client
        self.location = location
        self._lock = threading.RLock()
        self._layouts: dict[str, Layout] = {}
        self._indexes: dict[str, LocalIndex | None] = {}
        #: embedded store: the ids of points marked `INCOMPLETE`, per collection (read once,
        #: then kept in step with this process's writes: only one process opens the directory)
        self._incomplete: dict[str, set[str]] = {}

    @classmethod
    def open(cls, settings: Settings) -> Store:
        """Connect to the configured Qdrant (server by URL, else embedded on disk)."""
        if settings.qdrant_url:
            key = settings.qdrant_api_key.get_secret_value() if settings.qdrant_api_key else None
            client = QdrantClient(url=settings.qdrant_url, api_key=key, timeout=30)
            return cls(client, location=settings.qdrant_url)
        return cls.open_path(settings.qdrant_path)

    @classmethod
    def open_path(cls, path: Path | str) -> Store:
        """Embedded Qdrant in a directory, or ``":memory:"``."""
        if str(path) == ":memory:":
            return cls(QdrantClient(location=":memory:"), location=":memory:")
        directory = Path(path)
        try:
            with _full_disk_guard(str(directory)):
                directory.mkdir(parents=True, exist_ok=True)
                client = QdrantClient(path=str(directory))
        except RuntimeError as exc:
            if "already accessed by another instance" in str(exc):
                raise StoreLockedError(
                    f"the embedded store {directory} is in use by another process (is "
                    "`citeflow serve` running?); stop it, or send documents through its API"
                ) from None
            raise
        return cls(client, location=str(directory))

    def _disk(self) -> AbstractContextManager[None]:
        """Around each write: a full disk becomes one clear `StorageFullError`."""
        return _full_disk_guard(self.location)

    @property
    def embedded(self) -> bool:
        return not self.location.startswith(("http://", "https://"))

    def close(self) -> None:
        with self._lock:
            self.client.close()

    # --- calls -------------------------------------------------------------------------------
    def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run one store operation under the store's lock."""
        with self._lock:
            return fn(*args, **kwargs)

    async def acall(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run one store operation in a worker thread."""
        return await asyncio.to_thread(self.call, fn, *args, **kwargs)

    # --- collections -------------------------------------------------------------------------
    def vector_store(self, collection: str) -> QdrantVectorStore:
        """A LlamaIndex vector store over an existing collection (dense side), for notebooks."""
        layout = self.layout(collection)
        return QdrantVectorStore(
            collection_name=collection,
            client=self.client,
            dense_vector_name=layout.dense or None,
        )

    def layout(self, collection: str) -> Layout:
        """The vector layout of an existing collection."""
        if collection not in self._layouts:
            info = self.call(self.client.get_collection, collection)
            vectors = info.config.params.vectors
            sparse = info.config.params.sparse_vectors or {}
            if isinstance(vectors, dict):
                dense = DENSE_VECTOR if DENSE_VECTOR in vectors else next(iter(vectors), "")
            else:
                dense = ""
            layout = Layout(dense=dense, sparse=SPARSE_VECTOR if SPARSE_VECTOR in sparse else None)
            if layout.sparse is None:
                log.warning(
                    "collection has no keyword (BM25) index; searching it dense only. "
                    "Add one, without re-embedding: citeflow reindex --collection NAME",
                    extra={"collection": collection},
                )
            self._tune_embedded(collection)
            self._layouts[collection] = layout
        return self._layouts[collection]

    def ensure_collection(self, collection: str, dimension: int) -> Layout:
        """Create the collection with the hybrid layout unless it exists; its layout."""
        with self._lock, self._disk():
            if not self.client.collection_exists(collection):
                self.client.create_collection(
                    collection_name=collection,
                    vectors_config={
                        DENSE_VECTOR: rest.VectorParams(
                            size=dimension, distance=rest.Distance.COSINE
                        )
                    },
                    sparse_vectors_config={
                        SPARSE_VECTOR: rest.SparseVectorParams(
                            index=rest.SparseIndexParams(), modifier=rest.Modifier.IDF
                        )
                    },
                )
                if not self.embedded:  # payload indexes only exist on a Qdrant server
                    self.client.create_payload_index(
                        collection, "doc_id", field_schema=rest.PayloadSchemaType.KEYWORD
                    )
                    self.client.create_payload_index(
                        collection, INCOMPLETE, field_schema=rest.PayloadSchemaType.BOOL
                    )
            return self.layout(collection)

    def _local_collection(self, collection: str) -> Any | None:
        """qdrant-client's in-process collection (embedded store), when its internals are the
        ones known here (``payload`` list, ``deleted`` flags); else None."""
        if not self.embedded:
            return None
        local = getattr(self.client, "_client", None)
        found = getattr(local, "collections", {}).get(collection)
        if found is None or not isinstance(getattr(found, "payload", None), list):
            return None
        return found if hasattr(found, "deleted") else None

    def _local_index(self, collection: str) -> LocalIndex | None:
        """The vectorised search over an embedded collection (`citeflow.local_index`), kept
        while the collection object lives; None on a server or unknown qdrant-client internals.
        """
        local = self._local_collection(collection)
        if local is None:
            return None
        index = self._indexes.get(collection)
        if index is None or index.local is not local:
            layout = self.layout(collection)
            index = LocalIndex.attach(local, dense=layout.dense, sparse=layout.sparse)
            self._indexes[collection] = index
        return index

    def _tune_embedded(self, collection: str) -> None:
        """Embedded store: commit writes through SQLite's write-ahead log.

        qdrant-client's local mode commits every point in its own transaction; in SQLite's
        default rollback-journal mode each commit creates, syncs and deletes a journal file.
        WAL with ``synchronous=NORMAL`` halves the CPU per written point and keeps the database
        consistent after a crash (the last writes may be lost on power failure, not corrupted).
        """
        if self.location == ":memory:":
            return
        persistence = getattr(self._local_collection(collection), "storage", None)
        connection = getattr(persistence, "storage", None)
        if connection is None:  # a qdrant-client whose internals differ: keep its defaults
            return
        with self._lock, self._disk():
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute("PRAGMA synchronous=NORMAL")

    def collections(self) -> list[str]:
        return sorted(c.name for c in self.call(self.client.get_collections).collections)

    def exists(self, collection: str) -> bool:
        return self.call(self.client.collection_exists, collection)

    def count(self, collection: str) -> int:
        if not self.exists(collection):
            return 0
        return self.call(self.client.count, collection, exact=True).count

    def require(self, collection: str) -> int:
        """The collection's chunk count; a clear error if it is missing or empty."""
        if not self.exists(collection):
            known = ", ".join(self.collections()) or "none yet"
            raise CollectionNotFoundError(
                f"no knowledge base named {collection!r} (known: {known}); "
                f"create it with: citeflow ingest PATH --collection {collection}"
            )
        count = self.count(collection)
        if count == 0:
            raise EmptyCollectionError(
                f"knowledge base {collection!r} has no documents; "
                f"add some with: citeflow ingest PATH --collection {collection}"
            )
        return count

    def drop(self, collection: str) -> bool:
        with self._lock, self._disk():
            self._layouts.pop(collection, None)
            self._indexes.pop(collection, None)
            self._incomplete.pop(collection, None)
            return self.client.delete_collection(collection)

    # --- nodes -------------------------------------------------------------------------------
    def add(
        self,
        collection: str,
        nodes: list[BaseNode],
        sparse: list[SparseVector] | None = None,
        *,
        incomplete: bool = False,
    ) -> None:
        """Upsert embedded nodes (and their BM25 vectors, when the collection has a keyword side).

        The collection is created with the hybrid layout on first write. ``incomplete`` marks
        the chunks `INCOMPLETE` (their document's write is under way; see `mark_complete`).
        """
        if not nodes:
            return
        if sparse is not None and len(sparse) != len(nodes):
            raise ValueError(f"{len(nodes)} nodes but {len(sparse)} sparse vectors")
        layout = self.ensure_collection(collection, len(nodes[0].get_embedding()))
        points = []
        for i, node in enumerate(nodes):
            vector: dict[str, Any] = {layout.dense: node.get_embedding()}
            if layout.sparse and sparse is not None and sparse[i].indices:
                vector[layout.sparse] = rest.SparseVector(
                    indices=sparse[i].indices, values=sparse[i].values
                )
            payload = node_to_metadata_dict(node, remove_text=False, flat_metadata=False)
            if incomplete:
                payload[INCOMPLETE] = True
            points.append(rest.PointStruct(id=node.node_id, vector=vector, payload=payload))
        self._upsert(collection, points)

    def _upsert(self, collection: str, points: list[rest.PointStruct]) -> None:
        """Every write of points: upsert, and tell the embedded store's index which it
        overwrote in place (they get new rows there)."""
        with self._lock, self._disk():
            self.client.upsert(collection_name=collection, points=points, wait=True)
            index = self._indexes.get(collection)
            if index is not None:
                slots = index.local.ids
                keys = (_point_key(p.id) for p in points)
                index.touch(slots[k] for k in keys if k in slots)
            marked = self._incomplete.get(collection)
            if marked is not None:
                for point in points:
                    key = str(_point_key(point.id))
                    if (point.payload or {}).get(INCOMPLETE) is True:
                        marked.add(key)
                    else:
                        marked.discard(key)

    def mark_complete(self, collection: str, ids: Sequence[str]) -> None:
        """Take the `INCOMPLETE` mark off these points (their document is stored whole): from
        now on searches find them."""
        if not ids:
            return
        with self._lock, self._disk():
            self.client.delete_payload(
                collection_name=collection, keys=[INCOMPLETE], points=list(ids), wait=True
            )
            marked = self._incomplete.get(collection)
            if marked is not None:
                marked.difference_update(str(_point_key(i)) for i in ids)

    def incomplete_points(self, collection: str) -> frozenset[str]:
        """The ids of the collection's points marked `INCOMPLETE`: read once, then kept in step
        with this process's writes (exact on the embedded store, which one process opens; on a
        Qdrant server, searches filter by the mark itself)."""
        with self._lock:
            marked = self._incomplete.get(collection)
            if marked is None:
                points = self._scroll(collection, _INCOMPLETE_ONLY, payload=False)
                marked = {str(_point_key(p.id)) for p in points}
                self._incomplete[collection] = marked
            return frozenset(marked)

    def search(
        self,
        collection: str,
        *,
        dense: list[float] | None = None,
        sparse: SparseVector | None = None,
        limit: int,
        sparse_limit: int | None = None,
        sparse_vectors: bool = False,
    ) -> Hits:
        """Dense and/or BM25 search in one round trip; each side's ``limit`` best candidates.

        Chunks marked `INCOMPLETE` (their document's write has not finished) are left out.
        ``sparse_vectors`` also returns the dense vectors of the keyword candidates
        (`Hits.vectors`), for scoring them against the query embedding.
        """
        layout = self.layout(collection)
        with self._lock:
            index = self._local_index(collection)
            if index is not None:
                skip = self.incomplete_points(collection)
                return _local_search(
                    index, dense, sparse, limit, sparse_limit, sparse_vectors, skip
                )
        requests: list[rest.QueryRequest] = []
        if dense is not None:
            requests.append(
                rest.QueryRequest(
                    query=dense,
                    using=layout.dense or None,
                    limit=limit,
                    filter=_COMPLETE_ONLY,
                    with_payload=False,
                )
            )
        use_sparse = sparse is not None and bool(sparse.indices) and layout.sparse is not None
        if use_sparse:
            assert sparse is not None
            with_vector: bool | list[str] = sparse_vectors
            if sparse_vectors and layout.dense:
                with_vector = [layout.dense]
            requests.append(
                rest.QueryRequest(
                    query=rest.SparseVector(indices=sparse.indices, values=sparse.values),
                    using=layout.sparse,
                    limit=sparse_limit or limit,
                    filter=_COMPLETE_ONLY,
                    with_payload=False,
                    with_vector=with_vector,
                )
            )
        if not requests:
            return Hits(dense=[], sparse=[])
        responses = self.call(
            self.client.query_batch_points, collection_name=collection, requests=requests
        )
        results = [[Candidate(str(p.id), float(p.score)) for p in r.points] for r in responses]
        vectors: dict[str, Vector] = {}
        if use_sparse and sparse_vectors:
            for point in responses[-1].points:
                found: Any = point.vector
                if isinstance(found, dict):
                    found = found.get(layout.dense)
                if isinstance(found, list):
                    vectors[str(point.id)] = found
        return Hits(
            dense=results[0] if dense is not None else [],
            sparse=results[-1] if use_sparse else [],
            vectors=vectors,
        )

    def vectors(self, collection: str, ids: Sequence[str]) -> dict[str, Vector]:
        """The stored dense vectors of these points, by id (normalised, as Qdrant keeps them for
        cosine); missing ids are left out. Embedded: rows of the in-process array; server: one
        ``retrieve`` of the dense vector only."""
        if not ids:
            return {}
        layout = self.layout(collection)
        with self._lock:
            index = self._local_index(collection)
            if index is not None:
                slots = index.local.ids
                found: dict[str, Vector] = {}
                for key in ids:
                    point = slots.get(_point_key(key))
                    if point is not None and not index.local.deleted[point]:
                        found[key] = index.vector(int(point))
                return found
        points = self.call(
            self.client.retrieve,
            collection_name=collection,
            ids=list(ids),
            with_payload=False,
            with_vectors=[layout.dense] if layout.dense else True,
        )
        vectors: dict[str, Vector] = {}
        for point in points:
            vector: Any = point.vector
            if isinstance(vector, dict):
                vector = vector.get(layout.dense)
            if isinstance(vector, list):
                vectors[str(point.id)] = vector
        return vectors

    def nodes(self, collection: str, ids: list[str]) -> dict[str, BaseNode]:
        """The chunks with these point ids (payloads loaded), by id; missing ids are left out."""
        if not ids:
            return {}
        points = self.call(
            self.client.retrieve,
            collection_name=collection,
            ids=ids,
            with_payload=True,
            with_vectors=False,
        )
        return {str(p.id): _to_node(p) for p in points}

    def add_keyword_index(self, collection: str, encoder: BM25Encoder, *, batch: int = 256) -> int:
        """Give a collection written without BM25 vectors its keyword side; points re-written.

        Nothing is re-embedded: points (dense vectors and payloads) are copied to a staging
        collection, the original is re-created with the hybrid layout, and the points are copied
        back with their BM25 vectors computed from their text. Interrupted, it resumes from the
        staging collection on the next call. Returns the number of points in the result.
        """
        staging = f"{collection}.reindex"
        with self._lock:
            if self.client.collection_exists(collection):
                layout = self.layout(collection)
                if layout.sparse is not None and not self.client.collection_exists(staging):
                    return self.count(collection)
                if not self.client.collection_exists(staging) or self.count(collection):
                    self._copy(collection, layout.dense, staging, None, batch)
                self.drop(collection)
            elif not self.client.collection_exists(staging):
                raise CollectionNotFoundError(f"no knowledge base named {collection!r}")
            self._copy(staging, DENSE_VECTOR, collection, encoder, batch)
            self.drop(staging)
            return self.count(collection)

    def _copy(
        self,
        source: str,
        source_dense: str,
        target: str,
        encoder: BM25Encoder | None,
        batch: int,
    ) -> None:
        """Copy every point of ``source`` into ``target`` (hybrid layout), adding BM25 vectors."""
        offset: Any = None
        while True:
            points, offset = self.client.scroll(
                collection_name=source,
                limit=batch,
                offset=offset,
                with_payload=True,
                with_vectors=True,
            )
            if points:
                first: Any = points[0].vector
                dense_of = (lambda v: v.get(source_dense)) if isinstance(first, dict) else None
                dimension = len(dense_of(first) if dense_of else first)
                self.ensure_collection(target, dimension)
                out = []
                for point in points:
                    vector: Any = point.vector
                    dense = dense_of(vector) if dense_of else vector
                    vectors: dict[str, Any] = {DENSE_VECTOR: dense}
                    if encoder is not None:
                        node = _to_node(point)
                        sparse = encoder.encode_document(
                            node.get_content(metadata_mode=MetadataMode.EMBED)
                        )
                        if sparse.indices:
                            vectors[SPARSE_VECTOR] = rest.SparseVector(
                                indices=sparse.indices, values=sparse.values
                            )
                    out.append(rest.PointStruct(id=point.id, vector=vectors, payload=point.payload))
                self._upsert(target, out)
            if offset is None:
                return

    def clear_layouts(self) -> None:
        """Forget cached layouts (after collections were re-created elsewhere)."""
        with self._lock:
            self._layouts.clear()

    def delete_document(self, collection: str, doc_id: str) -> None:
        """Delete every chunk of one document."""
        self._delete_where(collection, rest.Filter(must=[_of_document(doc_id)]))

    def delete_other_versions(self, collection: str, doc_id: str, content_hash: str) -> None:
        """Delete the chunks of a document's other versions (other content hashes)."""
        version = rest.FieldCondition(key="content_hash", match=rest.MatchValue(value=content_hash))
        self._delete_where(collection, rest.Filter(must=[_of_document(doc_id)], must_not=[version]))

    def _delete_where(self, collection: str, flt: rest.Filter) -> None:
        with self._lock, self._disk():
            self.client.delete(
                collection_name=collection, points_selector=rest.FilterSelector(filter=flt)
            )

    def documents(self, collection: str) -> dict[str, DocumentRecord]:
        """Every document of a collection with its content hash and chunk count."""
        if not self.exists(collection):
            return {}
        return _records(self._scroll_payloads(collection, list(DOC_KEYS)))

    def content_hashes(self, collection: str, doc_ids: list[str]) -> dict[str, str]:
        """The stored content hash of each of these documents that the collection holds ("" for
        one written only in part, see `DocumentRecord.complete`).

        On a Qdrant server the ``doc_id`` payload index finds the named documents' chunks. The
        embedded store has no payload index: its filter compares every point's ``doc_id`` with
        every requested id (214 ms for 250 ids among 4,320 points, growing with both), so there
        the in-process payloads are read directly, one set lookup per point (about 1 ms).
        """
        if not doc_ids or not self.exists(collection):
            return {}
        local = self._local_collection(collection)
        if local is not None:
            wanted = set(doc_ids)
            payloads: list[dict[str, Any]] = []
            with self._lock:
                deleted = local.deleted
                for idx, payload in enumerate(local.payload):
                    if payload.get("doc_id") in wanted and not deleted[idx]:
                        payloads.append(payload)
            return _complete_hashes(_records(payloads))
        return self._content_hashes_by_filter(collection, doc_ids)

    def _content_hashes_by_filter(self, collection: str, doc_ids: list[str]) -> dict[str, str]:
        flt = rest.Filter(
            must=[rest.FieldCondition(key="doc_id", match=rest.MatchAny(any=doc_ids))]
        )
        keys = ["doc_id", "content_hash", "chunk_count", INCOMPLETE]
        return _complete_hashes(_records(self._scroll_payloads(collection, keys, flt)))

    def _scroll_payloads(
        self, collection: str, keys: list[str], flt: rest.Filter | None = None
    ) -> Iterator[dict[str, Any]]:
        payload = rest.PayloadSelectorInclude(include=keys)
        for point in self._scroll(collection, flt, payload):
            yield dict(point.payload or {})

    def _scroll(
        self, collection: str, flt: rest.Filter | None, payload: rest.PayloadSelector | bool
    ) -> Iterator[rest.Record]:
        """Every point of the collection that passes ``flt``, a page of 1,024 at a time."""
        offset: Any = None
        while True:
            points, offset = self.call(
                self.client.scroll,
                collection_name=collection,
                limit=1024,
                offset=offset,
                scroll_filter=flt,
                with_payload=payload,
                with_vectors=False,
            )
            yield from points
            if offset is None:
                return


def _full_disk_guard(location: str) -> AbstractContextManager[None]:
    """`citeflow.disk.disk_space` for the store at ``location``: each of its writes happens or
    not (SQLite rolls a failed transaction back, a Qdrant server its failed operation), so what
    was stored before stays stored."""
    return disk_space(
        f"no space left on the disk holding the store ({location}): a write failed and was "
        "undone, nothing already stored was lost; free some space, then try again"
    )


def _local_search(
    index: LocalIndex,
    dense: list[float] | None,
    sparse: SparseVector | None,
    limit: int,
    sparse_limit: int | None,
    sparse_vectors: bool,
    skip: frozenset[str] = frozenset(),
) -> Hits:
    """`Store.search` on the embedded store, through its vectorised index; the points in
    ``skip`` are left out (each side fetches that many more, then drops them)."""
    dense_hits: list[Candidate] = []
    sparse_hits: list[Candidate] = []
    vectors: dict[str, Vector] = {}
    extra = len(skip)
    if dense is not None:
        ids, scores = index.dense(dense, limit + extra)
        dense_hits = [Candidate(i, s) for i, s in zip(ids, scores, strict=True) if i not in skip]
        dense_hits = dense_hits[:limit]
    if sparse is not None and sparse.indices and index.has_keywords:
        wanted = sparse_limit or limit
        ids, scores, points = index.sparse(sparse.indices, sparse.values, wanted + extra)
        kept = [k for k, i in enumerate(ids) if i not in skip][:wanted]
        sparse_hits = [Candidate(ids[k], scores[k]) for k in kept]
        if sparse_vectors:
            vectors = {ids[k]: index.vector(int(points[k])) for k in kept}
    return Hits(dense=dense_hits, sparse=sparse_hits, vectors=vectors)


#: filters: points marked `INCOMPLETE`, and the others (a point without the key passes)
_INCOMPLETE_ONLY = rest.Filter(
    must=[rest.FieldCondition(key=INCOMPLETE, match=rest.MatchValue(value=True))]
)
_COMPLETE_ONLY = rest.Filter(
    must_not=[rest.FieldCondition(key=INCOMPLETE, match=rest.MatchValue(value=True))]
)


def _of_document(doc_id: str) -> rest.FieldCondition:
    """The condition "chunk of document ``doc_id``"."""
    return rest.FieldCondition(key="doc_id", match=rest.MatchValue(value=doc_id))


def _point_key(point_id: Any) -> Any:
    """A point id as qdrant-client's local mode keys it (UUID strings normalised)."""
    if isinstance(point_id, str):
        try:
            return str(uuid.UUID(point_id))
        except ValueError:
            return point_id
    return point_id


def _to_node(point: rest.Record | rest.ScoredPoint) -> BaseNode:
    """A point as a LlamaIndex node (payload written by citeflow or QdrantVectorStore)."""
    payload = dict(point.payload or {})
    try:
        node = metadata_dict_to_node(payload)
    except Exception:  # an older LlamaIndex payload without _node_content
        metadata, info, relationships = legacy_metadata_dict_to_node(payload)
        node = TextNode(
            id_=str(point.id),
            text=str(payload.get("text", "")),
            metadata=metadata,
            start_char_idx=info.get("start"),
            end_char_idx=info.get("end"),
            relationships=relationships,
        )
    return node


def _chunk_count(payload: dict[str, Any]) -> int | None:
    count = payload.get("chunk_count")
    return count if isinstance(count, int) else None


def _records(payloads: Iterable[dict[str, Any]]) -> dict[str, DocumentRecord]:
    """The documents of these chunk payloads, each with its chunks counted.

    Chunks are counted per version of a document (its content hash). A document holds two
    versions only while (or after) a replacement is cut short: its record is then the version
    being written, and not complete.
    """
    firsts: dict[tuple[str, str], dict[str, Any]] = {}
    counts: dict[tuple[str, str], int] = {}
    marked: set[tuple[str, str]] = set()
    for payload in payloads:
        key = (str(payload.get("doc_id", "")), str(payload.get("content_hash", "")))
        if key not in firsts:
            firsts[key] = payload
        counts[key] = counts.get(key, 0) + 1
        if payload.get(INCOMPLETE) is True:
            marked.add(key)
    versions: dict[str, list[DocumentRecord]] = {}
    for key, payload in firsts.items():
        versions.setdefault(key[0], []).append(
            DocumentRecord(
                doc_id=key[0],
                content_hash=key[1],
                file_path=str(payload.get("file_path", "")),
                file_name=str(payload.get("file_name", "")),
                title=str(payload.get("title", "")),
                chunks=counts[key],
                expected_chunks=_chunk_count(payload),
                unfinished=key in marked,
            )
        )
    found: dict[str, DocumentRecord] = {}
    for doc_id, records in versions.items():
        shown = next((r for r in records if not r.complete), records[0])
        if len(records) > 1:
            shown = dataclasses.replace(shown, unfinished=True)
        found[doc_id] = shown
    return found


def _complete_hashes(records: dict[str, DocumentRecord]) -> dict[str, str]:
    """Each document's content hash, or "" for one with chunks missing (written only in part),
    so that it is written again rather than taken as unchanged."""
    return {k: r.content_hash if r.complete else "" for k, r in records.items()}
