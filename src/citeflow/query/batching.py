"""Micro-batching of query embeddings: concurrent questions share one encoder call.

An in-process encoder (MiniLM through sentence-transformers) embeds one short question in a few
milliseconds, most of it fixed cost per call; a batch of 64 costs little more than a few single
calls. Under load, one call per request on worker threads also fights the event loop for the GIL
and the cores. `QueryBatcher` runs the encoder on one thread of its own and hands it every query
that is waiting: whatever arrived while the previous batch ran is the next batch, so a lone query
is encoded at once, alone, and a burst of queries is encoded in a few calls.

`BatchedQueryEmbedding` wraps an embedding model so that its query embeddings, sync or async, go
through a batcher; text embeddings (ingestion) go straight to the wrapped model. Its async API
never blocks the event loop (`async_native`), so the retriever awaits it instead of spending a
worker thread per query.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, ClassVar

from llama_index.core.base.embeddings.base import BaseEmbedding, Embedding
from pydantic import PrivateAttr

log = logging.getLogger("citeflow.query")

#: Embeds a list of queries, returning one vector per query, in order.
BatchFunction = Callable[[list[str]], Sequence[Sequence[float]]]

_STOP = object()


@dataclass(frozen=True, slots=True)
class BatcherStats:
    """What a batcher has done: encoder calls, queries embedded, the largest batch."""

    batches: int = 0
    queries: int = 0
    largest: int = 0


class QueryBatcher:
    """Embeds queries on one worker thread, each call taking every query that is waiting.

    Args:
        embed_batch: embeds a list of queries (one vector per query, in order).
        max_batch: the most queries per call. Past 16, MiniLM on one CPU thread costs no
            less per question, so bigger batches only make their first questions wait.

    The thread (``citeflow-embed``) starts with the first query and stops at `close`. A failed
    batch is retried query by query, so a failure reaches only the callers whose query fails. A
    query whose caller has gone (its future cancelled) before its batch starts is skipped.
    """

    def __init__(self, embed_batch: BatchFunction, *, max_batch: int = 16) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        self.embed_batch = embed_batch
        self.max_batch = max_batch
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._batches = 0
        self._queries = 0
        self._largest = 0

    @property
    def stats(self) -> BatcherStats:
        return BatcherStats(self._batches, self._queries, self._largest)

    # --- callers -----------------------------------------------------------------------------
    def submit(self, query: str) -> Future[list[float]]:
        """A future of ``query``'s embedding.

        Raises:
            RuntimeError: the batcher is closed.
        """
        future: Future[list[float]] = Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("the query batcher is closed")
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="citeflow-embed", daemon=True
                )
                self._thread.start()
            self._queue.put((query, future))
        return future

    def embed(self, query: str) -> list[float]:
        """``query``'s embedding (blocks until its batch is done)."""
        return self.submit(query).result()

    async def aembed(self, query: str) -> list[float]:
        """``query``'s embedding, awaited without blocking the event loop.

        Cancelling the caller before the batch starts drops the query from it.
        """
        return await asyncio.wrap_future(self.submit(query))

    def close(self, timeout: float = 10.0) -> None:
        """Finish the queries already submitted, then stop the thread (idempotent)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            thread = self._thread
            if thread is not None:
                self._queue.put(_STOP)
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    # --- the worker thread -------------------------------------------------------------------
    def _run(self) -> None:
        stopping = False
        while not stopping:
            item = self._queue.get()
            if item is _STOP:
                return
            batch = [item]
            while len(batch) < self.max_batch:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is _STOP:
                    stopping = True
                    break
                batch.append(item)
            live = [(q, f) for q, f in batch if f.set_running_or_notify_cancel()]
            if live:
                self._embed(live)

    def _embed(self, batch: list[tuple[str, Future[list[float]]]]) -> None:
        self._batches += 1
        self._queries += len(batch)
        self._largest = max(self._largest, len(batch))
        try:
            vectors = self._call([q for q, _ in batch])
        except Exception as exc:
            if len(batch) == 1:
                batch[0][1].set_exception(exc)
                return
            log.warning("batch of %d query embeddings failed; embedding one by one", len(batch))
            for query, future in batch:
                try:
                    future.set_result(self._call([query])[0])
                except Exception as one:
                    future.set_exception(one)
            return
        for (_, future), vector in zip(batch, vectors, strict=True):
            future.set_result(vector)

    def _call(self, queries: list[str]) -> list[list[float]]:
        vectors = [list(v) for v in self.embed_batch(queries)]
        if len(vectors) != len(queries):
            raise RuntimeError(
                f"the embedder returned {len(vectors)} vectors for {len(queries)} queries"
            )
        return vectors


def query_batch_function(embed_model: BaseEmbedding) -> BatchFunction:
    """One call embedding many queries with ``embed_model``.

    An embedder with an ``embed_query_batch`` method (the local MiniLM on ONNX Runtime,
    `citeflow.providers.onnx_embedding`, or on torch, `citeflow.providers.torch_embedding`)
    encodes them as one batch, with the same query prompt as a single query; any other embedder
    embeds them one by one.
    """
    embed_query_batch = getattr(embed_model, "embed_query_batch", None)
    if callable(embed_query_batch):
        batched: BatchFunction = embed_query_batch
        return batched

    def one_by_one(queries: list[str]) -> list[list[float]]:
        return [embed_model.get_query_embedding(q) for q in queries]

    return one_by_one


def is_async_native(embed_model: BaseEmbedding) -> bool:
    """Whether an embedder's async API is really non-blocking (HTTP providers, batchers)."""
    if getattr(embed_model, "async_native", False):
        return True
    return "OpenAIEmbedding" in {cls.__name__ for cls in type(embed_model).__mro__}


