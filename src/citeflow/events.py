"""Typed events of the citation query workflow.

Steps pass these events along (rewrite → retrieve → grade → [reformulate →] cite → synthesize);
`StatusEvent`, `CitationSourcesEvent` and `AnswerDeltaEvent` are also written to the event stream
so that callers (the CLI, the server's event-stream adapters, a notebook) can show progress, the
sources and the answer as the workflow decided them, without reading the answer's text again.
"""

from __future__ import annotations

from typing import Literal

from llama_index.core.llms import ChatMessage
from llama_index.core.schema import NodeWithScore
from pydantic import Field
from workflows.events import Event, StartEvent

from citeflow.citations.sources import Source

Stage = Literal["rewriting", "searching", "grading", "retrying", "citing", "writing", "done"]


class QueryStartEvent(StartEvent):
    """Starts a run: ``w.run(query="...", history=[...])``.

    ``history`` holds the earlier turns of a chat (oldest first, without the current question);
    when present, the rewrite step condenses it and the question into one standalone query.
    """

    query: str = ""
    history: list[ChatMessage] = Field(default_factory=list)


class RetrieveEvent(Event):
    """A search query to run against the knowledge base, in retrieval round ``round`` (1-based)."""

    query: str
    round: int = 1


class RetrievedEvent(Event):
    """The hits of one retrieval round, best first."""

    query: str
    round: int
    nodes: list[NodeWithScore]


class RetryEvent(Event):
    """Grading found nothing relevant; reformulate the query for round ``round``."""

    original_query: str
    failed_query: str
    round: int


class RelevantNodesEvent(Event):
    """The retrieved chunks judged relevant (or, when none are, the best ones), best first."""

    query: str
    nodes: list[NodeWithScore]
    graded_relevant: bool


class CitationSourcesEvent(Event):
    """The numbered sources: ``sources[i]`` is "Source i+1" in the prompt and the answer."""

    query: str
    sources: list[Source]


class StatusEvent(Event):
    """Progress for callers: a stage, a human description, and whether the run is finished."""

    stage: Stage
    description: str
    round: int = 1
    done: bool = False


class AnswerDeltaEvent(Event):
    """A piece of the final answer, already citation-checked (whole sentences).

    ``citations`` are the numbers of the sources its ``[N]`` markers name, in the order they
    appear: what the check decided, so that adapters need not parse the markers to know them.
    """

    text: str
    citations: list[int] = Field(default_factory=list)
