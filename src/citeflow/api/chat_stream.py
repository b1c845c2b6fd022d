"""The OpenAI adapter: a workflow run as ``chat.completion.chunk`` objects with Open WebUI events.

* a first chunk with the role, one chunk per answer piece, a last chunk with ``finish_reason``
  and ``usage`` (and, when asked with ``stream_options.include_usage``, OpenAI's separate usage
  chunk);
* Open WebUI events in chunks with ``"choices": []`` and a top-level ``"event"``:
  ``{"type": "status", "data": {"description", "done"}}`` for each `StatusEvent`, and
  ``{"type": "source", "data": {...}}`` for each source the answer cites
  (`citeflow.api.source_events`), each before the first text that cites it;
* optionally each cited source as an OpenAI ``url_citation`` annotation, and a Markdown list of
  the cited sources at the end.

Open WebUI numbers sources by order of arrival, so cited sources are numbered 1..K in order of
first citation and the answer's markers are rewritten to match; which sources a piece cites is
the workflow's decision, carried by its `AnswerDeltaEvent`. Non-streaming answers go through the
same hooks (`ChatStream.completion`). SSE framing is `citeflow.api.sse`.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from openai.types.chat import ChatCompletion, ChatCompletionChunk, ChatCompletionMessage
from openai.types.chat.chat_completion import Choice as CompletionChoice
from openai.types.chat.chat_completion_chunk import Choice, ChoiceDelta
from openai.types.chat.chat_completion_message import Annotation
from openai.types.completion_usage import CompletionUsage

from citeflow.api.errors import describe
from citeflow.api.links import document_path
from citeflow.api.schemas import ErrorResponse, SourceData
from citeflow.api.source_events import (
    DocumentLink,
    source_list_markdown,
    source_payload,
    url_citation,
)
from citeflow.citations.markers import renumber
from citeflow.citations.sources import Source
from citeflow.citations.text import count_tokens
from citeflow.event_stream import EventStream
from citeflow.events import AnswerDeltaEvent, CitationSourcesEvent, StatusEvent
from citeflow.result import CitedResponse

#: what the stream sends: chunks, and an OpenAI error body when the run fails
Chunk = ChatCompletionChunk | ErrorResponse


@dataclass(kw_only=True, eq=False)
class ChatStream(EventStream[Chunk]):
    """Turns one workflow run into chunk objects.

    Args:
        model: the model id the client asked for.
        collection: the knowledge base (for document URLs).
        link: ``(collection, doc_id) -> URL`` of a document (signed links); by default its
            path on this server (a relative URL).
        source_list: append a Markdown list of the cited sources at the end.
        include_usage: send OpenAI's separate usage chunk (``stream_options.include_usage``).
        prompt_text: the request's message text (for the token estimate).
        annotations: also send each cited source as an OpenAI ``url_citation`` annotation
            (`url_citation`), for clients that drop Open WebUI's events.
    """

    model: str
    collection: str
    link: DocumentLink = document_path
    source_list: bool = False
    include_usage: bool = False
    prompt_text: str = ""
    annotations: bool = False
    id: str = field(init=False, default_factory=lambda: f"chatcmpl-{uuid.uuid4().hex}")
    created: int = field(init=False, default_factory=lambda: int(time.time()))
    url_citations: list[Annotation] = field(init=False, default_factory=list)
    sources: list[SourceData] = field(init=False, default_factory=list)  # the cited ones, as sent
    content: list[str] = field(init=False, default_factory=list)
    #: source number -> number sent (order of citation)
    numbers: dict[int, int] = field(init=False, default_factory=dict)
    _written: int = field(init=False, default=0)  # characters of answer text sent
    _known: list[Source] | None = field(init=False, default=None)
    _held: list[AnswerDeltaEvent] = field(init=False, default_factory=list)  # before the sources
    _status_shown: bool = field(init=False, default=False)
    _status_done: bool = field(init=False, default=False)
    _fed: bool = field(init=False, default=False)

    # --- chunk shapes ------------------------------------------------------------------------
    def chunk(self, choices: list[Choice], **extra: Any) -> ChatCompletionChunk:
        """A chunk of this completion (``extra``: Open WebUI's ``event``, ``usage``...)."""
        return ChatCompletionChunk(
            id=self.id,
            object="chat.completion.chunk",
            created=self.created,
            model=self.model,
            choices=choices,
            **extra,
        )

    def delta_chunk(
        self, delta: ChoiceDelta, finish_reason: Literal["stop"] | None = None, **extra: Any
    ) -> ChatCompletionChunk:
        """A chunk with one choice holding ``delta``."""
        return self.chunk([Choice(index=0, delta=delta, finish_reason=finish_reason)], **extra)

    def _event(self, kind: str, data: Any) -> ChatCompletionChunk:
        return self.chunk([], event={"type": kind, "data": dict(data)})

    def status(self, description: str, *, done: bool = False) -> ChatCompletionChunk:
        """An Open WebUI status event chunk."""
        self._status_shown = True
        self._status_done = done
        return self._event("status", {"description": description, "done": done})

    # --- hooks -------------------------------------------------------------------------------
    def before_stream(self) -> list[Chunk]:
        """The first chunk: the assistant role."""
        return [self.delta_chunk(ChoiceDelta(role="assistant", content=""))]

    def handle_status(self, event: StatusEvent) -> list[Chunk]:
        return [self.status(event.description, done=event.done)]

    def handle_sources(self, event: CitationSourcesEvent) -> list[Chunk]:
        return self._know(event.sources)

    def handle_answer_delta(self, event: AnswerDeltaEvent) -> list[Chunk]:
        """Source events for newly cited sources, then the text, its markers renumbered."""
        self._fed = True
        if self._known is None:  # numbers cannot be checked yet: wait for the sources
            self._held.append(event)
            return []
        return list(self._text(event.text, event.citations))

    def handle_result(self, result: CitedResponse) -> list[Chunk]:
        """The end of the run: the optional source list, finish reason and usage."""
        chunks: list[Chunk] = []
        if self._known is None:
            chunks += self._know(result.sources)
        if not self._fed and result.response:
            chunks += self._text(result.response, result.cited)
        if self.source_list:  # no sources: an empty list, which sends nothing
            chunks += self._text(source_list_markdown(result, self.numbers, self.sources), [])
        if self._status_shown and not self._status_done:
            chunks.append(self.status("Done", done=True))
        usage = self.usage(result)
        # sentences that state something no source supports: they carry no marker, and a
        # client can flag them (non-streaming: the completion's ``unsupported``)
        unsupported = {"unsupported": list(result.unsupported)} if result.unsupported else {}
        if self.include_usage:
            chunks.append(self.delta_chunk(ChoiceDelta(), "stop", **unsupported))
            chunks.append(self.chunk([], usage=usage))
        else:
            chunks.append(self.delta_chunk(ChoiceDelta(), "stop", usage=usage, **unsupported))
        return chunks

    def on_error(self, error: Exception) -> list[Chunk]:
        """The run failed: close the status line, then an OpenAI error body."""
        chunks: list[Chunk] = []
        if self._status_shown and not self._status_done:
            chunks.append(self.status("Failed", done=True))
        _, body = describe(error)
        chunks.append(ErrorResponse.model_validate(body))
        return chunks

    # --- numbering ---------------------------------------------------------------------------
    def _know(self, sources: Sequence[Source]) -> list[Chunk]:
        """The run's numbered sources are known: release the text held until now."""
        self._known = list(sources)
        held, self._held = self._held, []
        return [chunk for event in held for chunk in self._text(event.text, event.citations)]

    def _text(self, text: str, cited: Sequence[int]) -> Iterator[Chunk]:
        """Source events (and annotations) for the sources ``text`` cites for the first time,
        then ``text`` with its markers renumbered."""
        known = self._known or []
        fresh = [n for n in dict.fromkeys(cited) if 1 <= n <= len(known) and n not in self.numbers]
        for number in fresh:
            self.numbers[number] = len(self.numbers) + 1
        if cited:
            text = renumber(text, self.numbers)
        for number in fresh:
            sent = self.numbers[number]
            payload = source_payload(
                known[number - 1],
                sent,
                collection=self.collection,
                link=self.link,
            )
            self.sources.append(payload)
            yield self._event("source", payload)
            if self.annotations:
                at = self._written + max(0, text.find(f"[{sent}]"))
                annotation = url_citation(payload, sent, at)
                self.url_citations.append(annotation)
                yield self.delta_chunk(ChoiceDelta(annotations=[annotation]))  # type: ignore[call-arg]
        if text:
            self.content.append(text)
            self._written += len(text)
            yield self.delta_chunk(ChoiceDelta(content=text))

    def usage(self, result: CitedResponse | None = None) -> CompletionUsage:
        """Estimated token counts: the request and the sources read; the answer written."""
        read = [self.prompt_text]
        if result is not None:
            read += [source.text for source in result.sources]
        prompt = sum(count_tokens(t) for t in read if t)
        completion = count_tokens("".join(self.content)) if self.content else 0
        return CompletionUsage(
            prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion
        )

    # --- non-streaming -----------------------------------------------------------------------
    def completion(self, result: CitedResponse) -> dict[str, Any]:
        """The whole answer as one ``chat.completion`` body with a top-level ``sources`` list
        (`handle_result` of a run that sent no events)."""
        finish = self.handle_result(result)
        usage = next(c.usage for c in finish if isinstance(c, ChatCompletionChunk) and c.usage)
        message = ChatCompletionMessage(role="assistant", content="".join(self.content))
        if self.annotations:
            message.annotations = list(self.url_citations)
        # citeflow's fields beside OpenAI's (Open WebUI's frontend shows ``sources`` as chips)
        return self.body(
            message, usage, sources=list(self.sources), unsupported=list(result.unsupported)
        )

    def body(
        self, message: ChatCompletionMessage, usage: CompletionUsage, **extra: Any
    ) -> dict[str, Any]:
        """A ``chat.completion`` body of this completion (``extra``: citeflow's own fields)."""
        body = ChatCompletion(
            id=self.id,
            object="chat.completion",
            created=self.created,
            model=self.model,
            choices=[CompletionChoice(index=0, message=message, finish_reason="stop")],
            usage=usage,
            **extra,
        )
        return body.model_dump(exclude_unset=True)


def plain_completion(text: str, *, model: str, prompt_text: str) -> dict[str, Any]:
    """A ``chat.completion`` body with no sources (Open WebUI task answers)."""
    stream = ChatStream(model=model, collection="", prompt_text=prompt_text)
    if text:
        stream.content.append(text)
    return stream.body(ChatCompletionMessage(role="assistant", content=text), stream.usage())


def plain_chunks(text: str, *, model: str, prompt_text: str) -> list[Chunk]:
    """The chunks of a streamed answer with no sources (task answers asked with ``stream``)."""
    stream = ChatStream(model=model, collection="", prompt_text=prompt_text)
    stream.content.append(text)
    chunks = stream.before_stream()
    if text:
        chunks.append(stream.delta_chunk(ChoiceDelta(content=text)))
    chunks.append(stream.delta_chunk(ChoiceDelta(), "stop", usage=stream.usage()))
    return chunks
