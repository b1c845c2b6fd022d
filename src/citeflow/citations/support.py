"""How well a source supports an answer sentence, and which of its sentences is the quote.

`LexicalSupport` scores a sentence against each source by IDF-weighted term recall: the share of
the sentence's content words (weighted by how specific they are among the sources) that stand in
one source sentence or two adjacent ones. It needs no model, is deterministic, and costs well
under a millisecond per sentence; the best window is the citation's quote.

Source sentences that only ask or announce something ("We examined whether X", "The aim was to
test X", "Does X?") do not count as support: they share the words of X without stating it, and
were the commonest wrong quote when calibrating against SciFact's gold evidence.

Given the ``question``, each quote also gets a *relevance*: the share (IDF-weighted) of the
question's content words that stand in it, counting only words that occur in some source (a
question worded unlike every source, "Summarize the essay", constrains nothing: relevance 1). A
citation should point at evidence that bears on what was asked; a sentence of the answer that
restates a source's background ("This is because ...") is faithful to that source but is not
evidence for the answer, and citing it was the commonest wrong citation left after the support
threshold (see `citeflow.citations.repair`). The quote of a source is the window with the best
``support + QUESTION_WEIGHT × relevance``, a two-sentence window paying ``WINDOW_PENALTY``: the
statement's own sentence first, the one that answers the question when several state it.

Words match while statements do not in two ways, and both lower a window's support: the
sentence denies and the window does not (`NEGATION_PENALTY`), or the sentence says something goes
up where the window, about the same thing, says it goes down, or the reverse
(`DIRECTION_PENALTY`: "ultrasound guidance raises the number of traumatic procedures" against
"ultrasound imaging reduced the risk of traumatic procedures"). "The same thing" is local: each
direction word is paired with the window's direction word whose surrounding words it shares most
(`directions`, `opposed`), so "decreased the risk of nausea but ... an increased risk of
bleeding" opposes "decreases the risk of bleeding". A denial and an opposite direction cancel
("not faster" is what "slower" says). On SciFact's labelled evidence these were the citations of
"Yes, X" sentences quoting the gold sentence that contradicts X (see `citeflow eval`'s stance
check).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from citeflow.citations.text import question_parts, sentence_spans, statement_of, term_set

#: weight of the question's relevance when choosing the quote of a source (support comes first)
QUESTION_WEIGHT = 0.5
#: what a two-sentence window must gain over one sentence to be the quote
WINDOW_PENALTY = 0.1
#: what a window's support is multiplied by when the sentence denies something and the window
#: does not ("The author did not work at Y Combinator" against "... started Y Combinator"): the
#: words match, the statement does not
NEGATION_PENALTY = 0.5
_NEGATION = re.compile(
    r"\b(?:not|no|never|neither|nor|none|nothing|cannot|without|fails?|failed)\b|n't\b",
    re.IGNORECASE,
)

#: what a window's support is multiplied by when the sentence and the window change something
#: in opposite directions ("X raises the number of Y" against "X reduced the risk of Y"): the
#: words match, the direction does not
DIRECTION_PENALTY = 0.25
_UP = re.compile(
    r"\b(?:increas\w*|rais(?:e|es|ed|ing)|higher|elevat\w*|enhanc\w*|promot\w*|improv\w*"
    r"|stimulat\w*|induc(?:e|es|ed|ing|tion)|activat\w*|accelerat\w*|faster|up-?regulat\w*"
    r"|more|greater|greatest|highest|better|stronger|boost\w*|severe|worse\w*)\b",
    re.IGNORECASE,
)
_DOWN = re.compile(
    r"\b(?:decreas\w*|reduc\w*|lower(?:s|ed|ing)?|diminish\w*|attenuat\w*"
    r"|inhibit(?:s|ed|ing|ion)?|impair\w*|suppress\w*|slow\w*|down-?regulat\w*|declin\w*"
    r"|less|least|lowest|fewer|weaker|milder|mild|unable)\b",
    re.IGNORECASE,
)


#: words before and after a direction word that say what goes up or down (mostly after it: "an
#: increased risk of postoperative bleeding", "reduced the risk of traumatic procedures")
DIRECTION_SCOPE = (2, 4)
_TOKEN = re.compile(r"\S+")


@dataclass(frozen=True, slots=True)
class Direction:
    """One word saying something goes up (or down), and the content words around it."""

    up: bool
    key: str
    scope: frozenset[str]


@lru_cache(maxsize=16384)
def directions(text: str) -> tuple[Direction, ...]:
    """The words of ``text`` that say something goes up or down, each with the content words of
    its clause within `DIRECTION_SCOPE` words before and after it (its key is its first five
    letters: "increased" and "increase" are one word)."""
    tokens = _TOKEN.findall(text)
    out = []
    for i, token in enumerate(tokens):
        word = token.strip(".,;:()[]\"'")
        up = _UP.fullmatch(word)
        found = up or _DOWN.fullmatch(word)
        if found is None:
            continue
        around = _clause_around(tokens, i)
        out.append(
            Direction(up is not None, found.group(0)[:5].lower(), term_set(" ".join(around)))
        )
    return tuple(out)


def _clause_around(tokens: Sequence[str], i: int) -> list[str]:
    """The words `DIRECTION_SCOPE` before and after ``tokens[i]``, within its clause (a comma,
    semicolon or colon ends one: "... microtubules, and inhibits axonal transport")."""
    before, after = DIRECTION_SCOPE
    left: list[str] = []
    for token in reversed(tokens[max(0, i - before) : i]):
        if token[-1] in ",;:":
            break
        left.insert(0, token)
    right: list[str] = []
    if tokens[i][-1] not in ",;:":
        for token in tokens[i + 1 : i + 1 + after]:
            right.append(token)
            if token[-1] in ",;:":
                break
    return left + right


def opposed(
    sentence: Sequence[Direction], window: Sequence[Direction], weight: dict[str, float]
) -> bool:
    """Whether a window says the opposite of the sentence about the same thing: for some
    direction word of the sentence, the window's direction words whose surroundings share the
    most of its surroundings (``weight``-ed) all go the other way ("decreases risk of bleeding"
    against "decreased the risk of nausea but ... an increased risk of bleeding")."""
    for said in sentence:
        best, ways = 0.0, set()
        for other in window:
            shared = sum(weight.get(t, 0.0) for t in said.scope & other.scope)
            if shared > best + 1e-9:
                best, ways = shared, {other.up}
            elif shared > 0 and abs(shared - best) <= 1e-9:
                ways.add(other.up)
        if best > 0 and ways == {not said.up}:
            return True
    return False


#: weight of an answer sentence's words that repeat the question, against its other words: the
#: citation must back what the sentence adds ("The author used Fortran on the IBM 1401" cites the
#: source saying "Fortran", not the one saying "IBM 1401" most often)
ASKED_WEIGHT = 0.5

# A sentence that asks, or states what was to be found out, mentions a claim without supporting
# it: "We examined whether X", "The aim of this study was to test X", "Does X?".
_NOT_ASSERTED = re.compile(
    r"\?[\"')\]]*\s*$|\bwhether\b|\bhypothes[ie]s|\bhypothesi[sz]ed\b"
    r"|\b(?:aims?|aimed|objectives?|purpose|goals?)\s+(?:of|was|were|is|are|to)\b"
    r"|\bwe\s+(?:sought|aimed|set out|asked)\b",
    re.IGNORECASE,
)


def negates(sentence: str) -> bool:
    """Whether a sentence denies something ("not", "never", "no", "n't", ...)."""
    return _NEGATION.search(sentence) is not None


def asserts(sentence: str) -> bool:
    """Whether a source sentence states something (not a question, an aim or a hypothesis)."""
    return _NOT_ASSERTED.search(sentence) is None


@dataclass(frozen=True, slots=True)
class Support:
    """Support of one answer sentence by one source (1-based ``number``)."""

    number: int
    score: float
    quote: str
    quote_start: int
    quote_end: int
    relevance: float = 1.0
    """IDF-weighted share of the question's words in the quote (words no source contains count
    in the whole at the highest IDF), for the question part it covers best; 1 without a question"""


@dataclass(frozen=True, slots=True)
class _Window:
    start: int
    end: int
    terms: frozenset[str]
    pair: bool = False
    negated: bool = False
    direction: tuple[Direction, ...] = ()


@lru_cache(maxsize=4096)
def _windows_of(text: str, assertions_only: bool) -> tuple[_Window, ...]:
    """A source's sentences and adjacent pairs with their terms; memoised, as sources repeat
    from question to question (a server's popular chunks) and this is most of the scoring."""
    spans = sentence_spans(text)
    terms = [
        term_set(text[s:e]) if not assertions_only or asserts(text[s:e]) else frozenset[str]()
        for s, e in spans
    ]
    negated = [negates(text[s:e]) for s, e in spans]
    ways = [directions(text[s:e]) for s, e in spans]
    windows = [
        _Window(s, e, t, negated=n, direction=d)
        for (s, e), t, n, d in zip(spans, terms, negated, ways, strict=True)
    ]
    windows += [
        _Window(
            spans[i][0],
            spans[i + 1][1],
            terms[i] | terms[i + 1],
            pair=True,
            negated=negated[i] or negated[i + 1],
            direction=ways[i] + ways[i + 1],
        )
        for i in range(len(spans) - 1)
    ]
    return tuple(windows)


def asked_terms(question: str) -> frozenset[str]:
    """The content words a question asks about, without its framing ("Is it true that")."""
    return term_set(statement_of(question).rstrip(" ?"))


def idf_of(df: Counter[str], n: int) -> dict[str, float]:
    """Inverse document frequency of each term of ``df`` (term → how many of ``n`` texts)."""
    return {t: math.log(1.0 + (n + 1) / (c + 0.5)) for t, c in df.items()}


def unseen_idf(n: int) -> float:
    """The IDF of a word none of ``n`` texts contains: the highest there is."""
    return math.log(1.0 + (n + 1) / 0.5)


class QuestionCoverage:
    """How much of a question a text covers: the IDF-weighted share of the question's content
    words that the text holds, for the question part it covers best.

    Each part of a compound question ("What did X do, and what do Y eat?") is asked on its own:
    a text bears on the question when it bears on one of its parts. A part none of whose words
    is in the texts constrains nothing, nor does a question made only of such parts (coverage 1
    for every text). Words no text contains still count in a part's whole, at the highest IDF:
    measured on SciFact, counting only the texts' words gave 0.66 citation precision instead of
    0.70 (0.78 vs 0.955 on the calibration half), with 40% instead of 45% uncited.
    """

    def __init__(self, question: str, idf: dict[str, float], unseen: float) -> None:
        self._idf = idf
        self._parts: list[tuple[frozenset[str], float]] = []
        for part in question_parts(question):
            asked = asked_terms(part)
            if any(t in idf for t in asked):
                self._parts.append((asked, sum(idf.get(t, unseen) for t in asked)))

    @classmethod
    def over(cls, question: str, texts: Sequence[frozenset[str]]) -> QuestionCoverage:
        """Coverage with the IDF of ``texts`` (each given by its term set); only the question's
        words are counted, so this costs a few set lookups per text."""
        asked = asked_terms(question)
        df: Counter[str] = Counter()
        for terms in texts:
            df.update(asked & terms)
        return cls(question, idf_of(df, len(texts)), unseen_idf(len(texts)))

    def __bool__(self) -> bool:
        """Whether the question constrains anything (some word of it is in the texts)."""
        return bool(self._parts)

    def __call__(self, terms: frozenset[str]) -> float:
        if not self._parts:
            return 1.0
        best = 0.0
        for asked, total in self._parts:
            shared = asked & terms
            if shared:
                best = max(best, sum(self._idf.get(t, 0.0) for t in shared) / total)
        return best


@dataclass(frozen=True, slots=True)
class _Weighed:
    terms: frozenset[str]
    weight: dict[str, float]
    total: float
    denies: bool
    direction: tuple[Direction, ...] = ()


def _polarity(sentence: _Weighed, window: _Window, direction_penalty: float) -> float:
    """What a window's support is multiplied by for saying the other thing: a sentence that
    denies against a window that neither denies nor goes the other way ("not faster" is what
    "slower" says), or a sentence that affirms against a window going the other way
    (``direction_penalty`` 1 turns the direction check off, both ways)."""
    opposite = direction_penalty < 1.0 and opposed(
        sentence.direction, window.direction, sentence.weight
    )
    if sentence.denies:
        return NEGATION_PENALTY if not window.negated and not opposite else 1.0
    return direction_penalty if opposite and not window.negated else 1.0


class LexicalSupport:
    """Scores answer sentences against a fixed list of source texts (``texts[0]`` is Source 1)."""

    def __init__(
        self,
        texts: Sequence[str],
        *,
        assertions_only: bool = True,
        question: str | None = None,
        question_weight: float = QUESTION_WEIGHT,
        window_penalty: float = WINDOW_PENALTY,
        asked_weight: float = ASKED_WEIGHT,
        direction_penalty: float = DIRECTION_PENALTY,
    ) -> None:
        self._texts = list(texts)
        self._windows = [_windows_of(t, assertions_only) for t in self._texts]
        df: Counter[str] = Counter()
        for windows in self._windows:
            df.update(frozenset().union(*(w.terms for w in windows)) if windows else ())
        self._idf = idf_of(df, len(self._texts))
        self._idf_unseen = unseen_idf(len(self._texts))
        self._question = QuestionCoverage(question or "", self._idf, self._idf_unseen)
        self._question_weight = question_weight if self._question else 0.0
        self._window_penalty = window_penalty
        self._asked = asked_terms(question or "")
        self._asked_weight = asked_weight
        self._direction_penalty = direction_penalty
        self._relevances: list[list[float] | None] = [None] * len(self._texts)

    def __len__(self) -> int:
        return len(self._texts)

    def relevance(self, terms: frozenset[str]) -> float:
        """Share of the question's words (IDF-weighted) among ``terms``, for the question part
        it covers best; 1 without a question."""
        return self._question(terms)

    def score(self, sentence: str, number: int, *, denied: bool = False) -> Support:
        """Support of ``sentence`` by source ``number`` (1-based), with its quote; ``denied``:
        the sentence is the statement of an answer that denies it ("No, it is not true that")."""
        return self._score(self._weighed(sentence, denied), number)

    def rank(self, sentence: str, *, denied: bool = False) -> list[Support]:
        """Support of ``sentence`` by every source, best first (``denied``: see `score`)."""
        weighed = self._weighed(sentence, denied)
        scored = [self._score(weighed, n) for n in range(1, len(self._texts) + 1)]
        return sorted(scored, key=lambda s: (-s.score, s.number))

    def _weighed(self, sentence: str, denied: bool = False) -> _Weighed:
        """A sentence's words with their share in its support: the IDF, less for a word of the
        question; and whether it denies something."""
        terms = term_set(sentence)
        idf, unseen, asked, less = self._idf, self._idf_unseen, self._asked, self._asked_weight
        weight = {t: idf.get(t, unseen) * (less if t in asked else 1.0) for t in terms}
        return _Weighed(
            terms,
            weight,
            sum(weight.values()),
            denied or negates(sentence),
            directions(sentence),
        )

    def _window_relevance(self, number: int) -> list[float]:
        """The question relevance of each window of source ``number`` (computed once)."""
        known = self._relevances[number - 1]
        if known is None:
            known = [self.relevance(w.terms) for w in self._windows[number - 1]]
            self._relevances[number - 1] = known
        return known

    def _score(self, sentence: _Weighed, number: int) -> Support:
        windows = self._windows[number - 1]
        if not sentence.terms or not windows:
            return Support(number, 0.0, "", 0, 0, 0.0)
        terms, weight, total = sentence.terms, sentence.weight, sentence.total
        best, best_key, best_support, best_relevance = windows[0], -math.inf, 0.0, 0.0
        for window, relevance in zip(windows, self._window_relevance(number), strict=True):
            shared = terms & window.terms
            support = sum(weight[t] for t in shared) / total if shared else 0.0
            support *= _polarity(sentence, window, self._direction_penalty)
            key = support + self._question_weight * relevance
            key -= self._window_penalty if window.pair else 0.0
            # strictly better only: on ties the single sentence (listed first) stays
            if key > best_key + 1e-9:
                best, best_key, best_support, best_relevance = window, key, support, relevance
        text = self._texts[number - 1]
        return Support(
            number,
            best_support,
            text[best.start : best.end],
            best.start,
            best.end,
            best_relevance,
        )
