"""A collection as a LlamaIndex vector store, for notebooks (`KnowledgeBase.as_index`).

LlamaIndex's ``QdrantVectorStore`` speaks qdrant-client only, so it cannot open the embedded
engine; `StoreVectorStore` puts citeflow's `Store` behind LlamaIndex's vector-store interface
instead, on either engine. Searches are dense (cosine) and, like citeflow's own, leave out the
chunks of documents whose write has not finished. Writes go through citeflow's ingestion
(``citeflow ingest`` or `KnowledgeBase.ingest`), which keeps documents' versions and BM25 vectors
in step: `add` refuses, saying so.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.schema import BaseNode
from llama_index.core.vector_stores.types import (
    BasePydanticVectorStore,
    VectorStoreQuery,
    VectorStoreQueryResult,
)

from citeflow.store.store import Store


class StoreVectorStore(BasePydanticVectorStore):
    """One collection of a `Store`, dense search only (see the module doc)."""

    stores_text: bool = True
    collection: str
    _store: Store = PrivateAttr()

    def __init__(self, store: Store, collection: str) -> None:
        super().__init__(collection=collection)  # type: ignore[call-arg]
        self._store = store

    @property
    def client(self) -> Any:
        return self._store

    def add(self, nodes: Sequence[BaseNode], **kwargs: Any) -> list[str]:
        raise NotImplementedError(
            "add documents with `citeflow ingest PATH` or KnowledgeBase.ingest(paths), which "
            "keep their versions and keyword vectors in step"
        )

    def delete(self, ref_doc_id: str, **delete_kwargs: Any) -> None:
        self._store.delete_document(self.collection, ref_doc_id)

    def query(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        if query.query_embedding is None:
            raise ValueError("StoreVectorStore searches by embedding: give a query_embedding")
        hits = self._store.search(
            self.collection, dense=query.query_embedding, limit=query.similarity_top_k
        )
        found = self._store.nodes(self.collection, [c.id for c in hits.dense])
        kept = [c for c in hits.dense if c.id in found]
        return VectorStoreQueryResult(
            nodes=[found[c.id] for c in kept],
            similarities=[c.score for c in kept],
            ids=[c.id for c in kept],
        )
