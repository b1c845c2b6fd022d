"""The LLM judge of a citation: its question, and P(Yes) read from first-token log-probabilities."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from llama_index.core.llms import ChatMessage

from citeflow.citations.judge import (
    JudgeCheck,
    LLMJudge,
    TokenLogprobs,
    build_judge_check,
    judged_statement,
    yes_probability,
)
from citeflow.citations.repair import (
    CitationRepairer,
    RepairedAnswer,
    RepairPolicy,
    arepair_text,
    repair_text,
)
from citeflow.citations.support import LexicalSupport
from citeflow.errors import ConfigError
from citeflow.evaluation.judging import settings_judge
from citeflow.settings import Settings


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


# --- the judge after the repair --------------------------------------------------------------

SOURCES = [
    "Yahoo bought Viaweb in 1998 for about 49 million dollars.",
    "Ducks live near ponds and rivers all over the world.",
]


class ScriptedJudge:
    """A judge with a fixed P(Yes) per quote's first word; raises or stalls when told to."""

    def __init__(self, verdicts: dict[str, float | BaseException | None], stall: float = 0) -> None:
        self.verdicts = verdicts
        self.stall = stall
        self.asked: list[tuple[str, str]] = []

    async def support(self, sentence: str, quote: str) -> float | None:
        self.asked.append((sentence, quote))
        if self.stall:
            await asyncio.sleep(self.stall)
        verdict = self.verdicts[quote.split()[0]]
        if isinstance(verdict, BaseException):
            raise verdict
        return verdict


def _repairer() -> CitationRepairer:
    return RepairPolicy(threshold=0.5).repairer(LexicalSupport(SOURCES))


RAW = "Yahoo bought Viaweb in 1998 [1]. Ducks live near ponds and rivers [2]."


async def test_the_judge_takes_away_the_citations_it_rejects() -> None:
    judge = ScriptedJudge({"Yahoo": 0.9, "Ducks": 0.2})
    answer, citations = await arepair_text(_repairer(), RAW, JudgeCheck(judge, cut=0.5))
    assert answer == "Yahoo bought Viaweb in 1998 [1]. Ducks live near ponds and rivers."
    assert [(c.number, c.quote.split()[0]) for c in citations] == [(1, "Yahoo")]
    assert [s for s, _ in judge.asked] == [
        "Yahoo bought Viaweb in 1998.",
        "Ducks live near ponds and rivers.",
    ]
    # without a judge, the repair alone keeps both
    plain, both = repair_text(_repairer(), RAW)
    assert plain == RAW and [c.number for c in both] == [1, 2]
    # the cut decides: at 0.1 both stay
    _, kept = await arepair_text(_repairer(), RAW, JudgeCheck(judge, cut=0.1))
    assert [c.number for c in kept] == [1, 2]


async def test_a_failing_silent_or_slow_judge_leaves_the_citation(
    caplog: pytest.LogCaptureFixture,
) -> None:
    for verdicts, stall in (
        ({"Yahoo": RuntimeError("HTTP 500 from the judge"), "Ducks": None}, 0.0),
        ({"Yahoo": 0.0, "Ducks": 0.0}, 5.0),
    ):
        check = JudgeCheck(ScriptedJudge(verdicts, stall=stall), cut=0.5, timeout=0.05)
        started = time.perf_counter()
        answer, citations = await arepair_text(_repairer(), RAW, check)
        assert time.perf_counter() - started < 2.0  # never waits for a stalled judge
        assert answer == RAW and [c.number for c in citations] == [1, 2]
    assert "HTTP 500 from the judge" in caplog.text and "timed out" in caplog.text


def test_an_answer_with_a_judge_is_fed_asynchronously() -> None:
    answer = RepairedAnswer(_repairer(), JudgeCheck(ScriptedJudge({})))
    with pytest.raises(TypeError, match="afeed"):
        answer.feed(RAW)


def test_the_judge_is_on_by_default_for_an_llm_with_log_probabilities() -> None:
    llm = ScriptedLogprobs({"Yes": 0.0})

    def settings(**values: object) -> Settings:
        return Settings(_env_file=None, **values)  # type: ignore[call-arg, arg-type]

    for provider in ("local", "openai", "azure"):
        check = build_judge_check(settings(llm_provider=provider), llm)
        assert isinstance(check, JudgeCheck) and check.cut == 0.5
    assert build_judge_check(settings(citation_judge="off"), llm) is None
    assert build_judge_check(settings(repair_citations=False), llm) is None  # nothing checked
    cut = build_judge_check(settings(citation_judge="on", citation_judge_cut=0.7), llm)
    assert cut is not None and cut.cut == 0.7
    # an LLM without log-probabilities: auto quietly goes without, on is a clear error
    assert build_judge_check(settings(), object()) is None
    with pytest.raises(ConfigError, match="CITEFLOW_CITATION_JUDGE=on"):
        build_judge_check(settings(citation_judge="on"), object())


async def test_the_settings_judge_asks_the_configured_llm_once(tmp_path: Path) -> None:
    """`settings_judge`: the settings' LLM behind the judge cache, saved on exit; a second
    cache over the same file answers without a request."""
    from tests.fakes.openai_server import FakeOpenAIServer, Reply

    with FakeOpenAIServer() as server:
        settings = Settings(
            _env_file=None,  # type: ignore[call-arg]
            llm_provider="openai",
            llm_model="gpt-4o-mini",
            openai_base_url=server.openai_base_url,
        )
        server.script(Reply(text="No", top_logprobs={"No": math.log(0.8), "Yes": math.log(0.2)}))
        with settings_judge(settings, tmp_path) as cache:
            assert await cache.support("Viaweb was sold.", "Yahoo bought Viaweb.") == (
                pytest.approx(0.2)
            )
        assert len(server.requests) == 1
        with settings_judge(settings, tmp_path) as again:
            assert await again.support("Viaweb was sold.", "Yahoo bought Viaweb.") == (
                pytest.approx(0.2)
            )
        assert len(server.requests) == 1
