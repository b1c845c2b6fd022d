"""Grading: which retrieved chunks are relevant to the query.

`ScoreGrader` keeps chunks whose retrieval similarity reaches a threshold: free, and the default
for the in-process model, whose every extra call costs seconds of prefill. `LLMGrader` asks the
LLM once about all candidates and parses its reply leniently (JSON, or any list of numbers), the
default for hosted models. `KeepAllGrader` turns grading off.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol, TypeVar

from llama_index.core.llms import LLM
from llama_index.core.schema import MetadataMode, NodeWithScore

from citeflow.citations.support import QuestionCoverage
from citeflow.citations.text import term_set
from citeflow.prompts import GRADE_PROMPT
from citeflow.query.rewriting import ask
from citeflow.settings import RetrievalSettings, Settings

#: output cap of a grading call: the reply is a short JSON list of passage numbers
GRADE_MAX_TOKENS = 96


class Grader(Protocol):
    """Picks the relevant chunks among retrieval hits (keeping their order)."""

    name: str

    async def grade(self, query: str, nodes: Sequence[NodeWithScore]) -> list[NodeWithScore]: ...


class KeepAllGrader:
    """Every hit is relevant."""

    name = "none"

    async def grade(self, query: str, nodes: Sequence[NodeWithScore]) -> list[NodeWithScore]:
        return list(nodes)


class ScoreGrader:
    """Relevant when the retrieval similarity is at least ``threshold``, or when the chunk holds
    ``coverage`` of the question's words.

    The similarity is the dense side's cosine, and the keyword side finds what it misses: a
    question about a name or a rare term ("Why did the author write Hacker News?") has its answer
    ranked first by the fused search at a cosine of 0.21, under the 0.25 threshold, while chunks
    that merely share the topic pass it. ``coverage`` is the IDF-weighted share of the question's
    content words in the chunk, the IDF taken over the hits (`QuestionCoverage`); a question
    none of whose words is in any hit covers nothing. On the essay in `data/`, the chunk holding
    each of twelve questions' answer covered 0.61 to 1.0 of it; SciFact's 300 claims searched in
    the essay (off-topic) reached at most 0.30 (median 0.08). 0 turns the coverage check off.
    """

    name = "score"

    def __init__(self, threshold: float, coverage: float = 0.0) -> None:
        self.threshold = threshold
        self.coverage = coverage

    @classmethod
    def of(cls, retrieval: RetrievalSettings) -> ScoreGrader:
        """The score grader under ``CITEFLOW_RELEVANCE_THRESHOLD`` and ``..._COVERAGE``."""
        return cls(retrieval.relevance_threshold, retrieval.relevance_coverage)

    async def grade(self, query: str, nodes: Sequence[NodeWithScore]) -> list[NodeWithScore]:
        similar = [(n.score or 0.0) >= self.threshold for n in nodes]
        if not self.coverage or all(similar):
            return [n for n, ok in zip(nodes, similar, strict=True) if ok]
        terms = [term_set(n.node.get_content(metadata_mode=MetadataMode.NONE)) for n in nodes]
        covers = QuestionCoverage.over(query, terms)
        return [
            n
            for n, ok, t in zip(nodes, similar, terms, strict=True)
            if ok or (covers and covers(t) >= self.coverage)
        ]


class LLMGrader:
    """One LLM call judges all candidates; replies are parsed leniently."""

    name = "llm"

    def __init__(self, llm: LLM, *, max_chars: int = 700) -> None:
        self.llm = llm
        self.max_chars = max_chars

    async def grade(self, query: str, nodes: Sequence[NodeWithScore]) -> list[NodeWithScore]:
        if not nodes:
            return []
        passages = "\n\n".join(
            f"{i}. {n.node.get_content(metadata_mode=MetadataMode.NONE)[: self.max_chars]}"
            for i, n in enumerate(nodes, start=1)
        )
        prompt = GRADE_PROMPT.format(query_str=query, passages_str=passages)
        reply = await ask(self.llm, prompt, GRADE_MAX_TOKENS)
        picked = parse_relevant(reply, len(nodes))
        return [nodes[i - 1] for i in picked]


def parse_relevant(reply: str, count: int) -> list[int]:
    """Passage numbers (1..count) a grader reply names, in ascending order.

    Accepts ``{"relevant": [1, 3]}``, a bare ``[1, 3]``, code fences, trailing prose, or
    "1, 3"; anything naming no valid number means none is relevant.
    """
    text = reply.strip()
    fenced = re.search(r"```(?:json)?\s*(.*?)```", text, re.DOTALL)
    if fenced:
        text = fenced.group(1)
    numbers: list[object] = []
    match = re.search(r"\{.*?\}", text, re.DOTALL)
    if match:
        with contextlib.suppress(json.JSONDecodeError):
            data = json.loads(match.group(0))
            value = data.get("relevant", []) if isinstance(data, dict) else []
            numbers = list(value) if isinstance(value, list) else [value]
    if not numbers:
        bracket = re.search(r"\[([^\]]*)\]", text)
        scope = bracket.group(1) if bracket else text.split("\n", 1)[0]
        numbers = re.findall(r"\d+", scope)
    out: set[int] = set()
    for n in numbers:
        try:
            value = int(str(n))
        except ValueError:
            continue
        if 1 <= value <= count:
            out.add(value)
    return sorted(out)


def build_grader(settings: Settings, llm: LLM) -> Grader:
    """The grader the settings ask for; ``auto`` is the score grader for the local model."""
    kind = settings.retrieval.grader
    if kind == "auto":
        kind = "score" if settings.llm.provider == "local" else "llm"
    if kind == "llm":
        return LLMGrader(llm)
    if kind == "score":
        return ScoreGrader.of(settings.retrieval)
    return KeepAllGrader()


class Scored(Protocol):
    """A hit with its score: a `NodeWithScore`, or a ``POST /search`` result."""

    @property
    def score(self) -> float | None: ...


HitT = TypeVar("HitT", bound=Scored)


def keep_best(pool: dict[str, HitT], hits: Iterable[HitT], key: Callable[[HitT], str]) -> None:
    """Add ``hits`` to ``pool``, each once by ``key``, the better scored of equals kept (the
    first on a tie): the hits of a question's rounds (the workflow's ``grade`` step, ``POST
    /search``), or of the knowledge bases one search covers."""
    for hit in hits:
        known = pool.get(key(hit))
        if known is None or (hit.score or 0.0) > (known.score or 0.0):
            pool[key(hit)] = hit


def fallback_hits(pool: Iterable[HitT], retrieval: RetrievalSettings) -> list[HitT]:
    """What is kept when no round found a relevant hit: the ``fallback_chunks`` best of ``pool``
    (``on_no_relevant`` ``best``), or nothing (``refuse``)."""
    if retrieval.on_no_relevant == "refuse":
        return []
    return sorted(pool, key=lambda n: -(n.score or 0.0))[: retrieval.fallback_chunks]
