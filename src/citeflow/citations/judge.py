"""An LLM as the judge of a citation: does the quote support the sentence?

Word support (`citeflow.citations.support`) cannot tell a gold sentence worded unlike the claim
from a sentence that shares its words without stating it. An LLM can, even a small one, when it
is asked one short yes/no question and its answer is read as a probability instead of a word:
the first reply token's log-probabilities give ``P(Yes) / (P(Yes) + P(No))``
(`CITATION_JUDGE_PROMPT`). This separates correct quotes from the rest far better than word
support (`bench/citation_judge.py`: ROC AUC 0.83 against 0.61 with the local 1.5B model), and
it says "No" to a quote that contradicts the sentence.

The LLM must expose its first token's log-probabilities (`TokenLogprobs`): the in-process
llama.cpp model does (`LocalLlamaCppLLM.afirst_token_logprobs`), and so do the OpenAI and Azure
OpenAI LLMs (`citeflow.providers.openai_stream.LeanStreamingMixin`: one chat completion of one
token with ``logprobs``).

`citeflow.citations.verify.JudgeVerifier` uses the judge as the citation verifier
(``CITEFLOW_CITATION_JUDGE``): it scores the sources the model cited and the best word-support
candidates, and the repair keeps, moves or adds markers by its P(Yes).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from llama_index.core.llms import ChatMessage

from citeflow.citations.markers import strip_markers
from citeflow.citations.text import frame_denies, statement_of
from citeflow.prompts import CITATION_JUDGE_PROMPT, CITATION_JUDGE_SYSTEM_PROMPT

if TYPE_CHECKING:
    from citeflow.settings import Settings

__all__ = [
    "Judge",
    "LLMJudge",
    "TokenLogprobs",
    "build_judge",
    "judge_on",
    "judged_statement",
    "yes_probability",
]


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


def judge_on(settings: Settings) -> bool:
    """Whether the settings ask for the citation judge (``CITEFLOW_CITATION_JUDGE`` on, or auto
    on a hosted LLM; never without the repair)."""
    if settings.citations.judge == "off" or not settings.citations.repair:
        return False
    return settings.citations.judge == "on" or settings.llm.provider != "local"


def build_judge(settings: Settings, llm: object) -> LLMJudge | None:
    """The citation judge the settings ask for (`judge_on`) over ``llm``; None when it is off
    or (``auto``) when the LLM gives no log-probabilities.

    Raises:
        ConfigError: ``on``, but the LLM gives no first-token log-probabilities.
    """
    if not judge_on(settings):
        return None
    if not isinstance(llm, TokenLogprobs):
        if settings.citations.judge == "on":
            from citeflow.errors import ConfigError

            raise ConfigError(
                f"CITEFLOW_CITATION_JUDGE=on, but the LLM ({type(llm).__name__}) gives no "
                "log-probabilities to judge with; set it to auto or off"
            )
        return None
    return LLMJudge(llm)
