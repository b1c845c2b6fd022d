"""The LLM judge of a citation: its question, and P(Yes) read from first-token log-probabilities."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest
from llama_index.core.llms import ChatMessage

from citeflow.citations.judge import LLMJudge, TokenLogprobs, judged_statement, yes_probability


class ScriptedLogprobs:
    """A fake LLM that answers every judge question with the same first-token alternatives."""

    def __init__(self, alternatives: dict[str, float]) -> None:
        self.alternatives = alternatives
        self.asked: list[list[ChatMessage]] = []

    async def afirst_token_logprobs(
        self, messages: Sequence[ChatMessage], *, top: int = 10
    ) -> dict[str, float]:
        self.asked.append(list(messages))
        ranked = sorted(self.alternatives.items(), key=lambda kv: -kv[1])
        return dict(ranked[:top])


def test_yes_probability_weighs_yes_against_no_only() -> None:
    alternatives = {
        "Yes": math.log(0.6),
        " yes": math.log(0.1),
        "No": math.log(0.2),
        "To": math.log(0.05),
    }
    assert yes_probability(alternatives) == pytest.approx(0.7 / 0.9)
    assert yes_probability({"The": math.log(0.9), "It": math.log(0.1)}) is None
    assert yes_probability({"NO": 0.0}) == 0.0


def test_the_judge_is_asked_about_the_statement_not_its_frame() -> None:
    assert judged_statement("Yes, it is true that X raises Y.") == "X raises Y."
    assert judged_statement("X raises Y.") == "X raises Y."
    denial = "No, it is not true that X raises Y."
    assert judged_statement(denial) == denial  # a denial stays a denial


async def test_llm_judge_asks_one_question_per_citation() -> None:
    llm = ScriptedLogprobs({"No": math.log(0.75), "Yes": math.log(0.25)})
    assert isinstance(llm, TokenLogprobs)
    judge = LLMJudge(llm, top=2)
    quote = "Ultrasound imaging  reduced the risk\nof traumatic procedures."
    score = await judge.support("Yes, ultrasound raises the risk of trauma [1].", quote)
    assert score == pytest.approx(0.25)
    [messages] = llm.asked
    assert messages[0].role.value == "system" and "Yes or No" in (messages[0].content or "")
    user = messages[1].content or ""
    assert "Passage: Ultrasound imaging reduced the risk of traumatic procedures.\n" in user
    assert "Statement: ultrasound raises the risk of trauma.\n" in user  # no marker
