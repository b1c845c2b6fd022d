"""Compact synthesis with the citation templates, streamed one checked sentence at a time.

Compact mode: the numbered sources are packed into as few prompts as fit ``context_budget``
tokens; the first prompt uses `CITATION_QA_TEMPLATE`, each further one `CITATION_REFINE_TEMPLATE`
with the answer so far. Only the last call is streamed. Its tokens go through `RepairedAnswer`
(`SentenceStream` segments, each checked by `CitationRepairer`, then by the citation judge when
one is on), so every streamed piece is final, citation-checked text.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from llama_index.core.llms import LLM, ChatMessage
from llama_index.core.schema import NodeWithScore

from citeflow.citations.markers import cited_numbers
from citeflow.citations.repair import Citation, RepairedAnswer, RepairPolicy, SentenceCheck
from citeflow.citations.sources import format_sources, source_text
from citeflow.citations.support import LexicalSupport
from citeflow.citations.text import count_tokens
from citeflow.prompts import CITATION_QA_TEMPLATE, CITATION_REFINE_TEMPLATE, CITATION_SYSTEM_PROMPT
from citeflow.providers.openai_stream import stream_text


@dataclass
class Synthesis:
    """The final answer, its citations, and the source numbers it cites (first-cited first)."""

    text: str
    citations: list[Citation] = field(default_factory=list)
    cited: list[int] = field(default_factory=list)
    llm_calls: int = 0
    raw_text: str = ""
    llm_seconds: float = 0.0  # time spent waiting on the LLM (its client included)


def pack(sources: Sequence[NodeWithScore], budget: int) -> list[list[NodeWithScore]]:
    """Group consecutive sources so that each group's text fits ``budget`` tokens."""
    groups: list[list[NodeWithScore]] = []
    size = 0
    for source in sources:
        tokens = count_tokens(source_text(source))
        if groups and size + tokens <= budget:
            groups[-1].append(source)
            size += tokens
        else:
            groups.append([source])
            size = tokens
    return groups


class CitationSynthesizer:
    """Writes the cited answer from numbered sources."""

    def __init__(
        self,
        llm: LLM,
        *,
        context_budget: int,
        policy: RepairPolicy,
        check: SentenceCheck | None = None,
    ) -> None:
        self.llm = llm
        self.context_budget = context_budget
        self.policy = policy
        self.check = check  # e.g. the citation judge (`citeflow.citations.judge.JudgeCheck`)

    def messages(self, prompt: str) -> list[ChatMessage]:
        return [
            ChatMessage(role="system", content=CITATION_SYSTEM_PROMPT),
            ChatMessage(role="user", content=prompt),
        ]

    async def synthesize(
        self,
        query: str,
        sources: Sequence[NodeWithScore],
        on_delta: Callable[[str], None] | None = None,
    ) -> Synthesis:
        """Answer ``query`` from ``sources``; ``on_delta`` receives each checked text piece."""
        groups = pack(sources, self.context_budget)
        llm_seconds = 0.0
        answer = ""
        first = 1
        calls = 0
        prompts: list[str] = []
        for index, group in enumerate(groups):
            context = format_sources(group, first_number=first)
            first += len(group)
            if index == 0:
                prompts.append(CITATION_QA_TEMPLATE.format(context_str=context, query_str=query))
            else:
                prompts.append(
                    CITATION_REFINE_TEMPLATE.format(
                        context_str=context, query_str=query, existing_answer=answer
                    )
                )
            if index < len(groups) - 1:
                waited = time.perf_counter()
                reply = await self.llm.achat(self.messages(prompts[-1]))
                llm_seconds += time.perf_counter() - waited
                answer = (reply.message.content or "").strip()
                calls += 1
        repairer = self.policy.repairer(
            LexicalSupport([source_text(s) for s in sources], question=query),
            [s.score for s in sources],
        )
        check = _TimedCheck(self.check) if self.check is not None else None
        repaired = RepairedAnswer(repairer, check)
        raw: list[str] = []

        def emit(pieces: list[str]) -> None:
            if on_delta is not None:
                for piece in pieces:
                    on_delta(piece)

        waited = time.perf_counter()
        chunks = aiter(await stream_text(self.llm, self.messages(prompts[-1])))
        calls += 1
        while True:
            try:
                delta = await anext(chunks)
            except StopAsyncIteration:
                break
            finally:
                llm_seconds += time.perf_counter() - waited
            raw.append(delta)
            emit(await repaired.afeed(delta))
            waited = time.perf_counter()
        emit(await repaired.aflush())
        text = repaired.text
        return Synthesis(
            text=text,
            citations=repaired.citations,
            cited=cited_numbers(text),
            llm_calls=calls,
            raw_text="".join(raw),
            llm_seconds=llm_seconds + (check.seconds if check is not None else 0.0),
        )


class _TimedCheck:
    """A sentence check whose time counts as model time (the judge is an LLM call)."""

    def __init__(self, check: SentenceCheck) -> None:
        self._check = check
        self.seconds = 0.0

    async def __call__(
        self, sentence: str, citations: Sequence[Citation]
    ) -> tuple[str, list[Citation]]:
        started = time.perf_counter()
        try:
            return await self._check(sentence, citations)
        finally:
            self.seconds += time.perf_counter() - started