async def embed_query(embed_model: BaseEmbedding, query: str) -> Embedding:
    """``query``'s embedding: awaited from an embedder whose async API does not block
    (`is_async_native`), else computed on a worker thread (the event loop stays free)."""
    if is_async_native(embed_model):
        return await embed_model.aget_query_embedding(query)
    return await asyncio.to_thread(embed_model.get_query_embedding, query)


class BatchedQueryEmbedding(BaseEmbedding):
    """An embedding model whose query embeddings go through a `QueryBatcher`.

    Text embeddings (ingestion) go straight to the wrapped model. `close` stops the batcher.
    """

    #: The async query API never blocks the event loop (see `is_async_native`).
    async_native: ClassVar[bool] = True

    _inner: BaseEmbedding = PrivateAttr()
    _batcher: QueryBatcher = PrivateAttr()

    def __init__(self, inner: BaseEmbedding, **kwargs: Any) -> None:
        kwargs.setdefault("model_name", inner.model_name)
        kwargs.setdefault("embed_batch_size", inner.embed_batch_size)
        kwargs.setdefault("callback_manager", inner.callback_manager)
        super().__init__(**kwargs)
        self._inner = inner
        self._batcher = QueryBatcher(query_batch_function(inner))

    @classmethod
    def class_name(cls) -> str:
        return "CiteflowBatchedQueryEmbedding"

    @property
    def inner(self) -> BaseEmbedding:
        """The wrapped embedding model."""
        return self._inner

    @property
    def batcher(self) -> QueryBatcher:
        return self._batcher

    def close(self) -> None:
        """Stop the batcher's thread (after the queries already submitted)."""
        self._batcher.close()

    def _get_query_embedding(self, query: str) -> Embedding:
        return self._batcher.embed(query)

    async def _aget_query_embedding(self, query: str) -> Embedding:
        return await self._batcher.aembed(query)

    def _get_text_embedding(self, text: str) -> Embedding:
        return self._inner.get_text_embedding(text)

    def _get_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        return self._inner.get_text_embedding_batch(texts)

    async def _aget_text_embedding(self, text: str) -> Embedding:
        return await self._inner.aget_text_embedding(text)

    async def _aget_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        return await self._inner.aget_text_embedding_batch(texts)


def batch_queries(embed_model: BaseEmbedding) -> BaseEmbedding:
    """``embed_model`` with batched query embeddings, if it runs in this process.

    HTTP embedders (OpenAI, Azure) are returned as they are: their requests already run
    concurrently, and their async API does not block.
    """
    if is_async_native(embed_model):
        return embed_model
    return BatchedQueryEmbedding(embed_model)
