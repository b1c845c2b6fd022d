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
    candidates: list[tuple[int, int, tuple[int, int], frozenset[str]]] = []
    for number, text in enumerate(texts, start=1):
        for position, (start, end) in enumerate(sentence_spans(text)):
            candidates.append((number, position, (start, end), term_set(text[start:end])))
    coverage = QuestionCoverage.over(question, [c[3] for c in candidates])
    ranked = sorted(candidates, key=lambda c: (-coverage(c[3]), c[0], c[1]))
    chosen: dict[int, list[tuple[int, int]]] = {}
    taken = 0
    for number, _, span, terms in ranked:
        if taken >= EVIDENCE_LIMIT:
            break
        if coverage(terms) <= 0 or len(chosen.get(number, [])) >= EVIDENCE_PER_SOURCE:
            continue
        chosen.setdefault(number, []).append(span)
        taken += 1
    if not chosen:  # the question shares no word with any source: show each source's opening
        chosen = {n: [sentence_spans(t)[0]] for n, t in enumerate(texts, start=1) if t.strip()}
    for number, spans in chosen.items():
        all_spans = sentence_spans(texts[number - 1])
        for span in list(spans):
            i = all_spans.index(span)
            if i + 1 < len(all_spans) and all_spans[i + 1] not in spans:
                spans.append(all_spans[i + 1])
    return [Evidence(n, tuple(sorted(spans))) for n, spans in sorted(chosen.items())]


def format_evidence(
    texts: Sequence[str], evidence: Sequence[Evidence], first_number: int = 1
) -> str:
    """The prompt's context: each source's evidence under its number, ``[N] text`` (``texts[0]``
    is Source ``first_number``)."""
    return "\n\n".join(
        f"[{first_number + e.number - 1}] {e.text(texts[e.number - 1])}" for e in evidence
    )
