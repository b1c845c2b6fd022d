"""Retrieval: embed the query, search the collection, return scored nodes (best first)."""

from __future__ import annotations

import asyncio
import time

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import NodeWithScore
from llama_index.core.vector_stores.types import VectorStoreQuery, VectorStoreQueryResult

from citeflow.store import Store


def _async_native(embed_model: BaseEmbedding) -> bool:
    """Whether the embedder's async API is really non-blocking (HTTP providers)."""
    names = {cls.__name__ for cls in type(embed_model).__mro__}
    return "OpenAIEmbedding" in names


class Retriever:
    """Dense top-k retrieval from one collection."""

    def __init__(
        self, store: Store, embed_model: BaseEmbedding, *, collection: str, top_k: int
    ) -> None:
        self.store = store
        self.embed_model = embed_model
        self.collection = collection
        self.top_k = top_k
        self._native = _async_native(embed_model)

    async def embed_query(self, query: str) -> list[float]:
        if self._native:
            return await self.embed_model.aget_query_embedding(query)
        return await asyncio.to_thread(self.embed_model.get_query_embedding, query)

    def _search(self, embedding: list[float], top_k: int) -> VectorStoreQueryResult:
        query = VectorStoreQuery(query_embedding=embedding, similarity_top_k=top_k)
        return self.store.query(self.collection, query)

    def _embed_and_search(self, query: str, top_k: int) -> tuple[VectorStoreQueryResult, float]:
        started = time.perf_counter()
        embedding = self.embed_model.get_query_embedding(query)
        embed_seconds = time.perf_counter() - started
        return self._search(embedding, top_k), embed_seconds

    async def aretrieve(self, query: str, top_k: int | None = None) -> list[NodeWithScore]:
        """The ``top_k`` chunks most similar to ``query``."""
        nodes, _ = await self.aretrieve_timed(query, top_k)
        return nodes

    async def aretrieve_timed(
        self, query: str, top_k: int | None = None
    ) -> tuple[list[NodeWithScore], float]:
        """`aretrieve`, plus the seconds spent in the embedder.

        An in-process embedder and the store share one worker-thread hop; an HTTP embedder is
        awaited natively first.
        """
        k = top_k or self.top_k
        try:
            if self._native:
                started = time.perf_counter()
                embedding = await self.embed_model.aget_query_embedding(query)
                embed_seconds = time.perf_counter() - started
                result = await asyncio.to_thread(self._search, embedding, k)
            else:
                result, embed_seconds = await asyncio.to_thread(self._embed_and_search, query, k)
        except Exception:
            await self.check()  # raises the clear error when the collection is missing
            raise
        nodes = result.nodes or []
        scores = result.similarities or [0.0] * len(nodes)
        hits = [NodeWithScore(node=n, score=s) for n, s in zip(nodes, scores, strict=False)]
        return hits, embed_seconds

    async def check(self) -> int:
        """The collection's chunk count; a clear error when it is missing or empty."""
        return await asyncio.to_thread(self.store.require, self.collection)
