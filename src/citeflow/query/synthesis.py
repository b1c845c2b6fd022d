"""Compact synthesis with the citation templates, streamed one checked sentence at a time.

Compact mode: the numbered sources are packed into as few prompts as fit ``context_budget``
tokens (of the policy's citation settings); the first prompt uses the QA template, each further
one the refine template with the answer so far. Only the last call is streamed. Its sentences go
through `RepairedAnswer` (each checked by a `CitationChecker` under the `CitationPolicy`), so
every streamed piece is final, citation-checked text.

How the model is asked to cite (`CitationMode`, ``CITEFLOW_CITATION_MODE``):

* ``markers``: the model writes prose with ``[N]`` markers (`CITATION_QA_TEMPLATE`);
* ``structured``: the model's reply is constrained to JSON whose every sentence names its
  sources before its text (`citeflow.citations.structured`: a llama.cpp JSON-schema grammar for
  the local model, structured outputs for OpenAI and Azure OpenAI); each sentence is rendered
  with its markers as it completes;
* ``evidence`` (attribute first): the markers template, but the model is shown only the source
  sentences that bear on the question (`citeflow.citations.evidence`), under their numbers, so
  each sentence is written from evidence chosen, with its source, before the answer.

An LLM that cannot constrain its output (`supports_response_format`) is asked with the markers
template in ``structured`` mode. Either way the text checked is the model's sentences with
markers, kept as `Synthesis.raw_text`, so re-checking a recorded answer needs no model.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from llama_index.core.llms import LLM, ChatMessage

from citeflow.citations.answer import AnswerPiece, RepairedAnswer
from citeflow.citations.evidence import format_evidence, select_evidence
from citeflow.citations.markers import cited_numbers
from citeflow.citations.repair import Citation, CitationPolicy
from citeflow.citations.sources import Source, format_sources
from citeflow.citations.structured import StructuredSentenceStream, response_format
from citeflow.citations.text import count_tokens
from citeflow.citations.verify import JudgeVerifier
from citeflow.prompts import (
    CITATION_JSON_QA_TEMPLATE,
    CITATION_JSON_REFINE_TEMPLATE,
    CITATION_JSON_SYSTEM_PROMPT,
    CITATION_QA_TEMPLATE,
    CITATION_REFINE_TEMPLATE,
    CITATION_SYSTEM_PROMPT,
    NOT_COVERED_ANSWER,
)
from citeflow.providers.openai_stream import stream_text, supports_response_format
from citeflow.settings import Settings

CitationMode = Literal["markers", "structured", "evidence"]


def citation_mode_of(settings: Settings) -> CitationMode:
    """The citation mode the settings ask for; ``auto`` is ``markers`` for every provider: with
    the local model, structured JSON made it copy sources sentence by sentence until its token
    limit and evidence cost accuracy for no precision (README "Citations"); hosted models are
    not measured."""
    mode = settings.citations.mode
    return "markers" if mode == "auto" else mode


@dataclass
class Synthesis:
    """The final answer, its citations, and the source numbers it cites (first-cited first)."""

    text: str
    citations: list[Citation] = field(default_factory=list)
    cited: list[int] = field(default_factory=list)
    unsupported: list[str] = field(default_factory=list)
    raw_text: str = ""  # the model's sentences with their markers, before checking
    llm_seconds: float = 0.0  # time spent waiting on the LLM (its client included)
    judge_seconds: float = 0.0  # time spent checking citations with the LLM judge
    judge_verdicts: dict[str, int] = field(default_factory=dict)  # `JudgeVerifier.verdicts`


def pack(sources: Sequence[Source], budget: int) -> list[list[Source]]:
    """Group consecutive sources so that each group's text fits ``budget`` tokens."""
    groups: list[list[Source]] = []
    size = 0
    for source in sources:
        tokens = count_tokens(source.text)
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
        policy: CitationPolicy,
        mode: CitationMode = "markers",
    ) -> None:
        self.llm = llm
        self.policy = policy
        self.mode = mode
        self.structured = mode == "structured" and supports_response_format(llm)

    def messages(self, prompt: str) -> list[ChatMessage]:
        system = CITATION_JSON_SYSTEM_PROMPT if self.structured else CITATION_SYSTEM_PROMPT
        return [
            ChatMessage(role="system", content=system),
            ChatMessage(role="user", content=prompt),
        ]

    def _context(self, group: Sequence[Source], first: int, query: str) -> str:
        if self.mode != "evidence":
            return format_sources(group, first_number=first)
        texts = [s.text for s in group]
        return format_evidence(texts, select_evidence(texts, query), first_number=first)

    def _prompt(self, index: int, context: str, query: str, answer: str) -> str:
        qa, refine = (
            (CITATION_JSON_QA_TEMPLATE, CITATION_JSON_REFINE_TEMPLATE)
            if self.structured
            else (CITATION_QA_TEMPLATE, CITATION_REFINE_TEMPLATE)
        )
        if index == 0:
            return qa.format(context_str=context, query_str=query)
        return refine.format(context_str=context, query_str=query, existing_answer=answer)

    async def synthesize(
        self,
        query: str,
        sources: Sequence[Source],
        on_delta: Callable[[AnswerPiece], None],
    ) -> Synthesis:
        """Answer ``query`` from ``sources``; ``on_delta`` receives each checked piece."""
        groups = pack(sources, self.policy.settings.context_budget)
        llm_seconds = 0.0
        answer = ""
        first = 1
        prompt = ""
        options = {"response_format": response_format(len(sources))} if self.structured else {}
        for index, group in enumerate(groups):
            prompt = self._prompt(index, self._context(group, first, query), query, answer)
            first += len(group)
            if index < len(groups) - 1:
                waited = time.perf_counter()
                reply = await self.llm.achat(self.messages(prompt), **options)
                llm_seconds += time.perf_counter() - waited
                answer = self._sentences_of(reply.message.content or "")
        checker = self.policy.checker([s.text for s in sources], question=query)
        repaired = RepairedAnswer(checker)
        verifier = checker.verifier
        raw: list[str] = []
        checked = 0.0  # time spent checking citations (an LLM's when the judge verifies)

        async def check(pieces: list[str]) -> None:
            nonlocal checked
            started = time.perf_counter()
            for piece in pieces:
                raw.append(piece)
                for answer_piece in await repaired.feed(piece):
                    on_delta(answer_piece)
            checked += time.perf_counter() - started

        waited = time.perf_counter()
        chunks = aiter(await stream_text(self.llm, self.messages(prompt), **options))
        sentences = StructuredSentenceStream() if self.structured else None
        try:
            try:
                while True:
                    try:
                        delta = await anext(chunks)
                    except StopAsyncIteration:
                        break
                    finally:
                        llm_seconds += time.perf_counter() - waited
                    await check(sentences.feed(delta) if sentences is not None else [delta])
                    if repaired.looping:  # the model is going round: stop reading it
                        break
                    waited = time.perf_counter()
            finally:
                # whenever reading stops (the end, a loop, an error, a cancelled answer), before
                # the checks still running are awaited: closing an async generator ends the
                # model's request, so it generates nothing more meanwhile
                closer = getattr(chunks, "aclose", None)
                if closer is not None:
                    await closer()
            if sentences is not None:
                await check(sentences.flush())
            started = time.perf_counter()
            async for piece in repaired.rest():
                on_delta(piece)
            checked += time.perf_counter() - started
        finally:
            repaired.cancel()  # checks still running when the answer fails or is cancelled
        text = repaired.text
        if not text:  # the model said nothing (or only markers): say so instead of nothing
            text = NOT_COVERED_ANSWER
            on_delta(AnswerPiece(text))
        return Synthesis(
            text=text,
            citations=repaired.citations,
            cited=cited_numbers(text),
            unsupported=repaired.unsupported,
            raw_text="".join(raw),
            llm_seconds=llm_seconds + (checked if self.policy.judge is not None else 0.0),
            judge_seconds=checked if self.policy.judge is not None else 0.0,
            judge_verdicts=dict(verifier.verdicts) if isinstance(verifier, JudgeVerifier) else {},
        )

    def _sentences_of(self, reply: str) -> str:
        """A non-streamed reply as the answer text with markers (a JSON one rendered)."""
        if not self.structured:
            return reply.strip()
        sentences = StructuredSentenceStream()
        return "".join(sentences.feed(reply) + sentences.flush()).strip()
