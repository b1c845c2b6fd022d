"""An instrumentation event handler that keeps the names of the events it sees."""

from __future__ import annotations

from typing import Any

from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.events import BaseEvent
from pydantic import Field


class EventRecorder(BaseEventHandler):
    """Attach it with ``get_dispatcher().add_event_handler``; ``seen`` lists the events' names."""

    seen: list[str] = Field(default_factory=list)

    @classmethod
    def class_name(cls) -> str:
        return "Recorder"

    def handle(self, event: BaseEvent, **kwargs: Any) -> None:
        self.seen.append(event.class_name())
