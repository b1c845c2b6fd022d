"""The wire adapter: workflow events in, OpenAI chunks and Open WebUI events out, as SSE.

This module alone owns the format of what the server sends:

* ``chat.completion.chunk`` objects: a first chunk with the role, one chunk per answer piece, a
  last chunk with ``finish_reason`` and ``usage`` (and, when asked with
  ``stream_options.include_usage``, OpenAI's separate usage chunk);
* Open WebUI events in chunks with ``"choices": []`` and a top-level ``"event"``:
  ``{"type": "status", "data": {"description", "done"}}`` for each `StatusEvent`, and
  ``{"type": "source", "data": {"source", "document", "metadata", "distances"}}`` for each
  source the answer cites (see `source_payload`);
* SSE framing: ``data: {json}\\n\\n`` lines, ``: keep-alive`` comments during silent phases, an
  ``{"error": {...}}`` data line when the run fails, and always ``data: [DONE]`` last.

Numbering: Open WebUI numbers sources by order of arrival, so only cited sources are sent, as
1..K in order of first citation, each before the first text that cites it, and the answer's
markers are rewritten to match (`CitationRenumberer`). Each number gets its own key
``<doc_id>#<n>`` (Open WebUI merges sources that share a key), so two passages of one document
are two chips. Non-streaming answers go through the same code (`ChatStream.completion`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterable, Callable, Mapping, Sequence
from typing import Any, TypeVar
from urllib.parse import quote

import anyio
from llama_index.core.schema import NodeWithScore
from starlette.responses import JSONResponse, StreamingResponse
from starlette.types import Receive, Scope, Send
from workflows.events import Event

from citeflow.api.errors import describe, log_failure
from citeflow.api.schemas import SourceData, SourceMetadata, SourceRef
from citeflow.citations.markers import find_markers, renumber
from citeflow.citations.sources import source_text
from citeflow.citations.text import count_tokens
from citeflow.events import AnswerDeltaEvent, CitationSourcesEvent, StatusEvent
from citeflow.result import CitedResponse

log = logging.getLogger("citeflow.server")

T = TypeVar("T")

KEEPALIVE = ": keep-alive\n\n"
DONE = "data: [DONE]\n\n"

#: An unfinished marker at the end of a piece of text: ``[``, ``[1``, ``[Source 1,`` ...
_OPEN_TAIL = re.compile(r"(?:\[[^\[\]\n]{0,30}|\(\s*(?:S[a-z]*\s*[\d\s,;&]*)?)$", re.IGNORECASE)
_MAX_HELD = 40
_URL_KEYS = ("url", "source_url", "link", "original_url")


def sse(payload: Mapping[str, Any]) -> str:
    """One SSE data line."""
    return f"data: {json.dumps(payload, ensure_ascii=False, separators=(',', ':'))}\n\n"


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
        return encode(json.dumps(content, ensure_ascii=False, separators=(",", ":")))


# --- numbering -----------------------------------------------------------------------------------
class CitationRenumberer:
    """Renumbers ``[N]`` markers 1..K in order of first citation, across pieces of text.

    `feed` returns the source numbers cited for the first time (old numbering, in new order) and
    the text that can be released, markers rewritten; an unfinished marker at the end of a piece
    is held back until the next piece completes it. Until the number of sources is known, all
    text is held (numbers cannot be checked yet).
    """

    def __init__(self, source_count: int | None = None) -> None:
        self.mapping: dict[int, int] = {}
        self._count = source_count
        self._pending = ""

    @property
    def known(self) -> bool:
        return self._count is not None

    def set_source_count(self, count: int) -> None:
        self._count = count

    def feed(self, text: str, *, final: bool = False) -> tuple[list[int], str]:
        """Take a piece of text; return (newly cited old numbers, releasable renumbered text)."""
        buffer = self._pending + text
        if self._count is None:
            self._pending = buffer
            return [], ""
        cut = len(buffer)
        if not final:
            tail = _OPEN_TAIL.search(buffer)
            if tail is not None and len(buffer) - tail.start() <= _MAX_HELD:
                cut = tail.start()
        ready, self._pending = buffer[:cut], buffer[cut:]
        markers = find_markers(ready)
        if not markers:
            return [], ready
        new: list[int] = []
        for marker in markers:
            for number in marker.numbers:
                if 1 <= number <= self._count and number not in self.mapping:
                    self.mapping[number] = len(self.mapping) + 1
                    new.append(number)
        return new, renumber(ready, self.mapping)

    def flush(self) -> tuple[list[int], str]:
        """Release whatever is held (end of the answer)."""
        return self.feed("", final=True)


# --- sources -------------------------------------------------------------------------------------
def document_url(base_url: str, collection: str, doc_id: str) -> str:
    """citeflow's URL for a document's original file."""
    path = f"/v1/documents/{quote(collection, safe='')}/{quote(doc_id, safe='')}/file"
    return base_url.rstrip("/") + path


def _original_url(metadata: Mapping[str, Any]) -> str | None:
    for key in _URL_KEYS:
        value = metadata.get(key)
        if isinstance(value, str) and value.startswith(("http://", "https://")):
            return value
    return None


def _page(metadata: Mapping[str, Any]) -> int | None:
    """The 0-based page of a source, when the document has pages."""
    if metadata.get("page_label") in (None, ""):
        return None
    for key in ("page", "page_label"):
        value = metadata.get(key)
        if isinstance(value, int) and value >= 1:
            return value - 1
        if isinstance(value, str) and value.strip().isdigit() and int(value) >= 1:
            return int(value) - 1
    return None


def source_payload(
    source: NodeWithScore,
    number: int,
    *,
    collection: str,
    base_url: str = "",
    link: Callable[[str, str], str] | None = None,
) -> SourceData:
    """The ``data`` of an Open WebUI ``source`` event for cited source ``number``.

    ``metadata[0].source`` (Open WebUI's grouping key) is ``<doc_id>#<number>``: stable for the
    document, unique per number, never a URL. ``source.url`` is the document's original URL when
    its metadata has one, else citeflow's document endpoint (``link``'s URL when given).
    """
    node = source.node
    meta = node.metadata
    doc_id = str(meta.get("doc_id") or meta.get("parent_id") or node.ref_doc_id or node.node_id)
    file_name = str(meta.get("file_name") or meta.get("title") or doc_id)
    page_label = meta.get("page_label")
    name = f"{file_name}, page {page_label}" if page_label not in (None, "") else file_name
    url = _original_url(meta)
    if url is None:
        url = link(collection, doc_id) if link else document_url(base_url, collection, doc_id)
    ref: SourceRef = {"id": doc_id, "name": name, "url": url}
    metadata: SourceMetadata = {"source": f"{doc_id}#{number}", "name": name}
    page = _page(meta)
    if page is not None:
        metadata["page"] = page
    metadata["doc_id"] = doc_id
    metadata["file_name"] = file_name
    return {
        "source": ref,
        "document": [source_text(source).strip()],
        "metadata": [metadata],
        "distances": [round(float(source.score or 0.0), 4)],
    }


def url_citation(payload: SourceData, number: int, at: int = 0) -> dict[str, Any]:
    """Cited source ``number`` as an OpenAI ``url_citation`` annotation: its document's name and
    link. Open WebUI keys an annotation's source by its URL and numbers sources in the order
    they arrive, so the URL carries the number (``#source-N``) to stay unique per number;
    ``start_index``/``end_index`` span the ``[N]`` marker in the answer."""
    base = payload["source"]["url"].split("#", 1)[0]
    marker = f"[{number}]"
    return {
        "type": "url_citation",
        "url_citation": {
            "url": f"{base}#source-{number}",
            "title": payload["source"]["name"],
            "start_index": at,
            "end_index": at + len(marker),
        },
    }


def source_list_markdown(
    result: CitedResponse, mapping: Mapping[int, int], payloads: Sequence[SourceData]
) -> str:
    """A Markdown list of the cited sources, for clients that ignore source events."""
    if not payloads:
        return ""
    quotes: dict[int, str] = {}
    for citation in result.citations:
        new = mapping.get(citation.number)
        if new is not None and citation.quote and new not in quotes:
            quotes[new] = citation.quote
    lines = ["", "", "**Sources**", ""]
    for number, payload in enumerate(payloads, start=1):
        snippet = " ".join(quotes.get(number, payload["document"][0]).split())
        snippet = snippet if len(snippet) <= 110 else snippet[:109].rstrip() + "…"
        lines.append(f"{number}. {payload['source']['name']}: “{snippet}”")
    return "\n".join(lines)


# --- chunks --------------------------------------------------------------------------------------
class ChatStream:
    """Turns one workflow run into chunk objects (`on_event`, `finish`, `fail`).

    Args:
        model: the model id the client asked for.
        collection: the knowledge base (for document URLs).
        base_url: the server's external base URL (for document URLs); empty: relative URLs.
        link: ``(collection, doc_id) -> URL`` of a document (signed links), instead of
            ``base_url`` + the document path.
        source_list: append a Markdown list of the cited sources at the end.
        include_usage: send OpenAI's separate usage chunk (``stream_options.include_usage``).
        prompt_text: the request's message text (for the token estimate).
        annotations: also send each cited source as an OpenAI ``url_citation`` annotation
            (`url_citation`), for clients that drop Open WebUI's events.
    """

    def __init__(
        self,
        *,
        model: str,
        collection: str,
        base_url: str = "",
        link: Callable[[str, str], str] | None = None,
        source_list: bool = False,
        include_usage: bool = False,
        prompt_text: str = "",
        annotations: bool = False,
        completion_id: str | None = None,
        created: int | None = None,
    ) -> None:
        self.id = completion_id or f"chatcmpl-{uuid.uuid4().hex}"
        self.created = created if created is not None else int(time.time())
        self.model = model
        self.collection = collection
        self.base_url = base_url
        self.link = link
        self.source_list = source_list
        self.include_usage = include_usage
        self.prompt_text = prompt_text
        self.annotations = annotations
        self.url_citations: list[dict[str, Any]] = []
        self.sources: list[SourceData] = []
        self.content: list[str] = []
        self._numbers = CitationRenumberer()
        self._nodes: list[NodeWithScore] = []
        self._status_shown = False
        self._status_done = False
        self._fed = False

    # --- chunk shapes ------------------------------------------------------------------------
    def _chunk(self, choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": choices,
            **extra,
        }

    def delta_chunk(
        self, delta: dict[str, Any], finish_reason: str | None = None
    ) -> dict[str, Any]:
        """A chunk with one choice holding ``delta``."""
        return self._chunk([{"index": 0, "delta": delta, "finish_reason": finish_reason}])

    def _event(self, kind: str, data: Mapping[str, Any]) -> dict[str, Any]:
        return self._chunk([], event={"type": kind, "data": dict(data)})

    def status(self, description: str, *, done: bool = False) -> dict[str, Any]:
        """An Open WebUI status event chunk."""
        self._status_shown = True
        self._status_done = done
        return self._event("status", {"description": description, "done": done})

    # --- events ------------------------------------------------------------------------------
    def start(self) -> list[dict[str, Any]]:
        """The first chunk: the assistant role."""
        return [self.delta_chunk({"role": "assistant", "content": ""})]

    def on_event(self, event: Event) -> list[dict[str, Any]]:
        """The chunks for one workflow event (none for events that are not sent)."""
        if isinstance(event, AnswerDeltaEvent):
            return self.on_delta(event.delta)
        if isinstance(event, StatusEvent):
            return [self.status(event.description, done=event.done)]
        if isinstance(event, CitationSourcesEvent):
            return self.on_sources(event.sources)
        return []

    def on_sources(self, sources: Sequence[NodeWithScore]) -> list[dict[str, Any]]:
        """The numbered sources of the run are known; release any text held until now."""
        self._nodes = list(sources)
        self._numbers.set_source_count(len(self._nodes))
        return self._emit(*self._numbers.feed(""))

    def on_delta(self, text: str) -> list[dict[str, Any]]:
        """Answer text: source events for newly cited sources, then the renumbered text."""
        self._fed = True
        return self._emit(*self._numbers.feed(text))

    def _emit(self, new: list[int], text: str) -> list[dict[str, Any]]:
        chunks: list[dict[str, Any]] = []
        for old in new:
            payload = source_payload(
                self._nodes[old - 1],
                self._numbers.mapping[old],
                collection=self.collection,
                base_url=self.base_url,
                link=self.link,
            )
            self.sources.append(payload)
            chunks.append(self._event("source", payload))
            if self.annotations:
                number = self._numbers.mapping[old]
                at = len("".join(self.content)) + max(0, text.find(f"[{number}]"))
                annotation = url_citation(payload, number, at)
                self.url_citations.append(annotation)
                chunks.append(self.delta_chunk({"annotations": [annotation]}))
        if text:
            self.content.append(text)
            chunks.append(self.delta_chunk({"content": text}))
        return chunks

    def finish(self, result: CitedResponse) -> list[dict[str, Any]]:
        """The end of the run: held text, the optional source list, finish reason and usage."""
        chunks: list[dict[str, Any]] = []
        if not self._numbers.known:
            chunks += self.on_sources(result.source_nodes)
        if not self._fed and result.response:
            chunks += self.on_delta(result.response)
        chunks += self._emit(*self._numbers.flush())
        if self.source_list:
            listing = source_list_markdown(result, self._numbers.mapping, self.sources)
            if listing:
                chunks += self._emit([], listing)
        if self._status_shown and not self._status_done:
            chunks.append(self.status("Done", done=True))
        usage = self.usage(result)
        # sentences that state something no source supports: they carry no marker, and a
        # client can flag them (non-streaming: the completion's ``unsupported``)
        unsupported = {"unsupported": list(result.unsupported)} if result.unsupported else {}
        if self.include_usage:
            chunks.append({**self.delta_chunk({}, "stop"), **unsupported})
            chunks.append(self._chunk([], usage=usage))
        else:
            chunks.append({**self.delta_chunk({}, "stop"), "usage": usage, **unsupported})
        return chunks

    def fail(self, exc: BaseException) -> list[dict[str, Any]]:
        """The run failed: close the status line, then an OpenAI error data line."""
        chunks: list[dict[str, Any]] = []
        if self._status_shown and not self._status_done:
            chunks.append(self.status("Failed", done=True))
        _, body = describe(exc)
        chunks.append(body)
        return chunks

    def usage(self, result: CitedResponse | None = None) -> dict[str, int]:
        """Estimated token counts: the request and the sources read; the answer written."""
        read = [self.prompt_text]
        if result is not None:
            read += [source_text(s) for s in result.source_nodes]
        prompt = sum(count_tokens(t) for t in read if t)
        completion = count_tokens("".join(self.content)) if self.content else 0
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }

    # --- non-streaming -----------------------------------------------------------------------
    def completion(self, result: CitedResponse) -> dict[str, Any]:
        """The whole answer as one ``chat.completion`` with a top-level ``sources`` list."""
        self.on_sources(result.source_nodes)
        self.on_delta(result.response or "")
        finish = self.finish(result)
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.content)}
        if self.annotations:
            message["annotations"] = list(self.url_citations)
        return {
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": next(c["usage"] for c in finish if "usage" in c),
            "sources": list(self.sources),
            "unsupported": list(result.unsupported),
        }


def plain_completion(
    text: str, *, model: str, prompt_text: str, completion_id: str | None = None
) -> dict[str, Any]:
    """A ``chat.completion`` with no sources (Open WebUI task answers)."""
    prompt, completion = count_tokens(prompt_text), count_tokens(text) if text else 0
    return {
        "id": completion_id or f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
        ],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        },
    }


def plain_chunks(text: str, *, model: str, prompt_text: str) -> list[dict[str, Any]]:
    """The chunks of a streamed answer with no sources (task answers asked with ``stream``)."""
    writer = ChatStream(model=model, collection="", prompt_text=prompt_text)
    writer.content.append(text)
    chunks = writer.start()
    if text:
        chunks.append(writer.delta_chunk({"content": text}))
    chunks.append({**writer.delta_chunk({}, "stop"), "usage": writer.usage()})
    return chunks


# --- SSE -----------------------------------------------------------------------------------------
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
            while True:
                try:
                    item = await anext(iterator)
                except StopAsyncIteration:
                    queue.put_nowait((_END, None))
                    return
                queue.put_nowait((_ITEM, item))
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
#: system call and a wake-up of the client (9% of the server's GIL time at 64 streams, before)
STATUS_LINGER = 0.02


def _may_wait(item: Event | CitedResponse) -> bool:
    return not isinstance(item, AnswerDeltaEvent | CitedResponse)


async def sse_stream(
    items: AsyncIterable[Event | CitedResponse],
    writer: ChatStream,
    *,
    keepalive: float,
    status_linger: float = STATUS_LINGER,
) -> AsyncGenerator[str, None]:
    """The SSE lines of a run: chunks, keep-alives, an error line on failure, ``[DONE]`` last.

    Events other than answer text (statuses, sources) wait up to ``status_linger`` seconds to
    share a write with the events after them (`ready_batches`); answer text never waits.

    ``items`` yields the run's stream events, then its `CitedResponse`; an exception from it
    (e.g. an `UpstreamError`) ends the stream with an error line. Each yielded string holds the
    chunks of all the events that were ready together (one socket write); the last one ends
    with ``[DONE]``.
    """
    lines = [sse(chunk) for chunk in writer.start()]
    try:
        batched = ready_batches(items, keepalive, hold=_may_wait, linger=status_linger)
        async with contextlib.aclosing(batched) as batches:
            async for batch in batches:
                if batch is None:
                    lines.append(KEEPALIVE)
                    finished = False
                else:
                    for item in batch:
                        chunks = (
                            writer.finish(item)
                            if isinstance(item, CitedResponse)
                            else writer.on_event(item)
                        )
                        lines.extend(sse(chunk) for chunk in chunks)
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
        lines.extend(sse(chunk) for chunk in writer.fail(exc))
    lines.append(DONE)
    yield "".join(lines)


class EventStreamResponse(StreamingResponse):
    """An SSE response that always closes its stream, so a disconnect cancels the run.

    Starlette cancels the response when the client goes away; if that happens while a chunk is
    being sent, the stream generator would only be closed when garbage-collected. Closing it here
    runs its clean-up at once.
    """

    media_type = "text/event-stream"

    def __init__(self, content: AsyncGenerator[str, None], **kwargs: Any) -> None:
        headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        headers.update(kwargs.pop("headers", None) or {})
        super().__init__(content, headers=headers, **kwargs)
        self._stream = content

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
            with anyio.CancelScope(shield=True):
                await self._stream.aclose()
