"""Scoring what citeflow did with the perfect author's citation markers."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields

from citeflow.citations.markers import TIDIED_WORDS, find_markers, strip_markers
from citeflow.citations.text import split_sentences
from citeflow.evaluation.perfect_model.author import AuthoredSentence

__all__ = ["PerfectScore", "score_answer"]

#: how many words open an authored sentence, to find where the author joined two
_OPENING_WORDS = 3


@dataclass(frozen=True)
class PerfectScore:
    """What citeflow did with an author's markers (one answer, or a sum of them)."""

    sentences: int = 0  # authored sentences
    unaligned: int = 0  # authored sentences not found in the final text
    correct_written: int = 0
    correct_kept: int = 0  # still on their sentence
    wrong_written: int = 0
    wrong_kept: int = 0  # still on their sentence
    wrong_fixed: int = 0  # gone, and the sentence cites a correct source
    wrong_removed: int = 0  # gone, and no correct source added
    wrong_added: int = 0  # numbers on a final sentence neither written nor correct

    def merge(self, other: PerfectScore) -> PerfectScore:
        """The field-by-field sum of two scores."""
        return PerfectScore(
            **{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)}
        )

    @classmethod
    def total(cls, scores: Iterable[PerfectScore]) -> PerfectScore:
        """The sum of ``scores`` (over answers)."""
        return functools.reduce(cls.merge, scores, cls())

    @property
    def kept_rate(self) -> float | None:
        """Share of correct markers kept (None: none written)."""
        return self.correct_kept / self.correct_written if self.correct_written else None

    @property
    def fixed_or_removed_rate(self) -> float | None:
        """Share of wrong markers fixed or removed (None: none written)."""
        done = self.wrong_fixed + self.wrong_removed
        return done / self.wrong_written if self.wrong_written else None


def _key(text: str) -> str:
    """A sentence's words, lower-cased, without markers, punctuation or the function words that
    may go with a removed marker: what tidying keeps."""
    words = re.findall(r"\w+", strip_markers(text).lower())
    return " ".join(word for word in words if word not in TIDIED_WORDS)


def _opening(text: str) -> str:
    return " ".join(_key(text).split()[:_OPENING_WORDS])


def _cut_at_joints(sentence: str, openings: frozenset[str]) -> list[str]:
    """``sentence`` cut at each "; " that the author joined two of its sentences at: one followed
    by an authored sentence's opening words (a copied sentence's own semicolons stay)."""
    pieces, start = [], 0
    for joint in re.finditer(r"; ", sentence):
        if _opening(sentence[joint.end() :]) in openings:
            pieces.append(sentence[start : joint.start()])
            start = joint.end()
    return [*pieces, sentence[start:]]


def _final_sentences(
    text: str, openings: frozenset[str] = frozenset()
) -> list[tuple[str, set[int]]]:
    """The final text's sentences as (key, cited numbers), each cut where the author joined two
    (`_cut_at_joints`; ``openings``: the authored sentences' opening words); a sentence of
    markers only (a marker after the period) belongs to the sentence before it."""
    out: list[tuple[str, set[int]]] = []
    pieces = [p for s in split_sentences(text) for p in _cut_at_joints(s, openings)]
    for sentence in pieces:
        numbers = {n for marker in find_markers(sentence) for n in marker.numbers}
        key = _key(sentence)
        if not key and out:
            out[-1][1].update(numbers)
        else:
            out.append((key, numbers))
    return out


def _align(key: str, finals: list[tuple[str, set[int]]], cursor: int) -> tuple[int, int] | None:
    """The first run of final sentences from ``cursor`` (up to 4: a split sentence) whose keys
    join to ``key``."""
    for start in range(cursor, len(finals)):
        joined = ""
        for stop in range(start + 1, min(start + 4, len(finals)) + 1):
            joined = f"{joined} {finals[stop - 1][0]}".strip()
            if joined == key:
                return start, stop
            if not key.startswith(joined):
                break
    return None


def score_answer(
    authored: Sequence[AuthoredSentence], final_text: str, *, clauses: bool = False
) -> PerfectScore:
    """Compare the authored sentences with citeflow's final answer, sentence by sentence in
    order (matched by their marker-free words, so tidied punctuation and moved markers count as
    the same sentence); ``clauses``: the author wrote two to a sentence, joined by "; "."""
    openings = frozenset(_opening(s.text) for s in authored) if clauses else frozenset()
    finals = _final_sentences(final_text, openings)
    counts = dict.fromkeys((f.name for f in fields(PerfectScore)), 0)
    counts["sentences"] = len(authored)
    cursor = 0
    for sentence in authored:
        span = _align(_key(sentence.text), finals, cursor)
        cited: set[int] | None = None
        if span is None:
            counts["unaligned"] += 1
        else:
            cursor = span[1]
            cited = set().union(*(finals[i][1] for i in range(*span)))
            counts["wrong_added"] += len(cited - set(sentence.written) - sentence.correct)
        for number in sentence.written:
            kind = "correct" if number in sentence.correct else "wrong"
            counts[f"{kind}_written"] += 1
            if cited is None:
                continue
            if number in cited:
                counts[f"{kind}_kept"] += 1
            elif kind == "wrong":
                counts["wrong_fixed" if cited & sentence.correct else "wrong_removed"] += 1
    return PerfectScore(**counts)
