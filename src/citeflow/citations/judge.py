"""An LLM as the judge of a citation: does the quote support the sentence?

Word support (`citeflow.citations.support`) cannot tell a gold sentence worded unlike the claim
from a sentence that shares its words without stating it. An LLM can, even a small one, when it
is asked one short yes/no question and its answer is read as a probability instead of a word:
the first reply token's log-probabilities give ``P(Yes) / (P(Yes) + P(No))``
(`CITATION_JUDGE_PROMPT`). Measured on SciFact's calibration claims with the local 1.5B model,
this separates correct quotes from the rest far better than word support (ROC AUC 0.83 against
0.61 over the (claim, source) pairs the word support considers at all), and it also says "No"
to a quote that contradicts the sentence (see ``bench/citation_judge.py``).

The LLM must expose its first token's log-probabilities (`TokenLogprobs`): the in-process
llama.cpp model does (`LocalLlamaCppLLM.afirst_token_logprobs`), and so do the OpenAI and Azure
OpenAI LLMs (`citeflow.providers.openai_stream.LeanStreamingMixin`: one chat completion of one
token with ``logprobs``).

`JudgeCheck` puts the judge after the word-support repair (``CITEFLOW_CITATION_JUDGE``): each
citation the repair kept is asked about, and one whose ``P(Yes)`` is under the cut loses its
marker. The judge only takes citations away; a judge that fails, times out or answers neither Yes
nor No leaves the citation as the repair made it (logged), so a failing judge never fails or
hangs an answer.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from llama_index.core.llms import ChatMessage

from citeflow.citations.markers import cited_numbers, renumber, strip_markers
from citeflow.citations.text import frame_denies, statement_of
from citeflow.prompts import CITATION_JUDGE_PROMPT, CITATION_JUDGE_SYSTEM_PROMPT

if TYPE_CHECKING:
    from citeflow.citations.repair import Citation
    from citeflow.settings import Settings

__all__ = [
    "DEFAULT_CUT",
    "Judge",
    "JudgeCheck",
    "LLMJudge",
    "TokenLogprobs",
    "build_judge_check",
    "judge_on",
    "judged_statement",
    "yes_probability",
]

logger = logging.getLogger(__name__)

#: the P(Yes) under which the judge takes a citation away (``CITEFLOW_CITATION_JUDGE_CUT``)
DEFAULT_CUT = 0.5


@runtime_checkable
class TokenLogprobs(Protocol):
    """An LLM that gives the log-probabilities of its reply's first token."""

    async def afirst_token_logprobs(
        self, messages: Sequence[ChatMessage], *, top: int = 10
    ) -> dict[str, float]: ...


def yes_probability(logprobs: dict[str, float]) -> float | None:
    """``P(Yes) / (P(Yes) + P(No))`` over the first token's alternatives ("Yes", " yes", "YES"
    count as one); None when neither is among them (the model wanted to say something else)."""
    yes = no = 0.0
    for token, logprob in logprobs.items():
        word = token.strip().lower()
        if word == "yes":
            yes += math.exp(logprob)
        elif word == "no":
            no += math.exp(logprob)
    return yes / (yes + no) if yes + no > 0 else None


def judged_statement(sentence: str) -> str:
    """What the judge is asked about an answer sentence: its statement without an affirming
    frame ("Yes, X" → "X": "Yes" would only lean the judge), the whole sentence when the frame
    denies ("No, it is not true that X" must stay a denial); citation markers left out."""
    bare = strip_markers(sentence).strip()
    return bare if frame_denies(bare) else statement_of(bare).strip()


class LLMJudge:
    """Asks an LLM whether a quote supports an answer sentence."""

    def __init__(self, llm: TokenLogprobs, *, top: int = 10) -> None:
        self._llm = llm
        self._top = top

    @staticmethod
    def messages(sentence: str, quote: str) -> list[ChatMessage]:
        """The judge's prompt for one citation."""
        prompt = CITATION_JUDGE_PROMPT.format(
            quote=" ".join(quote.split()), statement=judged_statement(sentence)
        )
        return [
            ChatMessage(role="system", content=CITATION_JUDGE_SYSTEM_PROMPT),
            ChatMessage(role="user", content=prompt),
        ]

    async def support(self, sentence: str, quote: str) -> float | None:
        """The probability that ``quote`` supports ``sentence`` (None: the judge said neither
        Yes nor No)."""
        logprobs = await self._llm.afirst_token_logprobs(
            self.messages(sentence, quote), top=self._top
        )
        return yes_probability(logprobs)


class Judge(Protocol):
    """Anything that says how likely a quote supports an answer sentence (`LLMJudge`, or a
    cache in front of one)."""

    async def support(self, sentence: str, quote: str) -> float | None: ...


@dataclass(frozen=True)
class JudgeCheck:
    """The judge after the repair: a citation whose quote the judge finds unsupportive
    (``P(Yes) < cut``) loses its marker. ``timeout`` bounds each question; a failing or silent
    judge leaves the citation."""

    judge: Judge
    cut: float = DEFAULT_CUT
    timeout: float = 30.0

    async def verdict(self, citation: Citation) -> float | None:
        """The judge's P(Yes) for one citation; None when it failed, timed out or said neither."""
        try:
            return await asyncio.wait_for(
                self.judge.support(citation.sentence, citation.quote), self.timeout
            )
        except TimeoutError:
            logger.warning("citation judge timed out after %.0f s; citation kept", self.timeout)
        except Exception as exc:  # a judge's failure must not fail the answer
            from citeflow.providers.llm import first_line

            logger.warning("citation judge failed (%s); citation kept", first_line(exc))
        return None

    async def __call__(
        self, sentence: str, citations: Sequence[Citation]
    ) -> tuple[str, list[Citation]]:
        """``sentence`` (repaired, with its markers) and its ``citations``, without those the
        judge rejects. Citations are asked about one at a time (a local model runs them in turn
        anyway; a hosted one is asked about one or two per sentence)."""
        rejected: set[int] = set()
        for citation in citations:
            p = await self.verdict(citation)
            if p is not None and p < self.cut:
                rejected.add(citation.number)
        if not rejected:
            return sentence, list(citations)
        keep = {n: n for n in cited_numbers(sentence) if n not in rejected}
        return renumber(sentence, keep), [c for c in citations if c.number not in rejected]


def judge_on(settings: Settings) -> bool:
    """Whether the settings ask for the citation judge (``CITEFLOW_CITATION_JUDGE`` auto or on;
    never without the repair)."""
    return settings.citation_judge != "off" and settings.repair_citations


def build_judge_check(settings: Settings, llm: object) -> JudgeCheck | None:
    """The citation judge the settings ask for (`judge_on`), over ``llm``; None when it is off
    or (``auto``) when the LLM gives no log-probabilities (every provider's LLM gives them).

    Raises:
        ConfigError: ``on``, but the LLM gives no first-token log-probabilities.
    """
    if not judge_on(settings):
        return None
    if not isinstance(llm, TokenLogprobs):
        if settings.citation_judge == "on":
            from citeflow.errors import ConfigError

            raise ConfigError(
                f"CITEFLOW_CITATION_JUDGE=on, but the LLM ({type(llm).__name__}) gives no "
                "log-probabilities to judge with; set it to auto or off"
            )
        return None
    return JudgeCheck(LLMJudge(llm), cut=settings.citation_judge_cut, timeout=settings.llm_timeout)
