"""Checking and repairing the citations of an answer, one sentence at a time.

For each answer sentence: markers naming no existing source are dropped; a marker whose source
does not support the sentence is moved to the source that does, or dropped; a factual sentence
with no marker gets the source that clearly supports it. Each kept citation records the sentence,
the source number, the supporting quote and its score. Working per sentence lets the workflow
stream repaired text: what is streamed is exactly the final answer.

What is checked is the sentence's statement: "Yes, it is true that X" is checked as "X" (the
framing words are in no source and only lowered the score); a framing that denies ("No, it is
not true that X") has "X" checked as a denial, so a quote stating X does not back it. A sentence
with fewer than `MIN_CHECKABLE_TERMS` content words ("This is stated in [2].") cannot be checked,
so its markers are dropped. The model's own marker stays when its source supports the sentence
at least ``keep_ratio`` × threshold *and* ``relative`` × the best source's support; otherwise it
moves to the best source, if that reaches the threshold. The threshold
(``CITEFLOW_SUPPORT_THRESHOLD``) is calibrated with ``citeflow eval DATASET --calibrate
--citations N`` (see `citeflow.settings`).

A marker is moved, or a marker added, to the source that supports the sentence best only when
the retriever found that source about as relevant to the question as the best source
(``score_gap``, ``CITEFLOW_CITATION_SCORE_GAP``: its chunk's cosine similarity to the question
within that much of the best source's, when the scores are known); otherwise the marker is
dropped. Chunks scored under the grader's threshold (``keyword_below``,
``CITEFLOW_RELEVANCE_THRESHOLD``) are exempt: the grader kept them for holding the question's
words, which the embedder missed, so their cosine is no verdict on them (the essay's answers
about Yahoo and Sam Altman are in such chunks). Word overlap alone moved citations to passages
that share the sentence's words without being about it ("ALDH1 ... breast cancer outcomes" to a
passage on PD-L1 in breast cancer). The model's own choice is not second-guessed this way, only
the repair's.

Only sources whose quote bears on the question take part: the quote must hold ``relevance`` of
the question's words (`Support.relevance`, ``CITEFLOW_CITATION_RELEVANCE``). A sentence that only
restates background from a source ("This is because carriers have a higher risk of X [1]") keeps
no citation: the source does say it, but it is not evidence for the answer, and a reader checking
the citation against the question finds it beside the point.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal, Protocol

from citeflow.citations.markers import find_markers, render, renumber, strip_markers
from citeflow.citations.stream import SentenceStream
from citeflow.citations.support import LexicalSupport, Support
from citeflow.citations.text import content_terms, frame_denies, statement_of

Origin = Literal["model", "moved", "added"]

#: the share of the threshold at which the model's own marker stays (moves and additions need all
#: of it): the model chose that source, the repair only second-guesses it
KEEP_RATIO = 0.6

_END_PUNCT = re.compile(r"([.!?:;]+[\"')\]]*)\s*$")
#: content words a sentence needs before its citations can be checked at all ("This is stated
#: in [2]." has one: its marker is dropped rather than trusted)
MIN_CHECKABLE_TERMS = 2
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


@dataclass(frozen=True, slots=True)
class RepairPolicy:
    """What the repair asks of a citation: the settings the workflow and every replay share.

    ``threshold`` (``CITEFLOW_SUPPORT_THRESHOLD``): the support a moved or added marker needs;
    ``relevance`` (``CITEFLOW_CITATION_RELEVANCE``): the question relevance of any quote;
    ``score_gap`` (``CITEFLOW_CITATION_SCORE_GAP``) and ``keyword_below`` (the grader's
    ``CITEFLOW_RELEVANCE_THRESHOLD``): which sources a marker may be moved or added to;
    ``enabled`` (``CITEFLOW_REPAIR_CITATIONS``): off, citations are only scored;
    ``keep_ratio``: the share of the threshold the model's own marker needs (no setting).
    """

    threshold: float
    relevance: float = 0.0
    score_gap: float | None = None
    keyword_below: float = 0.0
    enabled: bool = True
    keep_ratio: float = KEEP_RATIO

    def at(self, threshold: float) -> RepairPolicy:
        """The same policy at another support threshold (a calibration sweep)."""
        return replace(self, threshold=threshold)

    def repairer(
        self, support: LexicalSupport, source_scores: Sequence[float | None] | None = None
    ) -> CitationRepairer:
        """The repairer of one answer: ``support`` over its sources, whose retrieval scores
        are ``source_scores`` (the score-gap rule applies when all are known)."""
        return CitationRepairer(
            support,
            threshold=self.threshold,
            keep_ratio=self.keep_ratio,
            relevance=self.relevance,
            enabled=self.enabled,
            source_scores=source_scores,
            score_gap=self.score_gap,
            keyword_below=self.keyword_below,
        )


class CitationRepairer:
    """Repairs the sentences of one answer against its numbered sources."""

    def __init__(
        self,
        support: LexicalSupport,
        *,
        threshold: float,
        keep_ratio: float = KEEP_RATIO,
        relative: float = 0.9,
        relevance: float = 0.0,
        enabled: bool = True,
        source_scores: Sequence[float | None] | None = None,
        score_gap: float | None = None,
        keyword_below: float = 0.0,
    ) -> None:
        self._support = support
        self._threshold = threshold
        self._relevance = relevance
        self._keep = threshold * keep_ratio
        self._relative = relative
        self._enabled = enabled
        self._targets = move_targets(source_scores, score_gap, len(support), keyword_below)

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

        statement = statement_of(bare)
        if len(content_terms(statement)) < MIN_CHECKABLE_TERMS:
            return renumber(sentence, {}), []  # nothing to check a citation against
        mapping: dict[int, int] = {}
        citations: list[Citation] = []
        denied = frame_denies(bare)  # "No, it is not true that X": checked as not-X
        ranking = self._support.rank(statement, denied=denied) if count else []
        # only quotes that bear on the question can back a citation
        ranking = [s for s in ranking if s.relevance >= self._relevance - 1e-9]
        best = ranking[0] if ranking else None
        by_number = {s.number: s for s in ranking}
        floor = max(self._keep, self._relative * best.score) if best is not None else self._keep
        kept = [n for n in cited if n in by_number and by_number[n].score >= floor - 1e-9]
        for number in kept:
            mapping[number] = number
            citations.append(self._citation(bare, by_number[number], "model"))
        # where the repair may move or add a marker: the best-supporting source, if the
        # retriever found it about as relevant as the best one (else the marker is dropped)
        target = best if best is not None and best.number in self._targets else None
        if target is not None and target.score >= self._threshold and target.number not in mapping:
            for number in cited:
                if number not in mapping:  # unsupported: moved to the source that supports it
                    mapping[number] = target.number
                    citations.append(self._citation(bare, target, "moved"))
                    break
        text = _markers_last(renumber(sentence, mapping))
        if (
            not mapping
            and target is not None
            and target.score >= self._threshold
            and needs_citation(bare)
        ):
            text = insert_marker(text, render([target.number]))
            citations.append(self._citation(bare, target, "added"))
        return text, citations

    @staticmethod
    def _citation(sentence: str, s: Support, origin: Origin) -> Citation:
        return Citation(s.number, sentence, s.quote, s.quote_start, s.quote_end, s.score, origin)


def move_targets(
    scores: Sequence[float | None] | None, gap: float | None, count: int, keyword_below: float
) -> frozenset[int]:
    """The source numbers the repair may move or add a marker to: those whose retrieval score is
    within ``gap`` of the best one's, and those scored under ``keyword_below`` (chunks the grader
    kept for holding the question's words, not for their embedding: their cosine says nothing);
    every source when the gap or any score is unknown."""
    every = frozenset(range(1, count + 1))
    if gap is None or scores is None or len(scores) != count:
        return every
    known = [s for s in scores if s is not None]
    if len(known) != count or not known:
        return every
    best = max(known)
    return frozenset(
        n for n, s in enumerate(known, start=1) if s >= best - gap - 1e-9 or s < keyword_below
    )


class SentenceCheck(Protocol):
    """A second check after the repair, per sentence: the sentence (with its markers) and its
    citations in, what is left of them out (`citeflow.citations.judge.JudgeCheck`)."""

    async def __call__(
        self, sentence: str, citations: Sequence[Citation]
    ) -> tuple[str, list[Citation]]: ...


class RepairedAnswer:
    """An answer checked sentence by sentence as its text arrives (`SentenceStream` segments,
    each repaired by a `CitationRepairer`, then given to ``check`` when there is one): what the
    workflow streams and what a replay rebuilds. With a ``check``, feed it with `afeed` and
    `aflush`.
    """

    def __init__(self, repairer: CitationRepairer, check: SentenceCheck | None = None) -> None:
        self._repairer = repairer
        self._check = check
        self._stream = SentenceStream()
        self._parts: list[str] = []
        self.citations: list[Citation] = []

    def feed(self, delta: str) -> list[str]:
        """The repaired pieces that ``delta`` completes (empty ones left out)."""
        self._sync_only()
        return [p for segment in self._stream.feed(delta) if (p := self._add(segment))]

    def flush(self) -> list[str]:
        """The repaired pieces of what is left at the end of the text."""
        self._sync_only()
        return [p for segment in self._stream.flush() if (p := self._add(segment))]

    async def afeed(self, delta: str) -> list[str]:
        """`feed`, each sentence also checked by ``check``."""
        return [p for segment in self._stream.feed(delta) if (p := await self._aadd(segment))]

    async def aflush(self) -> list[str]:
        """`flush`, each sentence also checked by ``check``."""
        return [p for segment in self._stream.flush() if (p := await self._aadd(segment))]

    @property
    def text(self) -> str:
        return "".join(self._parts).rstrip()

    def _sync_only(self) -> None:
        if self._check is not None:
            raise TypeError("an answer with a sentence check is fed with afeed and aflush")

    def _add(self, segment: str) -> str:
        core = segment.rstrip()
        fixed, found = self._repairer.repair(core)
        return self._append(fixed, found, segment[len(core) :])

    async def _aadd(self, segment: str) -> str:
        core = segment.rstrip()
        fixed, found = self._repairer.repair(core)
        if self._check is not None and found:
            fixed, found = await self._check(fixed, found)
        return self._append(fixed, found, segment[len(core) :])

    def _append(self, fixed: str, found: list[Citation], tail: str) -> str:
        piece = fixed + tail if fixed else tail
        if not self._parts and not fixed:
            return ""  # never start the answer with bare whitespace
        self.citations.extend(found)
        self._parts.append(piece)
        return piece


def repair_text(repairer: CitationRepairer, text: str) -> tuple[str, list[Citation]]:
    """Repair a whole answer text exactly as the workflow repairs it while streaming.

    The same `RepairedAnswer` the workflow feeds token by token: replaying a model's raw reply
    through this gives the answer and citations the workflow returned. The evaluation uses it to
    score other thresholds without calling the model again.
    """
    answer = RepairedAnswer(repairer)
    answer.feed(text)
    answer.flush()
    return answer.text, answer.citations


async def arepair_text(
    repairer: CitationRepairer, text: str, check: SentenceCheck | None
) -> tuple[str, list[Citation]]:
    """`repair_text` with each sentence also checked by ``check``, as the workflow does."""
    answer = RepairedAnswer(repairer, check)
    await answer.afeed(text)
    await answer.aflush()
    return answer.text, answer.citations


def needs_citation(sentence: str) -> bool:
    """Whether a sentence states something a source should back (not a question or a refusal)."""
    stripped = sentence.strip()
    if stripped.endswith("?") or _NO_ANSWER.search(stripped):
        return False
    return len(content_terms(stripped)) >= 3


def _markers_last(sentence: str) -> str:
    """A sentence the model opened with its markers ("[1] The two main things ...") gets them at
    its end, where a reader expects them (and where Open WebUI's chips read naturally)."""
    stripped = sentence.lstrip()
    markers: list[str] = []
    end = 0
    for marker in find_markers(stripped):
        if stripped[end : marker.start].strip(" ,"):
            break
        markers.append(stripped[marker.start : marker.end])
        end = marker.end
    rest = stripped[end:].lstrip(" ,")
    if not markers or not rest.strip():
        return sentence
    leading = sentence[: len(sentence) - len(stripped)]
    return leading + insert_marker(rest, "".join(markers))


def insert_marker(sentence: str, marker: str) -> str:
    """Put ``marker`` at the end of the sentence, before its closing punctuation."""
    stripped = sentence.rstrip()
    trailing = sentence[len(stripped) :]
    match = _END_PUNCT.search(stripped)
    if match:
        return f"{stripped[: match.start()].rstrip()} {marker}{match.group(1)}{trailing}"
    return f"{stripped} {marker}{trailing}"
