"""The Qdrant store: one client, one collection per knowledge base.

Embedded by default (qdrant-client's local mode in a directory, or ``:memory:``); a URL and API
key point the same code at a Qdrant server or cluster. Collections hold LlamaIndex nodes written by
`QdrantVectorStore`, so a notebook can also open them with ``VectorStoreIndex.from_vector_store``.

qdrant-client's local mode is not thread-safe and admits one process per directory: every call
goes through one lock, and async callers hop to a worker thread so the event loop never blocks.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from llama_index.core.schema import BaseNode
from llama_index.core.vector_stores.types import VectorStoreQuery, VectorStoreQueryResult
from llama_index.vector_stores.qdrant import QdrantVectorStore
from qdrant_client import QdrantClient
from qdrant_client.http import models as rest

from citeflow.errors import CollectionNotFoundError, EmptyCollectionError, StoreLockedError
from citeflow.settings import Settings

T = TypeVar("T")

#: payload keys kept per document (one copy on each of its chunks)
DOC_KEYS = ("doc_id", "content_hash", "file_path", "file_name", "title")


@dataclass(frozen=True, slots=True)
class DocumentRecord:
    """What the store knows of one ingested document."""

    doc_id: str
    content_hash: str
    file_path: str
    file_name: str
    title: str
    chunks: int


class Store:
    """Owns the Qdrant client; hands out one `QdrantVectorStore` per collection."""

    def __init__(self, client: QdrantClient, *, location: str) -> None:
        self.client = client
        self.location = location
        self._lock = threading.RLock()
        self._vector_stores: dict[str, QdrantVectorStore] = {}

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
        directory.mkdir(parents=True, exist_ok=True)
        try:
            client = QdrantClient(path=str(directory))
        except RuntimeError as exc:
            if "already accessed by another instance" in str(exc):
                raise StoreLockedError(
                    f"the embedded store {directory} is in use by another process (is "
                    "`citeflow serve` running?); stop it, or send documents through its API"
                ) from None
            raise
        return cls(client, location=str(directory))

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
        """The LlamaIndex vector store of a collection (created on first write)."""
        if collection not in self._vector_stores:
            self._vector_stores[collection] = QdrantVectorStore(
                collection_name=collection, client=self.client, batch_size=256
            )
        return self._vector_stores[collection]

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
        self._vector_stores.pop(collection, None)
        return self.call(self.client.delete_collection, collection)

    # --- nodes -------------------------------------------------------------------------------
    def add(self, collection: str, nodes: list[BaseNode]) -> None:
        vs = self.vector_store(collection)
        self.call(vs.add, nodes)

    def query(self, collection: str, query: VectorStoreQuery) -> VectorStoreQueryResult:
        return self.call(self.vector_store(collection).query, query)

    async def aquery(self, collection: str, query: VectorStoreQuery) -> VectorStoreQueryResult:
        return await self.acall(self.vector_store(collection).query, query)

    def delete_document(self, collection: str, doc_id: str) -> None:
        """Delete every chunk of one document."""
        flt = rest.Filter(
            must=[rest.FieldCondition(key="doc_id", match=rest.MatchValue(value=doc_id))]
        )
        self.call(
            self.client.delete,
            collection_name=collection,
            points_selector=rest.FilterSelector(filter=flt),
        )

    def documents(self, collection: str) -> dict[str, DocumentRecord]:
        """Every document of a collection with its content hash and chunk count."""
        if not self.exists(collection):
            return {}
        found: dict[str, DocumentRecord] = {}
        counts: dict[str, int] = {}
        for payload in self._scroll_payloads(collection, list(DOC_KEYS)):
            doc_id = str(payload.get("doc_id", ""))
            counts[doc_id] = counts.get(doc_id, 0) + 1
            if doc_id not in found:
                found[doc_id] = DocumentRecord(
                    doc_id=doc_id,
                    content_hash=str(payload.get("content_hash", "")),
                    file_path=str(payload.get("file_path", "")),
                    file_name=str(payload.get("file_name", "")),
                    title=str(payload.get("title", "")),
                    chunks=0,
                )
        return {k: DocumentRecord(**{**_asdict(v), "chunks": counts[k]}) for k, v in found.items()}

    def _scroll_payloads(self, collection: str, keys: list[str]) -> Iterator[dict[str, Any]]:
        offset: Any = None
        while True:
            points, offset = self.call(
                self.client.scroll,
                collection_name=collection,
                limit=1024,
                offset=offset,
                with_payload=rest.PayloadSelectorInclude(include=keys),
                with_vectors=False,
            )
            for point in points:
                yield dict(point.payload or {})
            if offset is None:
                return


def _asdict(record: DocumentRecord) -> dict[str, Any]:
    return {k: getattr(record, k) for k in DocumentRecord.__slots__}
