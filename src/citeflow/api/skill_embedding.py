"""Embedding a skill call's texts with the engine's embedder, each vector handed on as it exists.

* an HTTP embedder (OpenAI, Azure) gets the call's batches (``CITEFLOW_EMBED_BATCH_SIZE``)
  concurrently through its async API, as `BaseEmbedding.aget_text_embedding_batch` sends them;
* an in-process one computes on a worker thread, one batch at a time (the event loop stays
  free for other requests), the texts sorted by length as ingestion sorts them (a batch pads
  to its longest text); while a batch is embedded, the vectors of the previous one are
  rendered, so writing the JSON costs no embedding time;
* queries (``input_type=query``) are embedded one by one with the embedder's query API.

A text the provider refuses (HTTP 400, 413, 422: e.g. over its token limit) is that record's
error; a refused batch is sent again record by record. Any other failure is an `UpstreamError`
(a rate limit preferred, so that the client retries after ``Retry-After``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Iterable, Sequence
from typing import Any, Literal

import openai
from llama_index.core.base.embeddings.base import BaseEmbedding

from citeflow.api.skill_format import Record, errors_json, vector_json
from citeflow.errors import CiteflowError, UpstreamError, UpstreamRateLimitError
from citeflow.providers.embeddings import embeds_remotely
from citeflow.providers.upstream_errors import as_upstream_error
from citeflow.query.batching import embed_query

log = logging.getLogger("citeflow.server")

#: Vectors rendered on the event loop up to this many floats per batch, in a worker thread past
#: it (a batch of 64 vectors of 1,536 floats takes ~50 ms to write as JSON).
RENDER_INLINE_FLOATS = 16 * 1024
#: Query embeddings in flight at once for one call (``input_type=query``).
QUERY_CONCURRENCY = 16
#: Upstream statuses that mean "this input is refused", not "the provider failed".
REFUSED_INPUT = (400, 413, 422)

InputType = Literal["document", "query"]

#: Called with record positions and their vectors, as each batch is embedded.
Sink = Callable[[Sequence[int], Sequence[Sequence[float]]], None]


def _refused(exc: BaseException) -> bool:
    """Whether a provider's error refuses the input (a bad text), not the call."""
    return isinstance(exc, openai.APIStatusError) and exc.status_code in REFUSED_INPUT


def _upstream(exc: BaseException) -> UpstreamError:
    return as_upstream_error(exc, what="embedding")


def _checked(batch: Sequence[int], vectors: Sequence[Sequence[float]]) -> None:
    """Raise an `UpstreamError` unless the embedder returned one vector per text."""
    if len(vectors) != len(batch):
        raise UpstreamError(
            f"the embedder returned {len(vectors)} vectors for {len(batch)} texts",
            public="the embedding provider failed; retry later, or ask the server's operator "
            "to check the server log",
        )


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def _first_failure(group: BaseExceptionGroup[Any]) -> BaseException:
    """The failure a call answers with: a rate limit if any (the client retries it after
    ``Retry-After``), else the first (anything but a `CiteflowError` as an `UpstreamError`)."""
    leaves = _leaves(group)
    first = next((e for e in leaves if isinstance(e, UpstreamRateLimitError)), leaves[0])
    return first if isinstance(first, CiteflowError) else _upstream(first)


async def _together(calls: Iterable[Coroutine[Any, Any, None]]) -> None:
    """Run ``calls`` concurrently; if any fails, the others are cancelled and the failure the
    call answers with (`_first_failure`) is raised."""
    try:
        async with asyncio.TaskGroup() as group:
            for call in calls:
                group.create_task(call)
    except BaseExceptionGroup as failed:
        raise _first_failure(failed) from None


