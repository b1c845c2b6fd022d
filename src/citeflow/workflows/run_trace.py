"""`RunTrace`: the facts of one run that its steps share, kept in the run's context store."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from llama_index.core.schema import NodeWithScore


@dataclass
class RunTrace:
    """The question, the query searched, the rounds, whether the answer is grounded, every hit
    seen (by node id, best score kept) and the seconds per stage."""

    query: str
    search_query: str
    rounds: int = 1
    grounded: bool = True
    pool: dict[str, NodeWithScore] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)

    def timed(self, name: str, started: float) -> None:
        """Add the seconds since ``started`` (a `time.perf_counter` reading) to ``name``."""
        self.timings[name] = self.timings.get(name, 0.0) + time.perf_counter() - started
