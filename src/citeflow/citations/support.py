"""How well a source supports an answer sentence, and which of its passages is the quote.

`LexicalSupport` scores a statement against each source by IDF-weighted term recall: the share
of the statement's content words (weighted by how specific they are among the answer's sources)
that stand in one source sentence, two adjacent ones, or the whole source (a statement may join
facts from several sentences of a paragraph). It needs no model, is deterministic, and costs well
under a millisecond per sentence; the best window is the citation's quote, a single sentence
preferred to a pair and a pair to the whole source (`WINDOW_PENALTY`, `SOURCE_PENALTY`), which
is quoted as the shortest run of its sentences that holds the words it shares with the statement.
Between sources of equal support, the one whose quote holds the statement's words in the same
order, as a phrase, ranks first, and then the one that says the longest part of it word for word.

Words that repeat the question weigh less (`ASKED_WEIGHT`): the citation must back what the
sentence adds to the question; a question word that no source holds does not count at all (it
is how the asker put it, not what the documents say). A statement that denies something is not
backed by a window that does not (`NEGATION_PENALTY`): the words match, the statement does not.

This is the cheap scorer behind `citeflow.citations.verify.LexicalVerifier`; the LLM judge
(`citeflow.citations.judge`) asks the same question of a model.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from difflib import SequenceMatcher
from functools import lru_cache
from itertools import pairwise

from citeflow.citations.text import (
    content_terms,
    question_parts,
    sentence_spans,
    statement_of,
    term_set,
    word_terms,
)

#: what a two-sentence window must gain over one sentence to be the quote
WINDOW_PENALTY = 0.1
#: what the whole source must gain over its best window to be the quote
SOURCE_PENALTY = 0.15
#: what a window's support is multiplied by when the statement denies something and the window
#: does not: the words match, the statement does not
NEGATION_PENALTY = 0.5
_NEGATION = re.compile(
    r"\b(?:not|no|never|neither|nor|none|nothing|cannot|without)\b|n't\b",
    re.IGNORECASE,
)
#: weight of a statement's words that repeat the question, against its other words
ASKED_WEIGHT = 0.5


def negates(sentence: str) -> bool:
    """Whether a sentence denies something ("not", "never", "no", "n't", ...)."""
    return _NEGATION.search(sentence) is not None


@dataclass(frozen=True, slots=True)
class Support:
    """Support of one statement by one source (1-based ``number``), with its quote."""

    number: int
    score: float
    quote: str
    quote_start: int
    quote_end: int
    phrase: tuple[int, int] = (0, 0)
    """Between sources of equal ``score``: how much of the statement the quote holds as a
    phrase (its consecutive content-word pairs, then its longest run word for word); set by
    `LexicalSupport.rank` on the sources tied for the best score."""


@dataclass(frozen=True, slots=True)
class _Window:
    start: int
    end: int
    terms: frozenset[str]
    penalty: float = 0.0
    negated: bool = False


def _narrowest(windows: Sequence[_Window], terms: frozenset[str]) -> tuple[int, int]:
    """The shortest run of a source's sentences (its unpenalised windows) that holds ``terms``."""
    sentences = [w for w in windows if not w.penalty]
    runs = []
    for i, first in enumerate(sentences):
        held: set[str] = set()
        for count, last in enumerate(sentences[i:]):
            held |= last.terms
            if terms <= held:  # the shortest run from this sentence on
                runs.append((count, first.start, last.end))
                break
    _, start, end = min(runs)
    return start, end


@lru_cache(maxsize=4096)
def _windows_of(text: str) -> tuple[_Window, ...]:
    """A source's sentences, adjacent pairs and the whole source with their terms; memoised, as
    sources repeat from question to question (a server's popular chunks)."""
    singles = [
        _Window(s, e, term_set(text[s:e]), negated=negates(text[s:e]))
        for s, e in sentence_spans(text)
    ]
    pairs = [
        _Window(a.start, b.end, a.terms | b.terms, WINDOW_PENALTY, a.negated or b.negated)
        for a, b in pairwise(singles)
    ]
    if len(singles) <= 2:
        return (*singles, *pairs)
    terms = frozenset().union(*(w.terms for w in singles))
    negated = any(w.negated for w in singles)
    whole = _Window(singles[0].start, singles[-1].end, terms, SOURCE_PENALTY, negated)
    return (*singles, *pairs, whole)


@lru_cache(maxsize=4096)
def word_pairs(text: str) -> frozenset[tuple[str, str]]:
    """The consecutive pairs of a text's content words (stopwords skipped), in order."""
    return frozenset(pairwise(content_terms(text)))


