"""The base of the event-stream adapters: one workflow run in, one protocol's chunks out.

A run yields its stream events (`StatusEvent`, `CitationSourcesEvent`, `AnswerDeltaEvent`), then
its `CitedResponse`. Each protocol (the server's OpenAI chunks with Open WebUI events, the CLI's
terminal lines) is a subclass of `EventStream` with one hook per item, in the style of
pydantic-ai's ``UIEventStream``: `handle` dispatches an item to its hook, `transform` walks a
whole run. The hooks encode what the workflow decided (the sources, each sentence's citations);
none reads the answer's text to find them again.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Iterable
from typing import Generic, TypeVar

from workflows.events import Event

from citeflow.events import AnswerDeltaEvent, CitationSourcesEvent, StatusEvent
from citeflow.result import CitedResponse

ChunkT = TypeVar("ChunkT")

#: what a run yields: its stream events, then its result
RunItem = Event | CitedResponse


class EventStream(Generic[ChunkT]):
    """Turns one run's items into chunks of a protocol; override the hooks it needs."""

    def before_stream(self) -> Iterable[ChunkT]:
        """The chunks that open the stream, before any event."""
        return ()

    def handle_status(self, event: StatusEvent) -> Iterable[ChunkT]:
        """A progress line of the run."""
        return ()

    def handle_sources(self, event: CitationSourcesEvent) -> Iterable[ChunkT]:
        """The numbered sources, known before any text cites them."""
        return ()

    def handle_answer_delta(self, event: AnswerDeltaEvent) -> Iterable[ChunkT]:
        """A checked piece of the answer and the sources it cites."""
        return ()

    def handle_result(self, result: CitedResponse) -> Iterable[ChunkT]:
        """The end of the run."""
        return ()

    def on_error(self, error: Exception) -> Iterable[ChunkT]:
        """The run failed: the chunks that tell the client (by default, the error is raised)."""
        raise error

    def handle(self, item: RunItem) -> Iterable[ChunkT]:
        """The chunks for one item of the run (none for events the protocol does not show)."""
        if isinstance(item, AnswerDeltaEvent):
            return self.handle_answer_delta(item)
        if isinstance(item, StatusEvent):
            return self.handle_status(item)
        if isinstance(item, CitationSourcesEvent):
            return self.handle_sources(item)
        if isinstance(item, CitedResponse):
            return self.handle_result(item)
        return ()

    async def transform(self, items: AsyncIterable[RunItem]) -> AsyncIterator[ChunkT]:
        """The chunks of a whole run: `before_stream`, each item's, or `on_error`'s at a failure."""
        for chunk in self.before_stream():
            yield chunk
        try:
            async for item in items:
                for chunk in self.handle(item):
                    yield chunk
        except Exception as exc:
            for chunk in self.on_error(exc):
                yield chunk
