"""Checking and repairing the citations of an answer, one sentence at a time.

For each answer sentence: markers naming no existing source are dropped; a marker whose source
does not support the sentence is moved to the source that does, or dropped; a factual sentence
with no marker gets the source that clearly supports it. Each kept citation records the sentence,
the source number, the supporting quote and its score. Working per sentence lets the workflow
stream repaired text: what is streamed is exactly the final answer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from citeflow.citations.markers import find_markers, render, renumber, strip_markers
from citeflow.citations.support import LexicalSupport, Support
from citeflow.citations.text import content_terms

Origin = Literal["model", "moved", "added"]

_END_PUNCT = re.compile(r"([.!?:;]+[\"')\]]*)\s*$")
_NO_ANSWER = re.compile(
    r"\b(do(es)? not (cover|contain|mention|say|provide)|not (mentioned|covered|provided)|"
    r"no information|cannot (find|answer)|can't (find|answer)|unable to)\b",
    re.IGNORECASE,
)


@dataclass(frozen=True, slots=True)
class Citation:
    """One citation in the answer: ``sentence`` cites Source ``number``, backed by ``quote``."""

    number: int
    sentence: str
    quote: str
    quote_start: int
    quote_end: int
    score: float
    origin: Origin


class CitationRepairer:
    """Repairs the sentences of one answer against its numbered sources."""

    def __init__(
        self,
        support: LexicalSupport,
        *,
        threshold: float,
        keep_ratio: float = 0.6,
        enabled: bool = True,
    ) -> None:
        self._support = support
        self._threshold = threshold
        self._keep = threshold * keep_ratio
        self._enabled = enabled

    def repair(self, sentence: str) -> tuple[str, list[Citation]]:
        """The sentence with valid, supported markers, and its citations."""
        count = len(self._support)
        bare = strip_markers(sentence).strip()
        cited = list(
            dict.fromkeys(n for m in find_markers(sentence) for n in m.numbers if 1 <= n <= count)
        )
        if not bare:
            return "", []
        if not self._enabled:
            checked = [self._citation(bare, self._support.score(bare, n), "model") for n in cited]
            return renumber(sentence, {n: n for n in cited}), checked

        mapping: dict[int, int] = {}
        citations: list[Citation] = []
        ranking = self._support.rank(bare) if count else []
        best = ranking[0] if ranking else None
        by_number = {s.number: s for s in ranking}
        kept = [n for n in cited if by_number[n].score >= self._keep]
        for number in kept:
            mapping[number] = number
            citations.append(self._citation(bare, by_number[number], "model"))
        if best is not None and best.score >= self._threshold and best.number not in mapping:
            for number in cited:
                if number not in mapping:  # unsupported: moved to the source that supports it
                    mapping[number] = best.number
                    citations.append(self._citation(bare, best, "moved"))
                    break
        text = renumber(sentence, mapping)
        if (
            not mapping
            and best is not None
            and best.score >= self._threshold
            and needs_citation(bare)
        ):
            text = insert_marker(text, render([best.number]))
            citations.append(self._citation(bare, best, "added"))
        return text, citations

    @staticmethod
    def _citation(sentence: str, s: Support, origin: Origin) -> Citation:
        return Citation(s.number, sentence, s.quote, s.quote_start, s.quote_end, s.score, origin)


def needs_citation(sentence: str) -> bool:
    """Whether a sentence states something a source should back (not a question or a refusal)."""
    stripped = sentence.strip()
    if stripped.endswith("?") or _NO_ANSWER.search(stripped):
        return False
    return len(content_terms(stripped)) >= 3


def insert_marker(sentence: str, marker: str) -> str:
    """Put ``marker`` at the end of the sentence, before its closing punctuation."""
    stripped = sentence.rstrip()
    trailing = sentence[len(stripped) :]
    match = _END_PUNCT.search(stripped)
    if match:
        return f"{stripped[: match.start()].rstrip()} {marker}{match.group(1)}{trailing}"
    return f"{stripped} {marker}{trailing}"