def longest_common_run(statement: str, quote: str) -> int:
    """How many words, stopwords included, the longest passage ``statement`` and ``quote`` have
    in common word for word is."""
    a, b = word_terms(statement), word_terms(quote)
    # no junk heuristic: every word counts, however often it occurs in a long quote
    return SequenceMatcher(None, a, b, autojunk=False).find_longest_match().size


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
    for every text). Words no text contains still count in a part's whole, at the highest IDF
    (counting only the texts' words lowered SciFact's citation precision from 0.70 to 0.66).
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
        """The share of the question ``terms`` hold, in the part they cover best (1 when the
        question constrains nothing)."""
        shares = (
            sum(self._idf.get(t, 0.0) for t in asked & terms) / total
            for asked, total in self._parts
        )
        return max(shares, default=1.0)


@dataclass(frozen=True, slots=True)
class _Weighed:
    terms: frozenset[str]
    weight: dict[str, float]
    total: float
    denies: bool


class LexicalSupport:
    """Scores statements against a fixed list of source texts (``texts[0]`` is Source 1)."""

    def __init__(
        self,
        texts: Sequence[str],
        *,
        question: str | None = None,
        asked_weight: float = ASKED_WEIGHT,
    ) -> None:
        self._texts = list(texts)
        self._windows = [_windows_of(t) for t in self._texts]
        df: Counter[str] = Counter()
        for windows in self._windows:
            df.update(frozenset().union(*(w.terms for w in windows)) if windows else ())
        self._idf = idf_of(df, len(self._texts))
        self._idf_unseen = unseen_idf(len(self._texts))
        self._asked = asked_terms(question or "")
        self._asked_weight = asked_weight

    def __len__(self) -> int:
        return len(self._texts)

    def score(self, statement: str, number: int) -> Support:
        """Support of ``statement`` by source ``number`` (1-based), with its quote."""
        return self._score(self._weighed(statement), number)

    def rank(self, statement: str, *, denied: bool = False) -> list[Support]:
        """Support of ``statement`` by every source, best first; ``denied``: the statement is
        what an answer denies ("No, it is not true that X")."""
        weighed = self._weighed(statement, denied)
        scored = [self._score(weighed, n) for n in range(1, len(self._texts) + 1)]
        ranked = sorted(scored, key=lambda s: (-s.score, s.number))
        tied = [s for s in ranked if ranked[0].score - s.score < 1e-9] if ranked else []
        if len(tied) > 1:
            # equal word support: the quote that holds the statement's words as a phrase (its
            # consecutive word pairs in the same order) backs it better than scattered words,
            # and then the one that says the longest part of it word for word
            pairs = word_pairs(statement)

            def phrase(s: Support) -> tuple[int, int]:
                return len(pairs & word_pairs(s.quote)), longest_common_run(statement, s.quote)

            tied = [replace(s, phrase=phrase(s)) for s in tied]
            tied.sort(key=lambda s: (-s.phrase[0], -s.phrase[1]))  # stable: number order
            ranked[: len(tied)] = tied
        return ranked

    def _weighed(self, statement: str, denied: bool = False) -> _Weighed:
        """A statement's words with their share in its support: the IDF (the highest for a word
        no source holds), less for a word of the question."""
        terms = term_set(statement)
        idf, unseen, asked, less = self._idf, self._idf_unseen, self._asked, self._asked_weight
        # a word of the question that no source holds is the asker's framing ("the author" of
        # a text written as "I"): no evidence either way, so it does not count
        weight = {
            t: 0.0
            if t in asked and t not in idf
            else idf.get(t, unseen) * (less if t in asked else 1.0)
            for t in terms
        }
        if terms and not any(weight.values()):  # only the question's words: they are all it says
            weight = {t: idf.get(t, unseen) for t in terms}
        return _Weighed(terms, weight, sum(weight.values()), denied or negates(statement))

    def _score(self, statement: _Weighed, number: int) -> Support:
        windows = self._windows[number - 1]
        if not statement.terms or not windows:
            return Support(number, 0.0, "", 0, 0)
        best, best_key, best_support = windows[0], -math.inf, 0.0
        for window in windows:
            shared = statement.terms & window.terms
            support = sum(statement.weight[t] for t in shared) / statement.total if shared else 0.0
            if statement.denies and not window.negated:
                support *= NEGATION_PENALTY
            key = support - window.penalty
            # strictly better only: on ties the single sentence (listed first) stays
            if key > best_key + 1e-9:
                best, best_key, best_support = window, key, support
        start, end = best.start, best.end
        if best.penalty == SOURCE_PENALTY:  # the whole source: quote what holds the shared words
            start, end = _narrowest(windows, statement.terms & best.terms)
        text = self._texts[number - 1]
        return Support(number, best_support, text[start:end], start, end)
