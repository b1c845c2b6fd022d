"""`Store`: citeflow's chunks in Qdrant, one collection per knowledge base, on either engine.

Embedded by default (`citeflow.store.edge`: Qdrant's engine in-process, in a directory); a URL
and API key point the same code at a Qdrant server or cluster through qdrant-client
(`citeflow.store.client`). Both keep the same collection layout and the same scores, so the
grader's threshold and Open WebUI's relevance mean the same on either
(``tests/test_store_parity.py``).

Engines are not thread-safe: every call goes through one lock, and async callers hop to a worker
thread so the event loop never blocks.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from llama_index.core.schema import BaseNode
from llama_index.core.vector_stores.utils import node_to_metadata_dict

from citeflow.bm25 import BM25Encoder, SparseVector
from citeflow.errors import CollectionNotFoundError, EmptyCollectionError
from citeflow.settings import StoreSettings
from citeflow.store.client import ClientEngine
from citeflow.store.copying import Engine, copy_points, pages
from citeflow.store.directory import (
    DirectoryLock,
    check_marker,
    full_disk_guard,
    has_legacy_store,
    write_marker,
)
from citeflow.store.edge import EdgeEngine
from citeflow.store.engine import (
    COMPLETE_ONLY,
    INCOMPLETE,
    Hits,
    Layout,
    Point,
    Record,
    SearchRequest,
    Vector,
    Where,
)
from citeflow.store.migration import migrate
from citeflow.store.records import DOC_KEYS, DocumentRecord, complete_hashes, records, to_node

T = TypeVar("T")
log = logging.getLogger("citeflow.store")


class Store:
    """citeflow's chunks in Qdrant (see the module doc)."""

    def __init__(self, engine: Engine, *, lock: DirectoryLock | None = None) -> None:
        self.engine = engine
        self.location = engine.location
        self._lock = threading.RLock()
        self._directory_lock = lock
        self._warned: set[str] = set()

    @classmethod
    def open(cls, settings: StoreSettings) -> Store:
        """Connect to the configured Qdrant (server by URL, else embedded on disk)."""
        if settings.qdrant_url:
            key = settings.qdrant_api_key.get_secret_value() if settings.qdrant_api_key else None
            return cls(ClientEngine.connect(settings.qdrant_url, key))
        return cls.open_path(settings.qdrant_path)

    @classmethod
    def open_path(cls, path: Path | str, *, progress: bool = True) -> Store:
        """The embedded store in a directory (made if missing), or ``":memory:"`` (qdrant-client's
        in-memory mode: nothing kept). A store of an earlier citeflow is migrated first
        (`citeflow.store.migration`; ``progress`` shows a progress bar)."""
        if str(path) == ":memory:":
            return cls(ClientEngine.in_memory())
        root = Path(path)
        with full_disk_guard(str(root)):
            root.mkdir(parents=True, exist_ok=True)
        lock = DirectoryLock(root)
        lock.acquire()
        try:
            check_marker(root)
            if has_legacy_store(root):
                migrate(root, progress=progress)
            with full_disk_guard(str(root)):
                write_marker(root)
            return cls(EdgeEngine(root), lock=lock)
        except BaseException:
            lock.release()
            raise

    @contextmanager
    def writing(self) -> Iterator[None]:
        """Around each write, this store's or one another store drives (`copy`): its lock, and
        a full disk turned into one clear `StorageFullError`."""
        with self._lock, full_disk_guard(self.location):
            yield

    @property
    def embedded(self) -> bool:
        return isinstance(self.engine, EdgeEngine)

    def close(self) -> None:
        with self._lock:
            self.engine.close()
            if self._directory_lock is not None:
                self._directory_lock.release()
                self._directory_lock = None

    def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run one store operation under the store's lock."""
        with self._lock:
            return fn(*args, **kwargs)

    # --- collections -------------------------------------------------------------------------
    def layout(self, collection: str) -> Layout:
        """The vector layout of an existing collection."""
        layout = self.call(self.engine.layout, collection)
        if layout.sparse is None and collection not in self._warned:
            self._warned.add(collection)
            log.warning(
                "collection has no keyword (BM25) index; searching it dense only. "
                "Add one, without re-embedding: citeflow reindex --collection NAME",
                extra={"collection": collection},
            )
        return layout

    def ensure_collection(self, collection: str, dimension: int) -> Layout:
        """Create the collection with the hybrid layout unless it exists; its layout."""
        with self.writing():
            if not self.engine.exists(collection):
                self.engine.create(collection, dimension)
            return self.layout(collection)

    def collections(self) -> list[str]:
        return self.call(self.engine.collections)

    def exists(self, collection: str) -> bool:
        return self.call(self.engine.exists, collection)

    def count(self, collection: str) -> int:
        with self._lock:
            return self.engine.count(collection) if self.engine.exists(collection) else 0

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
        with self.writing():
            self._warned.discard(collection)
            return self.engine.drop(collection)

    def optimize(self, collection: str) -> bool:
        """Build the collection's search indexes now (embedded store; a Qdrant server does it
        in the background). Blocks every thread of the process while it runs: never call it on
        a request path (`citeflow.store.edge`)."""
        with self.writing():
            if not self.engine.exists(collection):
                return False
            return self.engine.optimize(collection)

    def unindexed(self, collection: str) -> int:
        """Points written since the last `optimize` (searched by a scan until then)."""
        with self._lock:
            return self.engine.unindexed(collection) if self.engine.exists(collection) else 0

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
        self.ensure_collection(collection, len(nodes[0].get_embedding()))
        points = []
        for i, node in enumerate(nodes):
            payload = node_to_metadata_dict(node, remove_text=False, flat_metadata=False)
            if incomplete:
                payload[INCOMPLETE] = True
            vector = sparse[i] if sparse is not None else None
            points.append(Point(node.node_id, node.get_embedding(), vector, payload))
        self.write(collection, points)

    def write(self, collection: str, points: Sequence[Point]) -> None:
        """Upsert points as they are (ids, vectors and payloads)."""
        with self.writing():
            self.engine.upsert(collection, points)

    def mark_complete(self, collection: str, ids: Sequence[str]) -> None:
        """Take the `INCOMPLETE` mark off these points (their document is stored whole): from
        now on searches find them."""
        if not ids:
            return
        with self.writing():
            self.engine.delete_key(collection, ids, INCOMPLETE)

    def incomplete_points(self, collection: str) -> frozenset[str]:
        """The ids of the collection's points marked `INCOMPLETE`."""
        with self._lock:
            found = self.engine.scroll(collection, Where(incomplete=True), False)
            return frozenset(r.id for r in found)

    def search(
        self,
        collection: str,
        *,
        dense: Vector | None = None,
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
        request = SearchRequest(
            dense=dense,
            sparse=sparse if layout.sparse is not None else None,
            limit=limit,
            sparse_limit=sparse_limit or limit,
            sparse_vectors=sparse_vectors,
            where=COMPLETE_ONLY,
        )
        return self.call(self.engine.search, collection, request)

    def vectors(self, collection: str, ids: Sequence[str]) -> dict[str, Vector]:
        """The stored dense vectors of these points, by id (normalised, as Qdrant keeps them for
        cosine); missing ids are left out."""
        if not ids:
            return {}
        found = self.call(self.engine.retrieve, collection, ids, payload=False, dense=True)
        return {r.id: r.dense for r in found if r.dense is not None}

    def nodes(self, collection: str, ids: list[str]) -> dict[str, BaseNode]:
        """The chunks with these point ids (payloads loaded), by id; missing ids are left out."""
        if not ids:
            return {}
        found = self.call(self.engine.retrieve, collection, ids, payload=True, dense=False)
        return {r.id: to_node(r.id, r.payload) for r in found}

    def points(self, collection: str) -> Iterator[list[Record]]:
        """Every point with its payload and vectors, a page at a time (for copies)."""
        with self._lock:
            yield from pages(self.engine, collection)

    def add_keyword_index(self, collection: str, encoder: BM25Encoder) -> int:
        """Give a collection written without BM25 vectors its keyword side; points re-written.

        Nothing is re-embedded: points (dense vectors and payloads) are copied to a staging
        collection, the original is re-created with the hybrid layout, and the points are copied
        back with their BM25 vectors computed from their text. Interrupted, it resumes from the
        staging collection on the next call. Returns the number of points in the result.
        (Collections of the embedded engine always have a keyword side.)
        """
        staging = f"{collection}.reindex"
        with self._lock:
            if self.exists(collection):
                layout = self.layout(collection)
                if layout.sparse is not None and not self.exists(staging):
                    return self.count(collection)
                if not self.exists(staging) or self.count(collection):
                    self.copy(collection, self, staging, None)
                self.drop(collection)
            elif not self.exists(staging):
                raise CollectionNotFoundError(f"no knowledge base named {collection!r}")
            self.copy(staging, self, collection, encoder)
            self.drop(staging)
            return self.count(collection)

    def copy(
        self, source: str, target_store: Store, target: str, encoder: BM25Encoder | None
    ) -> None:
        """`copy_points` from ``source`` into ``target`` of ``target_store``, under both stores'
        locks."""
        with self._lock, target_store.writing():
            copy_points(self.engine, source, target_store.engine, target, encoder)

    def delete_document(self, collection: str, doc_id: str) -> None:
        """Delete every chunk of one document."""
        with self.writing():
            self.engine.delete(collection, Where(doc_ids=(doc_id,)))

    def delete_other_versions(self, collection: str, doc_id: str, content_hash: str) -> None:
        """Delete the chunks of a document's other versions (other content hashes)."""
        with self.writing():
            self.engine.delete(collection, Where(doc_ids=(doc_id,), not_content_hash=content_hash))

    def documents(self, collection: str) -> dict[str, DocumentRecord]:
        """Every document of a collection with its content hash and chunk count."""
        if not self.exists(collection):
            return {}
        return records(self._payloads(collection, None, DOC_KEYS))

    def content_hashes(self, collection: str, doc_ids: list[str]) -> dict[str, str]:
        """The stored content hash of each of these documents that the collection holds ("" for
        one written only in part, see `DocumentRecord.complete`); found through the ``doc_id``
        payload index."""
        if not doc_ids or not self.exists(collection):
            return {}
        keys = ("doc_id", "content_hash", "chunk_count", INCOMPLETE)
        return complete_hashes(records(self._payloads(collection, Where(tuple(doc_ids)), keys)))

    def _payloads(
        self, collection: str, where: Where | None, keys: Sequence[str]
    ) -> list[dict[str, Any]]:
        with self._lock:
            return [r.payload for r in self.engine.scroll(collection, where, keys)]
