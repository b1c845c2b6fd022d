"""Verifying citations: does source N support this sentence?

A `CitationVerifier` scores every numbered source of an answer for one statement (an answer
sentence without its markers and yes/no framing), best first; `citeflow.citations.repair` then
keeps, moves or adds markers from those scores. Two verifiers answer the same question:

* `LexicalVerifier`: IDF-weighted word support (`citeflow.citations.support.LexicalSupport`):
  no model, well under a millisecond a sentence;
* `JudgeVerifier`: the LLM asked "Does the passage support the statement?" for the sources the
  model cited and the best lexical candidates (`shortlist`), its P(Yes) the score
  (`citeflow.citations.judge`). A verdict that fails, times out or is neither Yes nor No falls
  back to the lexical score, so a failing judge never fails or hangs an answer.

Each verifier states the scores at which a citation stands: ``keep`` for the model's own marker
(it chose that source) and ``add`` for a marker citeflow moves or adds.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from typing import Protocol

from citeflow.citations.judge import Judge
from citeflow.citations.support import LexicalSupport, Support
from citeflow.errors import first_line

logger = logging.getLogger(__name__)


class CitationVerifier(Protocol):
    """Scores every source of one answer for a statement."""

    keep: float
    add: float
    waits: bool
    """Whether ranking waits on a model (then an answer checks several sentences at once)."""

    async def rank(
        self, statement: str, cited: Sequence[int], *, denied: bool = False
    ) -> list[Support]:
        """The support of ``statement`` by every source, best first (``cited``: the sources the
        model named for it; ``denied``: the answer denies the statement)."""
        ...


class LexicalVerifier:
    """Word support over the answer's sources: the cheap verifier."""

    waits = False

    def __init__(self, support: LexicalSupport, *, keep: float, add: float) -> None:
        self.support = support
        self.keep = keep
        self.add = add

    async def rank(
        self, statement: str, cited: Sequence[int], *, denied: bool = False
    ) -> list[Support]:
        return self.support.rank(statement, denied=denied)


class JudgeVerifier:
    """The LLM judge over a lexical shortlist: the sources the model cited and the ``shortlist``
    best lexical candidates with some support (``floor``); every other source scores 0."""

    shortlist = 2
    floor = 0.2
    waits = True

    def __init__(
        self, support: LexicalSupport, judge: Judge, *, cut: float, timeout: float
    ) -> None:
        self.support = support
        self.judge = judge
        self.keep = self.add = cut
        self.timeout = timeout
        #: this answer's verdicts: supported, unsupported, failed, timed_out (metrics)
        self.verdicts: Counter[str] = Counter()

    async def rank(
        self, statement: str, cited: Sequence[int], *, denied: bool = False
    ) -> list[Support]:
        lexical = self.support.rank(statement, denied=denied)
        # the sources the model cited and the best candidates (a cited number that names no
        # source is no candidate's)
        asked = {*cited, *(s.number for s in lexical[: self.shortlist] if s.score >= self.floor)}
        judged = [c for c in lexical if c.number in asked and c.quote]
        # one call per candidate, all at once: a sentence waits for its slowest verdict only
        verdicts = await asyncio.gather(*(self._verdict(statement, c) for c in judged))
        by_number = {
            c.number: c.score if v is None else v for c, v in zip(judged, verdicts, strict=True)
        }
        scored = [replace(c, score=by_number.get(c.number, 0.0)) for c in lexical]
        return sorted(scored, key=lambda s: -s.score)  # stable: equal verdicts in lexical order

    async def _verdict(self, statement: str, candidate: Support) -> float | None:
        try:
            verdict = await asyncio.wait_for(
                self.judge.support(statement, candidate.quote), self.timeout
            )
        except TimeoutError:
            self.verdicts["timed_out"] += 1
            logger.warning("citation judge timed out after %.0f s; word support used", self.timeout)
        except Exception as exc:  # a judge's failure must not fail the answer
            self.verdicts["failed"] += 1
            logger.warning("citation judge failed (%s); word support used", first_line(exc))
        else:
            if verdict is None:
                self.verdicts["failed"] += 1  # neither Yes nor No
            else:
                self.verdicts["supported" if verdict >= self.keep else "unsupported"] += 1
            return verdict
        return None
