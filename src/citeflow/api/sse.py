"""SSE for the chat stream: framing, batching of ready events into one write, the response.

What goes out: ``data: {json}\n\n`` lines (one per `citeflow.api.chat_stream` chunk),
``: keep-alive`` comments during silent phases, an ``{"error": {...}}`` data line when the run
fails, and always ``data: [DONE]`` last, in the same write as the chunks before it.

The framing is two f-strings rather than sse-starlette's ``ServerSentEvent``: its ``encode``
is strict UTF-8, which raises on the lone surrogates `encode` escapes on purpose (a provider's
answer can hold half of a pair; `tests/test_server_routes.py` sends one), and its
``EventSourceResponse`` sends each event as its own write with a separate ping task, where this
module batches the events that are ready together (`ready_batches`, `STATUS_LINGER`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncGenerator, AsyncIterable, Callable, Iterable
from typing import Any, TypeVar

import anyio
from pydantic import BaseModel
from starlette.responses import JSONResponse, StreamingResponse
from starlette.types import Receive, Scope, Send

from citeflow.api.chat_stream import ChatStream
from citeflow.api.errors import describe, log_failure
from citeflow.event_stream import RunItem
from citeflow.events import AnswerDeltaEvent
from citeflow.result import CitedResponse

log = logging.getLogger("citeflow.server")

T = TypeVar("T")

KEEPALIVE = ": keep-alive\n\n"
DONE = "data: [DONE]\n\n"


def to_json(payload: BaseModel | dict[str, Any]) -> str:
    """Compact JSON of a chunk or body (a model's fields that were set, in its field order)."""
    data = payload.model_dump(exclude_unset=True) if isinstance(payload, BaseModel) else payload
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def sse(payload: BaseModel | dict[str, Any]) -> str:
    """One SSE data line."""
    return f"data: {to_json(payload)}\n\n"


def sse_lines(chunks: Iterable[BaseModel]) -> list[str]:
    return [sse(chunk) for chunk in chunks]


def encode(text: str) -> bytes:
    """UTF-8 of JSON text (SSE lines, a completion), a lone surrogate as its JSON escape.

    A provider's answer can hold a lone surrogate (a pair split across two streamed chunks,
    each decoded alone); strict UTF-8 would raise mid-answer, after HTTP 200. Every character
    `json.dumps` leaves unescaped is inside a string literal, so ``\\udXXX`` there is the JSON
    escape of that very code unit: nothing is lost, and a client joining the two halves gets the
    character back.
    """
    return text.encode("utf-8", "backslashreplace")


class CompletionResponse(JSONResponse):
    """A ``chat.completion`` body, rendered like `sse` and encoded by `encode`."""

    def render(self, content: Any) -> bytes:
        return encode(to_json(content))


# --- batching ------------------------------------------------------------------------------------
_ITEM, _END, _ERROR, _TICK = range(4)


async def ready_batches(
    items: AsyncIterable[T],
    interval: float,
    *,
    hold: Callable[[T], bool] | None = None,
    linger: float = 0.0,
) -> AsyncGenerator[list[T] | None, None]:
    """``items`` in batches of those that are ready together; ``None`` after ``interval`` silent
    seconds.

    One task pumps ``items`` into a queue for the whole stream (not a task and a wait per item),
    and whatever has arrived by the time the consumer looks is taken at once: the workflow writes
    several events in a row (a status, the sources, the next status; the last status and the
    result), which then go out as one socket write. A batch whose items may all wait (``hold``)
    waits up to ``linger`` seconds for more: the statuses of one answer's first milliseconds
    (searching, grading, citing, writing) go out together, while an item that may not wait
    (answer text) goes out at once, with whatever was held. An exception from ``items`` is raised
    after the items before it. Closing this generator cancels the pump, which closes ``items``
    (so that a disconnect cancels the workflow run behind it).
    """
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[int, Any]] = asyncio.Queue()
    iterator = aiter(items)

    async def pump() -> None:
        try:
            async for item in iterator:
                queue.put_nowait((_ITEM, item))
            queue.put_nowait((_END, None))
        except Exception as exc:
            queue.put_nowait((_ERROR, exc))
        except BaseException as exc:  # a cancellation from elsewhere ends the stream too
            queue.put_nowait((_ERROR, exc))
            raise

    pumping = asyncio.ensure_future(pump())
    held: list[T] = []
    deadline = 0.0  # when the held items must go out
    try:
        while True:
            if queue.empty():
                wait = max(0.0, deadline - loop.time()) if held else interval
                timer = loop.call_later(wait, queue.put_nowait, (_TICK, None))
                entries = [await queue.get()]
                timer.cancel()
            else:
                entries = []
            while not queue.empty():
                entries.append(queue.get_nowait())
            batch, held = held, []
            fresh = not batch  # nothing was held: a batch that may wait starts the clock
            for kind, value in entries:
                if kind == _ITEM:
                    batch.append(value)
                    continue
                if kind == _TICK:
                    continue
                if batch:
                    yield batch
                if kind == _ERROR:
                    raise value
                return
            if batch and hold is not None and linger > 0 and all(map(hold, batch)):
                if fresh:
                    deadline = loop.time() + linger
                if loop.time() < deadline:
                    held = batch
                    continue
            if batch:
                yield batch
            elif any(kind == _TICK for kind, _ in entries):
                yield None
    finally:
        with anyio.CancelScope(shield=True):
            if not pumping.done():
                pumping.cancel()
                with contextlib.suppress(BaseException):  # the run is being abandoned
                    await pumping
            closer = getattr(iterator, "aclose", None)
            if closer is not None:
                await closer()


