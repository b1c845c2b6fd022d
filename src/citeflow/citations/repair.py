"""Checking the citations of an answer, one sentence at a time, against what its sources say.

The contract: every answer sentence that states something from the sources carries at least one
marker to a source that supports it. For each sentence, a `CitationVerifier` scores every source
for the sentence's statement (its text without markers, a marker's subject words ("Source 2
shows that X" states "shows that X") or yes/no framing) and:

* the model's own marker stays when its source supports the statement: the verifier's ``keep``
  score, and at least ``relative`` × the best source's (a marker far behind a better source is
  on the wrong one). A bare decision ("Yes [1].") is checked as the question's claim, which
  any study of the same question restates, so it, like any sentence whose words are all the
  question's, is held to ``decision_relative`` instead; and as word support cannot tell such
  studies apart on the claim's own words, a sentence stating just the claim is cited to the
  evidence the answer's earlier sentences are cited to, when a source of it supports the claim
  (the model's own choice among them first), else to the best-ranked source (the retriever's
  order for those words) among those that support it;
* a marker that closes a clause of its own ("X [1], and Y [3].") is checked against that clause,
  and a sentence no source supports whole against its clauses ("X, and Y [1][3]."), each clause
  as a sentence (`citeflow.citations.clauses`); a sentence is unsupported when a clause is;
* a marker on a source that does not support the statement is moved to the source that supports
  it best (among sources that support it equally, one the answer's earlier sentences are cited
  to), when that one reaches the verifier's ``add`` score;
* a sentence with no marker gets one to that source the same way, and a source it names in
  prose ("Per Source 2, X") is renamed to the one its markers cite (`citeflow.citations.prose`);
* markers are removed only when no source supports the statement; such a sentence is reported
  as *unsupported* (`citeflow.citations.answer.RepairedAnswer.unsupported`, and so
  `CitedResponse.unsupported` and the API's ``unsupported``), never silently left looking
  sourced. Questions, refusals, sentences with no content words, a line that leads into a list
  ("Two drugs are relevant:"), a table's header and a closing list of sources
  (`citeflow.citations.layout`) state nothing and are not reported; a sentence that only
  repeats the prompt's worked example (`citeflow.prompts.EXAMPLE_SENTENCES`), which no source
  supports, is left out of the answer, and so is one that only pointed at sources none of which
  supports it ("This is stated in [2]."): without its markers it would say nothing ("This is
  stated.").

Working per sentence lets the workflow stream checked text (`citeflow.citations.answer`): what
is streamed is exactly the final answer. Marker text is rewritten by
`citeflow.citations.markers`, which leaves no dangling clause, space before punctuation or empty
bracket behind.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Mapping, Sequence, Set
from dataclasses import dataclass, field, replace
from functools import cache
from typing import TYPE_CHECKING, Literal

from citeflow.citations.clauses import (
    Clause,
    ClauseVerdict,
    clauses,
    rewrite,
    split_at_conjunctions,
)
from citeflow.citations.layout import Layout, Place
from citeflow.citations.markers import (
    cited_numbers,
    find_markers,
    insert_marker,
    marker_is_an_object,
    markers_last,
    render,
    renumber,
    strip_markers,
)
from citeflow.citations.prose import follow_markers
from citeflow.citations.support import LexicalSupport, Support
from citeflow.citations.text import (
    content_terms,
    frame_denies,
    needs_citation,
    opens_with_question_word,
    statement_of,
    term_set,
)
from citeflow.citations.verify import CitationVerifier, JudgeVerifier, LexicalVerifier
from citeflow.prompts import EXAMPLE_SENTENCES
from citeflow.settings import CitationSettings

if TYPE_CHECKING:
    from citeflow.citations.judge import Judge

Origin = Literal["model", "moved", "added"]

#: an answer sentence that is only a decision ("Yes.", "No, it does not.", "The answer is
#: maybe."): it is about the question's claim, so that is what its citation is checked against
_BARE_DECISION = re.compile(
    r"^\W*(?:(?:so|thus|therefore|in short)\s*,?\s*)?(?:the\s+answer\s+is\s*:?\s*)?"
    r"(?:yes|no|maybe)\b",
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


@dataclass(frozen=True, slots=True)
class CitationPolicy:
    """How citations are checked: the citation settings with what only a run knows, and the
    measured margins the workflow and every re-check share.

    ``settings``: ``support_keep`` and ``support_threshold``, the word support at which the
    model's own marker stays and at which a marker is moved or added; ``judge_cut``; ``repair``
    (off: the model's markers are only validated, numbers that name no source dropped).
    ``judge``: the LLM judge as the verifier instead of word support, each call given
    ``judge_timeout`` seconds (``CITEFLOW_LLM_TIMEOUT``). ``relative``: the share of the best
    source's support the model's marker needs to stay; ``decision_relative``: the same for a
    bare decision ("Yes [1].", "The answer is no [2].").
    """

    settings: CitationSettings = field(default_factory=CitationSettings.defaults)
    judge: Judge | None = None
    judge_timeout: float = 30.0
    relative: float = 0.8
    decision_relative: float = 0.5

    def with_(self, **changes: object) -> CitationPolicy:
        """The same policy with some values changed, the settings' (``support_keep``...) or its
        own (``relative``...): a sweep, a re-check."""
        fields = CitationSettings.model_fields
        settings = {name: value for name, value in changes.items() if name in fields}
        own = {name: value for name, value in changes.items() if name not in fields}
        updated = self.settings.model_copy(update=settings)
        return replace(self, settings=updated, **own)  # type: ignore[arg-type]

    def verifier(self, texts: Sequence[str], question: str | None = None) -> CitationVerifier:
        """The verifier of one answer whose sources are ``texts`` (Source 1 first)."""
        support = LexicalSupport(texts, question=question)
        if self.judge is not None:
            return JudgeVerifier(
                support, self.judge, cut=self.settings.judge_cut, timeout=self.judge_timeout
            )
        return LexicalVerifier(
            support, keep=self.settings.support_keep, add=self.settings.support_threshold
        )

    def checker(self, texts: Sequence[str], question: str | None = None) -> CitationChecker:
        """The checker of one answer whose sources are ``texts``."""
        return CitationChecker(self, texts, question)


@dataclass(frozen=True, slots=True)
class CheckedSentence:
    """One sentence after checking: its text, its citations, whether it states something no
    source supports, and the source numbers its markers name (in their order)."""

    text: str
    citations: list[Citation]
    unsupported: bool = False
    numbers: tuple[int, ...] = ()


class CitationChecker:
    """Checks the sentences of one answer against its numbered sources (``texts``, Source 1
    first) under ``policy``."""

    def __init__(
        self, policy: CitationPolicy, texts: Sequence[str], question: str | None = None
    ) -> None:
        self.verifier = policy.verifier(texts, question)
        self._policy = policy
        self._count = len(texts)
        # the question's words as a claim: a sentence that only restates them is a decision
        self._proposition = statement_of(question or "").strip().rstrip("?").strip()
        # what a bare "Yes." says: the claim a yes/no question asks about ("Who …?" asks none)
        self._asked = "" if opens_with_question_word(question or "") else self._proposition
        # each sentence checked so far: when its check is done, and the sources it is cited to
        self._checks: list[asyncio.Future[tuple[int, ...]]] = []
        self._layout = Layout()

    async def check(self, sentence: str) -> CheckedSentence:
        """The sentence with supported markers only, and its citations. Checks of one answer's
        sentences may run at once (a judge's verdicts are awaited together); a decision that
        rests on the sentences before it waits for their checks."""
        earlier = tuple(self._checks)
        place = self._layout.place(sentence)
        done: asyncio.Future[tuple[int, ...]] = asyncio.get_running_loop().create_future()
        self._checks.append(done)
        return await _settling(self._check(sentence, earlier, place=place), done)

    async def _check(
        self,
        sentence: str,
        earlier: Sequence[asyncio.Future[tuple[int, ...]]],
        *,
        place: Place = "statement",
        whole: bool = True,
    ) -> CheckedSentence:
        bare = strip_markers(sentence).strip()
        if not bare:
            return CheckedSentence("", [])
        cited = [n for n in cited_numbers(sentence) if 1 <= n <= self._count]
        if place == "source list":  # "[1] essay.txt" under "Sources:": names, states nothing
            return CheckedSentence(renumber(sentence, {n: n for n in cited}), [])
        # what it states: "[2] shows that X" states "shows that X", which Source 1 may say
        statement = statement_of(strip_markers(sentence, name_subjects=False).strip())
        if not self._policy.settings.repair:
            return CheckedSentence(
                renumber(sentence, {n: n for n in cited}), [], numbers=tuple(cited)
            )
        if whole and (pieces := clauses(sentence)):  # "X [1], and Y [3].": [3] cites "and Y"
            by_clause = await self._by_clause(bare, pieces, earlier)
            if by_clause is not None:
                return by_clause
        denied = frame_denies(bare)  # "No, it is not true that X": checked as not-X
        states = needs_citation(bare) and place == "statement"  # a table's header names columns
        decision = _BARE_DECISION.match(bare)
        relative = self._policy.relative
        if decision and self._asked and not content_terms(bare[decision.end() :]):
            statement, states = self._asked, True  # "Yes." says the question's claim
        if term_set(statement) <= term_set(self._proposition):
            relative = self._policy.decision_relative  # restates the question's claim
        if not content_terms(statement):  # states nothing to check
            return CheckedSentence(
                "" if _only_points(sentence, bare) else renumber(sentence, {}), []
            )
        ranking = await self.verifier.rank(statement, cited, denied=denied)
        by_number = {s.number: s for s in ranking}
        best = ranking[0] if ranking else None
        keep, add = self.verifier.keep, self.verifier.add
        if (best is None or best.score < keep) and _copies_the_example(statement):
            return CheckedSentence("", [])  # the prompt's worked example, not an answer
        floor = max(keep, relative * best.score) if best is not None else keep
        band = [s.number for s in ranking if s.score >= floor - 1e-9]  # those that support it
        if band and term_set(statement) == term_set(self._proposition):  # just the claim:
            # the evidence this answer has cited decides it, when that supports the claim;
            # otherwise every source about it has its words alike, and the retriever ranked
            # them for those very words (Source 1 first): the best-ranked supporting it
            if earlier:  # `wait`, not `gather`: abandoning this check cancels no other one
                await asyncio.wait(earlier)
            evidence = {n for check in earlier for n in check.result()}
            need = keep if cited else add
            band = [_decision_source(evidence, cited, by_number, need, min(band))]
            best = by_number[band[0]]
            add = min(add, floor, best.score) if cited else add  # moving needs only support
        elif best is not None and not any(n in band for n in cited) and earlier:
            best = await _evidence_among_equals(best, ranking, earlier)
        kept = [n for n in cited if n in band]
        alone = states and not cited and (best is None or best.score < add - 1e-9)
        if whole and (len(kept) < len(cited) or alone):
            # no source says all of "X, and Y [1][3].": each clause checked on its own, and taken
            # when it cites more of the model's numbers, cites a sentence none would, or finds
            # each of the model's markers a source where the whole sentence removed some
            pieces = split_at_conjunctions(sentence)
            by_clause = await self._by_clause(bare, pieces, earlier) if pieces else None
            if by_clause is not None and (
                len(set(by_clause.numbers) & set(cited)) > len(kept)
                or alone
                or (
                    kept
                    and not by_clause.unsupported
                    and sum(c.origin != "added" for c in by_clause.citations) >= len(cited)
                )
            ):
                return by_clause
        citations = [_citation(bare, by_number[n], "model") for n in kept]
        mapping = {n: n for n in kept}
        if not mapping and best is not None and best.score >= add - 1e-9:  # a source supports it
            if cited:  # on the wrong source: moved to the one that supports the sentence
                mapping[cited[0]] = best.number
                citations.append(_citation(bare, best, "moved"))
            elif states:
                text = insert_marker(renumber(sentence, {}), render([best.number]))
                text = follow_markers(text, (best.number,), self._count)
                added = _citation(bare, best, "added")
                return CheckedSentence(text, [added], numbers=(best.number,))
        if not mapping and _only_points(sentence, bare):
            return CheckedSentence("", [])  # it said only where, and no source says it
        unsupported = not citations and states
        numbers = tuple(dict.fromkeys(mapping[n] for n in cited if n in mapping))
        text = follow_markers(markers_last(renumber(sentence, mapping)), numbers, self._count)
        return CheckedSentence(text, citations, unsupported, numbers)

    async def _by_clause(
        self,
        bare: str,
        pieces: Sequence[Clause],
        earlier: Sequence[asyncio.Future[tuple[int, ...]]],
    ) -> CheckedSentence | None:
        """A sentence checked clause by clause (`clauses`, `split_at_conjunctions`), each as a
        sentence, its markers rewritten by its own verdict; unsupported when a clause is, and
        None when no clause keeps or gets a marker."""
        verdicts: list[ClauseVerdict] = []
        followed: list[Clause] = []  # each clause's sources named in prose as its markers cite
        citations: dict[int, Citation] = {}
        loop = asyncio.get_running_loop()
        dones: list[asyncio.Future[tuple[int, ...]]] = [loop.create_future() for _ in pieces]
        # checked at once, as sentences are; a clause's decision rests on the clauses before it
        checks = await asyncio.gather(
            *(
                _settling(self._check(p.text, [*earlier, *dones[:i]], whole=False), dones[i])
                for i, p in enumerate(pieces)
            )
        )
        for i, (piece, checked) in enumerate(zip(pieces, checks, strict=True)):
            cited = [n for n in cited_numbers(piece.text) if 1 <= n <= self._count]
            mapping: dict[int, int] = {}
            added = None
            for citation in checked.citations:
                citations.setdefault(citation.number, replace(citation, sentence=bare))
                if citation.origin == "model":
                    mapping[citation.number] = citation.number
                elif citation.origin == "moved":
                    mapping[cited[0]] = citation.number
                else:
                    added = citation.number
            verdicts.append(ClauseVerdict(mapping, added))
            # the sentence's opening markers close its first clause ("[2] shows X, and …")
            text = markers_last(piece.text) if i == 0 else piece.text
            followed.append(replace(piece, text=follow_markers(text, checked.numbers, self._count)))
        if not citations:
            return None
        text = markers_last(rewrite(followed, verdicts))
        unsupported = any(checked.unsupported for checked in checks)
        return CheckedSentence(text, list(citations.values()), unsupported, tuple(citations))


async def _settling(
    check: Awaitable[CheckedSentence], done: asyncio.Future[tuple[int, ...]]
) -> CheckedSentence:
    """``check``'s result, its numbers set on ``done`` however it ends: a decision never hangs."""
    numbers: tuple[int, ...] = ()
    try:
        checked = await check
        numbers = checked.numbers
        return checked
    finally:
        done.set_result(numbers)


async def _evidence_among_equals(
    best: Support,
    ranking: Sequence[Support],
    earlier: Sequence[asyncio.Future[tuple[int, ...]]],
) -> Support:
    """Where a marker is moved or added when sources support the sentence equally (the same
    score and phrase): the first of them the answer's earlier sentences are cited to, the
    evidence it is already resting on, else ``best``."""
    equals = [s for s in ranking if abs(s.score - best.score) < 1e-9 and s.phrase == best.phrase]
    if len(equals) < 2:
        return best
    await asyncio.wait(earlier)  # `wait`, not `gather`: abandoning this check cancels no other
    evidence = {n for check in earlier for n in check.result()}
    return next((s for s in equals if s.number in evidence), best)


def _decision_source(
    evidence: Set[int],
    cited: Sequence[int],
    by_number: Mapping[int, Support],
    need: float,
    first: int,
) -> int:
    """The source a decision rests on: the ``evidence`` (the sources the answer's earlier
    sentences are cited to) where it supports the claim at ``need``, else ``first``, the
    best-ranked source that supports it; the model's own marker when it names one of those."""
    supporting = sorted(n for n in evidence if n in by_number and by_number[n].score >= need)
    own = [n for n in cited if n in supporting or n == first]
    return own[0] if own else (supporting[0] if supporting else first)


def _only_points(sentence: str, bare: str) -> bool:
    """Whether ``sentence`` only says where something is said ("This is stated in [2].", "See
    [1].", "[2]."): without its markers (``bare``) it has no letter or digit left, or its
    markers are a word's object and it says next to nothing."""
    if not any(c.isalnum() for c in bare):
        return bool(find_markers(sentence))
    return marker_is_an_object(sentence) and len(content_terms(bare)) < 2


@cache
def _example_terms() -> tuple[frozenset[str], ...]:
    return tuple(term_set(sentence) for sentence in EXAMPLE_SENTENCES)


def _copies_the_example(statement: str) -> bool:
    """Whether ``statement`` says only what a sentence of the prompt's worked example says."""
    terms = term_set(statement)
    return bool(terms) and any(terms <= example for example in _example_terms())


def _citation(sentence: str, s: Support, origin: Origin) -> Citation:
    return Citation(s.number, sentence, s.quote, s.quote_start, s.quote_end, s.score, origin)