class SkillEmbedding:
    """Embeds a call's texts with the engine's embedder.

    ``refused`` collects, by position, the texts the provider refused (HTTP 400): those records'
    errors. Any other failure is raised as an `UpstreamError`.
    """

    def __init__(self, embed_model: BaseEmbedding) -> None:
        self.embed_model = embed_model
        self.refused: dict[int, str] = {}

    async def documents(self, texts: dict[int, str], sink: Sink) -> None:
        """Embed ``texts`` (by record position) as documents, in batches."""
        if not texts:
            return
        size = max(1, self.embed_model.embed_batch_size)
        order = sorted(texts, key=lambda i: len(texts[i]))  # a batch pads to its longest text
        batches = [order[i : i + size] for i in range(0, len(order), size)]
        if embeds_remotely(self.embed_model):  # all batches at once through the async API
            await _together(self._remote_batch(texts, batch, sink) for batch in batches)
        else:
            await self._local(texts, batches, sink)

    async def _local(self, texts: dict[int, str], batches: list[list[int]], sink: Sink) -> None:
        """One batch at a time on a worker thread; the previous one rendered meanwhile."""
        embed = self.embed_model.get_text_embedding_batch

        def start(batch: list[int]) -> asyncio.Future[list[list[float]]]:
            return asyncio.ensure_future(asyncio.to_thread(embed, [texts[i] for i in batch]))

        pending = start(batches[0])
        try:
            for k, batch in enumerate(batches):
                try:
                    vectors = await pending
                except Exception as exc:
                    raise _upstream(exc) from exc
                _checked(batch, vectors)
                if k + 1 < len(batches):
                    pending = start(batches[k + 1])
                sink(batch, vectors)
        finally:
            if not pending.done():
                pending.cancel()  # its thread finishes the batch; no next batch starts
                await asyncio.gather(pending, return_exceptions=True)

    async def _remote_batch(self, texts: dict[int, str], batch: list[int], sink: Sink) -> None:
        """One batch through the async API, rendered when it arrives (a refused batch: one
        by one)."""
        try:
            vectors = await self.embed_model.aget_text_embedding_batch([texts[i] for i in batch])
        except Exception as exc:
            if not _refused(exc):
                raise _upstream(exc) from exc
            if len(batch) == 1:
                self._refuse(batch[0], exc)
                return
            log.info("the embedding provider refused a batch of %d; one by one", len(batch))
            await _together(self._remote_batch(texts, [i], sink) for i in batch)
            return
        _checked(batch, vectors)
        if sum(len(v) for v in vectors) > RENDER_INLINE_FLOATS:  # many floats: off the loop
            await asyncio.to_thread(sink, batch, vectors)
        else:
            sink(batch, vectors)

    def _refuse(self, position: int, exc: BaseException) -> None:
        log.warning(
            "the embedding provider refused record %d: %s", position, _upstream(exc).message
        )
        status = exc.status_code if isinstance(exc, openai.APIStatusError) else 400
        self.refused[position] = (
            f"the embedding provider refused this text (HTTP {status}); it may be over the "
            "model's token limit: split it into shorter texts"
        )

    async def queries(self, texts: dict[int, str], sink: Sink) -> None:
        """Embed ``texts`` one by one as queries (what citeflow's retrieval does with a
        question), at most `QUERY_CONCURRENCY` at a time."""
        limit = asyncio.Semaphore(QUERY_CONCURRENCY)

        async def one(position: int, text: str) -> None:
            async with limit:
                try:
                    vector = await embed_query(self.embed_model, text)
                except Exception as exc:
                    if embeds_remotely(self.embed_model) and _refused(exc):
                        self._refuse(position, exc)
                        return
                    raise _upstream(exc) from exc
            sink([position], [vector])

        await _together(one(position, text) for position, text in texts.items())


async def embed_call(
    records: Sequence[Record], embed_model: BaseEmbedding, input_type: InputType
) -> list[str]:
    """Each record's rendered answer, in order: its vector or its errors."""
    parts: list[str | None] = [None] * len(records)
    texts: dict[int, str] = {}
    for position, record in enumerate(records):
        if record.text is None:
            parts[position] = errors_json(record.record_id, record.errors)
        else:
            texts[position] = record.text

    def sink(positions: Sequence[int], vectors: Sequence[Sequence[float]]) -> None:
        for position, vector in zip(positions, vectors, strict=True):
            parts[position] = vector_json(records[position].record_id, vector)

    embedding = SkillEmbedding(embed_model)
    if input_type == "query":
        await embedding.queries(texts, sink)
    else:
        await embedding.documents(texts, sink)
    for position, message in embedding.refused.items():
        parts[position] = errors_json(records[position].record_id, [message])
    # every position is rendered now: its errors, its vector (`_checked`: one per text) or
    # its refusal; any other outcome raised
    return [part for part in parts if part is not None]
