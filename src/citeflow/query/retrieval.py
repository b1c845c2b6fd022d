"""Retrieval: search the collection (dense, BM25 or both fused) and return scored chunks.

`Retriever.asearch` gives the fused ranking itself (what the evaluation scores).
`Retriever.aretrieve` gives the same chunks in the same order, each scored by its *relevance*: the
cosine similarity between the query and the chunk embeddings, also for chunks that only BM25
found. Rankings from fusion have no absolute meaning, while the similarity does: the score
grader's threshold, the fallback to the best hits and the relevance shown to users stay calibrated
whatever the fusion. (In ``keyword`` mode, where nothing is embedded, the score is BM25's.)
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import NodeWithScore

from citeflow.bm25 import BM25Encoder
from citeflow.query.fusion import FusionMode, fuse
from citeflow.settings import RetrievalMode, Settings
from citeflow.store import Hits, Store, Vector


def _async_native(embed_model: BaseEmbedding) -> bool:
    """Whether the embedder's async API is really non-blocking (HTTP providers, batchers)."""
    if getattr(embed_model, "async_native", False):  # e.g. query.batching.BatchedQueryEmbedding
        return True
    names = {cls.__name__ for cls in type(embed_model).__mro__}
    return "OpenAIEmbedding" in names


@dataclass(frozen=True, slots=True)
class SearchOptions:
    """How to search: which sides, how to fuse them, how many candidates per side."""

    mode: RetrievalMode = "hybrid"
    fusion: FusionMode = "relative"
    dense_weight: float = 0.5
    rrf_k: int = 60
    candidates: int = 100
    """chunks fetched per side before fusion (at least top_k)"""

    @classmethod
    def from_settings(cls, settings: Settings) -> SearchOptions:
        return cls(
            mode=settings.retrieval,
            fusion=settings.fusion,
            dense_weight=settings.dense_weight,
            rrf_k=settings.rrf_k,
            candidates=settings.hybrid_candidates,
        )


@dataclass(slots=True)
class Ranking:
    """One search: chunks best first with their fused score, and their relevance."""

    hits: list[NodeWithScore]
    relevance: dict[str, float] = field(default_factory=dict)
    embed_seconds: float = 0.0

    def scored_by_relevance(self) -> list[NodeWithScore]:
        return [
            NodeWithScore(node=h.node, score=self.relevance.get(h.node.node_id, h.score))
            for h in self.hits
        ]


def _cosines(query: list[float], vectors: Mapping[str, Vector]) -> dict[str, float]:
    """Cosine similarity of the query embedding with each vector, by id."""
    if not vectors:
        return {}
    keys = list(vectors)
    matrix = np.asarray([vectors[k] for k in keys], dtype=np.float32)
    q = np.asarray(query, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1) * float(np.linalg.norm(q))
    dots = matrix @ q
    sims = np.divide(dots, norms, out=np.zeros_like(dots), where=norms > 0)
    return dict(zip(keys, (float(x) for x in sims), strict=True))


class Retriever:
    """Top-k retrieval from one collection."""

    def __init__(
        self,
        store: Store,
        embed_model: BaseEmbedding,
        *,
        collection: str,
        top_k: int,
        options: SearchOptions | None = None,
        encoder: BM25Encoder | None = None,
    ) -> None:
        self.store = store
        self.embed_model = embed_model
        self.collection = collection
        self.top_k = top_k
        self.options = options or SearchOptions()
        self.encoder = encoder or BM25Encoder()
        self._native = _async_native(embed_model)

    @property
    def mode(self) -> RetrievalMode:
        return self.options.mode

    async def embed_query(self, query: str) -> list[float]:
        if self._native:
            return await self.embed_model.aget_query_embedding(query)
        return await asyncio.to_thread(self.embed_model.get_query_embedding, query)

    def _fetch(self, top_k: int) -> int:
        if self.mode == "hybrid":
            return max(top_k, self.options.candidates)
        return top_k

    def _search(self, embedding: list[float] | None, query: str, top_k: int) -> Ranking:
        """Search (on a worker thread) with an embedding already computed, or none."""
        sparse = self.encoder.encode_query(query) if self.mode != "dense" else None
        fetch = self._fetch(top_k)
        hits = self.store.search(
            self.collection,
            dense=embedding,
            sparse=sparse,
            limit=fetch,
            sparse_vectors=self.mode == "hybrid",
        )
        return self._rank(hits, embedding, top_k)

    def _rank(self, hits: Hits, embedding: list[float] | None, top_k: int) -> Ranking:
        """Order the candidates, then load the chosen chunks (the only payloads read)."""
        relevance = {c.id: c.score for c in hits.dense}
        if self.mode == "dense" or (self.mode == "hybrid" and not hits.sparse):
            ranked = [(c.id, c.score) for c in hits.dense[:top_k]]
        elif self.mode == "keyword":
            ranked = [(c.id, c.score) for c in hits.sparse[:top_k]]
            relevance = dict(ranked)
        else:
            ranked = fuse(
                hits.dense,
                hits.sparse,
                mode=self.options.fusion,
                top_k=top_k,
                dense_weight=self.options.dense_weight,
                rrf_k=self.options.rrf_k,
            )
            keyword_only = {
                key: hits.vectors[key]
                for key, _ in ranked
                if key not in relevance and key in hits.vectors
            }
            if embedding is not None:
                relevance.update(_cosines(embedding, keyword_only))
        nodes = self.store.nodes(self.collection, [key for key, _ in ranked])
        return Ranking(
            [NodeWithScore(node=nodes[key], score=score) for key, score in ranked if key in nodes],
            {key: relevance[key] for key, _ in ranked if key in relevance},
        )

    def _embed_and_search(self, query: str, top_k: int) -> Ranking:
        started = time.perf_counter()
        embedding = self.embed_model.get_query_embedding(query) if self.mode != "keyword" else None
        embed_seconds = time.perf_counter() - started
        ranking = self._search(embedding, query, top_k)
        ranking.embed_seconds = embed_seconds
        return ranking

    async def asearch(self, query: str, top_k: int | None = None) -> Ranking:
        """The ``top_k`` best chunks for ``query`` in fused order, with their relevance.

        An in-process embedder and the store share one worker-thread hop; an HTTP embedder is
        awaited natively first.
        """
        k = top_k or self.top_k
        try:
            if self._native and self.mode != "keyword":
                started = time.perf_counter()
                embedding = await self.embed_model.aget_query_embedding(query)
                embed_seconds = time.perf_counter() - started
                ranking = await asyncio.to_thread(self._search, embedding, query, k)
                ranking.embed_seconds = embed_seconds
            else:
                ranking = await asyncio.to_thread(self._embed_and_search, query, k)
        except Exception:
            await self.check()  # raises the clear error when the collection is missing
            raise
        return ranking

    async def aretrieve(self, query: str, top_k: int | None = None) -> list[NodeWithScore]:
        """The ``top_k`` best chunks for ``query``, each scored by its relevance."""
        nodes, _ = await self.aretrieve_timed(query, top_k)
        return nodes

    async def aretrieve_timed(
        self, query: str, top_k: int | None = None
    ) -> tuple[list[NodeWithScore], float]:
        """`aretrieve`, plus the seconds spent in the embedder."""
        ranking = await self.asearch(query, top_k)
        return ranking.scored_by_relevance(), ranking.embed_seconds

    async def check(self) -> int:
        """The collection's chunk count; a clear error when it is missing or empty."""
        return await asyncio.to_thread(self.store.require, self.collection)
