"""Attribute first: the source sentences that bear on the question, chosen before the answer.

Given the numbered sources, `select_evidence` keeps the sentences that cover the question best
(`QuestionCoverage`, IDF-weighted over all the sources' sentences), at most
`EVIDENCE_PER_SOURCE` from one source and `EVIDENCE_LIMIT` in all, each with the sentence that
follows it. The model is then shown only this evidence, under each sentence's source number, so
every sentence it writes is drawn from evidence whose source is known before the sentence is
written, and it cannot copy a source's passages that are beside the question. The source
numbers and the checked citations still refer to the whole numbered sources.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from citeflow.citations.support import QuestionCoverage
from citeflow.citations.text import sentence_spans, term_set

#: most evidence sentences shown to the model, and most from one source
EVIDENCE_LIMIT = 6
EVIDENCE_PER_SOURCE = 3


@dataclass(frozen=True, slots=True)
class Evidence:
    """The chosen sentences of Source ``number`` (1-based), as spans of its text, in order."""

    number: int
    spans: tuple[tuple[int, int], ...]

    def text(self, source: str) -> str:
        return " ".join(source[s:e] for s, e in self.spans)


def select_evidence(texts: Sequence[str], question: str) -> list[Evidence]:
    """The evidence of each source that has some, in source order (see the module)."""
    candidates = [
        (number, position, term_set(text[start:end]))
        for number, text in enumerate(texts, start=1)
        for position, (start, end) in enumerate(sentence_spans(text))
    ]
    coverage = QuestionCoverage.over(question, [terms for _, _, terms in candidates])
    ranked = sorted(candidates, key=lambda c: (-coverage(c[2]), c[0], c[1]))
    chosen: dict[int, list[int]] = {}  # source number -> positions of its chosen sentences
    for number, position, terms in ranked:
        if sum(map(len, chosen.values())) >= EVIDENCE_LIMIT:
            break
        if coverage(terms) > 0 and len(chosen.get(number, [])) < EVIDENCE_PER_SOURCE:
            chosen.setdefault(number, []).append(position)
    if not chosen:  # the question shares no word with any source: show each source's opening
        chosen = {n: [0] for n, t in enumerate(texts, start=1) if t.strip()}
    evidence = []
    for number, positions in sorted(chosen.items()):
        spans = sentence_spans(texts[number - 1])
        shown = sorted({p + step for p in positions for step in (0, 1)})  # and the next one
        evidence.append(Evidence(number, tuple(spans[p] for p in shown if p < len(spans))))
    return evidence


def format_evidence(
    texts: Sequence[str], evidence: Sequence[Evidence], first_number: int = 1
) -> str:
    """The prompt's context: each source's evidence under its number, ``[N] text`` (``texts[0]``
    is Source ``first_number``)."""
    return "\n\n".join(
        f"[{first_number + e.number - 1}] {e.text(texts[e.number - 1])}" for e in evidence
    )
