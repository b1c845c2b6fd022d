"""The result of a query: a LlamaIndex `Response` with citations."""

from __future__ import annotations

from dataclasses import dataclass, field

from llama_index.core.base.response.schema import Response
from llama_index.core.schema import NodeWithScore

from citeflow.citations.repair import Citation
from citeflow.citations.sources import Source


@dataclass(repr=False)
class CitedResponse(Response):
    """``str(result)`` is the answer; ``sources`` are its numbered sources.

    ``sources[i]`` is "Source i+1", the target of ``[i+1]`` in ``response``; ``source_nodes[i]``
    is the same source as a LlamaIndex node whose text starts with ``Source i+1:``. ``cited`` lists
    the source numbers the answer cites, in order of first citation; ``citations`` has one entry
    per (sentence, source) pair with the supporting quote and its score; ``unsupported`` lists
    the sentences that state something none of the sources supports.
    """

    sources: list[Source] = field(default_factory=list)
    query: str = ""
    search_query: str = ""
    cited: list[int] = field(default_factory=list)
    citations: list[Citation] = field(default_factory=list)
    unsupported: list[str] = field(default_factory=list)
    """Answer sentences that state something no source supports (they carry no marker)."""
    raw_response: str = ""  # the model's text before citation repair, for inspection
    grounded: bool = True
    rounds: int = 1
    timings: dict[str, float] = field(default_factory=dict)
    judge_verdicts: dict[str, int] = field(default_factory=dict)
    """The LLM judge's verdicts on this answer's citations (when it checks them)."""

    def __repr__(self) -> str:
        answer = (self.response or "")[:60]
        return (
            f"CitedResponse(response={answer!r}{'…' if len(self.response or '') > 60 else ''}, "
            f"sources={len(self.source_nodes)}, cited={self.cited})"
        )

    @property
    def cited_nodes(self) -> list[NodeWithScore]:
        """The source nodes the answer cites, in order of first citation."""
        return [self.source_nodes[n - 1] for n in self.cited if 0 < n <= len(self.source_nodes)]

    def format_sources(self) -> str:
        """The cited sources as lines "[N] file, page N: first words…"."""
        lines = []
        for n in self.cited:
            source = self.sources[n - 1]
            where, page = source.title or "document", source.page
            quote = next((c.quote for c in self.citations if c.number == n and c.quote), "")
            label = f"{where}, page {page}" if page else str(where)
            snippet = " ".join(quote.split())[:110]
            lines.append(f"[{n}] {label}" + (f': "{snippet}"' if snippet else ""))
        return "\n".join(lines)
