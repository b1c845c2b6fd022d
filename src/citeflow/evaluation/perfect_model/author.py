"""`PerfectAuthor`: answers from gold evidence whose citations are known right, or known wrong."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from citeflow.citations.sources import strip_footnotes
from citeflow.citations.text import split_sentences, term_set
from citeflow.evaluation.perfect_model.prompt import (
    Messages,
    parse_prompt,
    question_key,
    user_prompt,
)
from citeflow.evaluation.perfect_model.rewording import cite, ended, paraphrase
from citeflow.prompts import NOT_COVERED_ANSWER

__all__ = [
    "MIN_WORDS",
    "YES_NO",
    "AuthoredSentence",
    "Gold",
    "PerfectAuthor",
    "Variant",
    "joins_clauses",
    "render_reply",
]

Variant = Literal["verbatim", "paraphrase", "wrong", "clauses", "wrong-clauses"]
#: a source sentence this long that stands in gold evidence makes its source supporting
MIN_WORDS = 6
YES_NO = frozenset({"yes", "no", "maybe"})
#: a cited sentence's closing stop (before any closing quote), cut where a clause follows it
_STOP = re.compile(r"[.!?](?=[\"')\]]*\Z)")


@dataclass(frozen=True)
class Gold:
    """A question and its gold evidence texts (HotpotQA: paragraphs; SciFact: single sentences;
    PubMedQA: abstract sections), with its short answer when the dataset has one."""

    question: str
    evidence: tuple[str, ...]
    answer: str | None = None


@dataclass(frozen=True)
class AuthoredSentence:
    """One sentence the author wrote: its text without markers, the source numbers that truly
    support it, and the numbers it was written with."""

    text: str
    correct: frozenset[int]
    written: tuple[int, ...]


def _norm(text: str) -> str:
    """Whitespace and case normalised, without document footnotes (as the prompt shows them)."""
    return " ".join(strip_footnotes(text).split()).lower()


@dataclass(frozen=True)
class _GoldIndex:
    gold: Gold
    texts: tuple[str, ...]  # every evidence text, normalised
    sentences: tuple[tuple[str, str], ...]  # single-sentence evidence: (normalised, tidied)

    @classmethod
    def of(cls, gold: Gold) -> _GoldIndex:
        singles = tuple(
            (_norm(e), " ".join(strip_footnotes(e).split()))
            for e in gold.evidence
            if len(split_sentences(e.strip())) == 1
        )
        return cls(gold, tuple(_norm(e) for e in gold.evidence), singles)

    def sentences_in(self, source: str) -> list[str]:
        """The sentences of ``source`` that lie in gold evidence, in source order: a source
        sentence of `MIN_WORDS`+ words found in an evidence text, or a single-sentence evidence
        text found in the source."""
        whole = _norm(source)
        found: list[tuple[int, int, str]] = []
        for sentence in split_sentences(source):
            norm = _norm(sentence)
            if len(norm.split()) >= MIN_WORDS and any(norm in text for text in self.texts):
                found.append((whole.find(norm), 0, " ".join(sentence.split())))
        for norm, tidied in self.sentences:
            if norm and (at := whole.find(norm)) >= 0:
                found.append((at, 1, tidied))
        return list(dict.fromkeys(text for _, _, text in sorted(found)))


class PerfectAuthor:
    """Writes answers whose citations are known: each sentence from gold evidence, cited with
    its own source (``verbatim``: copied; ``paraphrase``: reworded by `paraphrase`; ``clauses``:
    copied, two to a sentence, each cited where it ends, "A [1]; B [2].", as hosted models cite
    clause by clause) or with a source that does not support it (``wrong``; ``wrong-clauses``:
    two to a sentence). A refine prompt is answered from its own sources only (the existing
    answer is not repeated): score runs whose sources fit one prompt."""

    def __init__(self, golds: Iterable[Gold], variant: Variant) -> None:
        self.variant = variant
        self._golds = {question_key(g.question): _GoldIndex.of(g) for g in golds}

    def reply(self, messages: Messages) -> str:
        """The answer to the prompt in ``messages``' last user message, markers in place."""
        return self.render(self.authored(messages))

    def render(self, authored: Sequence[AuthoredSentence]) -> str:
        """The reply text of ``authored`` sentences, as this variant writes them."""
        return render_reply(authored, clauses=joins_clauses(self.variant))

    def authored(self, messages: Messages) -> list[AuthoredSentence]:
        """The sentences `reply` writes (none: the documents do not cover the question)."""
        question, sources = parse_prompt(user_prompt(messages))
        index = self._golds.get(question_key(question))
        if index is None or not sources:
            return []
        found = {number: index.sentences_in(text) for number, text in sources}
        supporting = [number for number, _ in sources if found[number]]
        norms = {number: _norm(text) for number, text in sources}
        numbers = [number for number, _ in sources]
        out: list[AuthoredSentence] = []
        seen: set[str] = set()
        for number in supporting:  # one sentence per source, none written twice
            sentence = next((s for s in found[number] if _norm(s) not in seen), None)
            if sentence is None:
                continue
            seen.add(_norm(sentence))
            correct = frozenset(n for n in supporting if _norm(sentence) in norms[n])
            text = paraphrase(sentence) if self.variant == "paraphrase" else ended(sentence)
            out.append(
                AuthoredSentence(text, correct, (self._number(number, numbers, supporting),))
            )
        answer = " ".join((index.gold.answer or "").split())
        if out and answer:
            if answer.lower() in YES_NO:
                holders, answer = supporting, answer.lower()
            else:
                holders = [n for n in supporting if answer.lower() in norms[n]]
            if holders:
                text = f"The answer is {answer.rstrip('.')}."
                written = (self._number(holders[0], numbers, supporting),)
                # any supporting source that names the answer in its own words ("Pasek and
                # Paul" for "Pasek & Paul") supports the sentence too
                terms = term_set(answer)
                named = {n for n, t in sources if n in supporting and terms <= term_set(t)}
                correct = frozenset(holders) | (named if terms else frozenset())
                out.append(AuthoredSentence(text, correct, written))
        return out

    def _number(self, number: int, numbers: list[int], supporting: list[int]) -> int:
        """The number to cite a sentence of source ``number`` with: itself, or (``wrong``) the
        next source that supports nothing, cyclically, else a number past the last source."""
        if not self.variant.startswith("wrong"):
            return number
        at = numbers.index(number)
        ring = numbers[at + 1 :] + numbers[: at + 1]
        return next((n for n in ring if n not in supporting), max(numbers) + 1)


def joins_clauses(variant: Variant) -> bool:
    """Whether ``variant`` writes its sentences two to a sentence, as clauses."""
    return variant in ("clauses", "wrong-clauses")


def render_reply(authored: Sequence[AuthoredSentence], *, clauses: bool = False) -> str:
    """The reply text of ``authored`` sentences (each cited as written; with ``clauses``, two to
    a sentence joined by a semicolon, "A [1]; B [2]."), or the not-covered answer when there are
    none."""
    if not authored:
        return NOT_COVERED_ANSWER
    cited = [cite(s.text, s.written) for s in authored]
    if clauses:
        pairs = [cited[i : i + 2] for i in range(0, len(cited), 2)]
        cited = [
            f"{_STOP.sub('', pair[0])}; {pair[1]}" if len(pair) == 2 else pair[0] for pair in pairs
        ]
    return " ".join(cited)
