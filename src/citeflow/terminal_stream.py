"""The CLI adapter: a workflow run as terminal output (`citeflow ask`).

Progress lines go to stderr, the answer to stdout as its checked sentences arrive, then the
cited sources, the sentences no source supports and (on request) the timings.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from citeflow.event_stream import EventStream
from citeflow.events import AnswerDeltaEvent, StatusEvent
from citeflow.result import CitedResponse


@dataclass(frozen=True, slots=True)
class Output:
    """A piece of terminal output: answer text for stdout, or a whole line for stderr."""

    text: str
    stderr: bool = False

    def write(self) -> None:
        if self.stderr:
            print(self.text, file=sys.stderr, flush=True)
        else:
            print(self.text, end="", flush=True)


@dataclass(kw_only=True, eq=False)
class TerminalStream(EventStream[Output]):
    """``quiet``: no progress lines; ``timings``: the run's timings at the end."""

    quiet: bool = False
    timings: bool = False

    def handle_status(self, event: StatusEvent) -> list[Output]:
        if event.done or self.quiet:
            return []
        return [Output(f"… {event.description}", stderr=True)]

    def handle_answer_delta(self, event: AnswerDeltaEvent) -> list[Output]:
        return [Output(event.text)]

    def handle_result(self, result: CitedResponse) -> list[Output]:
        lines = [""]
        if result.cited:
            lines += ["", "Sources:", result.format_sources()]
        elif not result.grounded:
            lines += ["", "(no source in the documents supports an answer)"]
        if result.unsupported:
            lines += ["", "Not supported by any source:"]
            lines += [f"- {sentence}" for sentence in result.unsupported]
        out = [Output("\n".join(lines) + "\n")]
        if self.timings:
            parts = ", ".join(f"{k} {v:.2f}s" for k, v in result.timings.items())
            out.append(Output(f"timings: {parts}", stderr=True))
        return out