#: how long a status may wait to share a socket write with the next events: each write is a
#: system call and a wake-up of the client (9% of the server's GIL time at 64 streams)
STATUS_LINGER = 0.02


def _may_wait(item: RunItem) -> bool:
    return not isinstance(item, AnswerDeltaEvent | CitedResponse)


async def sse_stream(
    items: AsyncIterable[RunItem],
    stream: ChatStream,
    *,
    keepalive: float,
) -> AsyncGenerator[str, None]:
    """The SSE lines of a run: chunks, keep-alives, an error line on failure, ``[DONE]`` last.

    Events other than answer text (statuses, sources) wait up to `STATUS_LINGER` seconds to
    share a write with the events after them (`ready_batches`); answer text never waits.

    ``items`` yields the run's stream events, then its `CitedResponse`; an exception from it
    (e.g. an `UpstreamError`) ends the stream with an error line. Each yielded string holds the
    chunks of all the events that were ready together (one socket write); the last one ends
    with ``[DONE]``.
    """
    lines = sse_lines(stream.before_stream())
    try:
        batched = ready_batches(items, keepalive, hold=_may_wait, linger=STATUS_LINGER)
        async with contextlib.aclosing(batched) as batches:
            async for batch in batches:
                if batch is None:
                    lines.append(KEEPALIVE)
                    finished = False
                else:
                    for item in batch:
                        lines += sse_lines(stream.handle(item))
                    finished = isinstance(batch[-1], CitedResponse)
                if lines and not finished:  # the result's chunks go out with [DONE]
                    yield "".join(lines)
                    lines = []
    except Exception as exc:
        status, _ = describe(exc)
        if status == 500:
            log.warning("stream failed: %s", exc, exc_info=True)
        else:
            log_failure(exc, "stream")
        lines += sse_lines(stream.on_error(exc))
    lines.append(DONE)
    yield "".join(lines)


class EventStreamResponse(StreamingResponse):
    """An SSE response that always closes its stream, so a disconnect cancels the run, then
    calls ``release`` (a chat completion's `citeflow.api.limits.Slot`: held until the end).

    Starlette cancels the response when the client goes away; if that happens while a chunk is
    being sent, the stream generator would only be closed when garbage-collected. Closing it here
    runs its clean-up at once.
    """

    media_type = "text/event-stream"

    def __init__(
        self, content: AsyncGenerator[str, None], *, release: Callable[[], None] = lambda: None
    ) -> None:
        super().__init__(content, headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        self._stream = content
        self._release = release

    async def stream_response(self, send: Send) -> None:
        """Starlette's, except that the chunk ending with ``[DONE]`` ends the response too (one
        write for both instead of an empty last one)."""
        await send(
            {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
        )
        async for chunk in self._stream:
            last = chunk.endswith(DONE)
            await send({"type": "http.response.body", "body": encode(chunk), "more_body": not last})
            if last:
                return
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            try:
                with anyio.CancelScope(shield=True):
                    await self._stream.aclose()
            finally:
                self._release()
