"""Citation verifiers: word support, and the LLM judge (P(Yes) from first-token logprobs)."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Sequence

import pytest
from llama_index.core.llms import ChatMessage

from citeflow.citations.answer import RepairedAnswer, check_text
from citeflow.citations.judge import (
    LLMJudge,
    TokenLogprobs,
    build_judge,
    judge_on,
    judged_statement,
    yes_probability,
)
from citeflow.citations.repair import CitationPolicy
from citeflow.citations.verify import JudgeVerifier, LexicalVerifier
from citeflow.errors import ConfigError
from tests.conftest import STATIN_QUESTION, STATIN_SOURCES
from tests.settings_helpers import settings_of


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


# --- the judge as the verifier ----------------------------------------------------------------

SOURCES = [
    "Yahoo bought Viaweb in 1998 for about 49 million dollars.",
    "Viaweb was bought by a large web company at the end of the nineties.",
    "Ducks live near ponds and rivers all over the world.",
]


class ScriptedJudge:
    """A judge with a fixed P(Yes) per quote's first word (else ``default``) that answers after
    ``delays[the sentence's first word]`` seconds (else ``stall``), or raises when told to; it
    notes the sentences it is judging at each moment and the questions cancelled."""

    def __init__(
        self,
        verdicts: dict[str, float | BaseException | None],
        stall: float = 0,
        *,
        default: float = 0.0,
        delays: dict[str, float] | None = None,
    ) -> None:
        self.verdicts, self.default = verdicts, default
        self.stall, self.delays = stall, delays or {}
        self.asked: list[tuple[str, str]] = []
        self.judging: list[str] = []
        self.most_questions = self.most_sentences = self.cancelled = 0

    async def support(self, sentence: str, quote: str) -> float | None:
        self.asked.append((sentence, quote))
        self.judging.append(sentence)
        self.most_questions = max(self.most_questions, len(self.judging))
        self.most_sentences = max(self.most_sentences, len(set(self.judging)))
        try:
            await asyncio.sleep(self.delays.get(sentence.split()[0], self.stall))
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            self.judging.remove(sentence)
        verdict = self.verdicts.get(quote.split()[0], self.default)
        if isinstance(verdict, BaseException):
            raise verdict
        return verdict


def _judged(judge: ScriptedJudge, **policy: float) -> CitationPolicy:
    return CitationPolicy(judge=judge).with_(**policy)


async def test_the_judge_moves_a_marker_to_the_source_it_finds_supporting() -> None:
    judge = ScriptedJudge({"Yahoo": 0.2, "Viaweb": 0.9})
    checker = _judged(judge).checker(SOURCES)
    answer = await check_text(checker, "Yahoo bought Viaweb [1].")
    assert answer.text == "Yahoo bought Viaweb [2]."
    assert isinstance(checker.verifier, JudgeVerifier)
    assert checker.verifier.verdicts == {"supported": 1, "unsupported": 1}  # counted for metrics
    assert [(c.number, c.origin, c.score) for c in answer.citations] == [(2, "moved", 0.9)]
    # asked about the cited source and the best word-support candidates only, never ducks
    assert {quote.split()[0] for _, quote in judge.asked} == {"Yahoo", "Viaweb"}
    assert all(sentence == "Yahoo bought Viaweb." for sentence, _ in judge.asked)
    assert judge.most_questions == 2  # both questions asked at once, not one after the other


async def test_a_sentence_the_judge_finds_unsupported_is_reported() -> None:
    judge = ScriptedJudge({"Yahoo": 0.1, "Viaweb": 0.3})
    answer = await check_text(_judged(judge).checker(SOURCES), "Yahoo bought Viaweb [1].")
    assert answer.text == "Yahoo bought Viaweb."
    assert answer.citations == [] and answer.unsupported == ["Yahoo bought Viaweb."]
    lower = _judged(judge, judge_cut=0.25).checker(SOURCES)
    kept = await check_text(lower, "Yahoo bought Viaweb [1].")
    assert kept.text == "Yahoo bought Viaweb [2]."  # the cut decides: at 0.25, Source 2 does
    assert kept.unsupported == []


async def test_a_failing_silent_or_slow_judge_falls_back_to_word_support(
    caplog: pytest.LogCaptureFixture,
) -> None:
    raw = "Yahoo bought Viaweb in 1998 for about 49 million dollars [1]."
    for verdicts, stall in (
        ({"Yahoo": RuntimeError("HTTP 500 from the judge"), "Viaweb": None}, 0.0),
        ({"Yahoo": 0.0, "Viaweb": 0.0}, 5.0),
    ):
        policy = CitationPolicy(judge=ScriptedJudge(verdicts, stall=stall), judge_timeout=0.05)
        started = time.perf_counter()
        checker = policy.checker(SOURCES)
        answer = await check_text(checker, raw)
        assert isinstance(checker.verifier, JudgeVerifier)
        counted = checker.verifier.verdicts
        assert counted == ({"failed": 2} if stall == 0 else {"timed_out": counted["timed_out"]})
        assert sum(counted.values()) >= 1
        assert time.perf_counter() - started < 2.0  # never waits for a stalled judge
        assert answer.text == raw and [c.number for c in answer.citations] == [1]
    assert "HTTP 500 from the judge" in caplog.text and "timed out" in caplog.text


def test_the_policy_picks_the_verifier() -> None:
    assert isinstance(CitationPolicy().verifier(SOURCES), LexicalVerifier)
    judged = CitationPolicy(judge=ScriptedJudge({})).with_(judge_cut=0.7).verifier(SOURCES)
    assert isinstance(judged, JudgeVerifier) and judged.keep == judged.add == 0.7


def test_the_judge_verifies_by_default_for_hosted_llms_only() -> None:
    llm = ScriptedLogprobs({"Yes": 0.0})
    for provider in ("openai", "azure"):
        assert judge_on(settings_of(llm_provider=provider))
        assert isinstance(build_judge(settings_of(llm_provider=provider), llm), LLMJudge)
    # the local model: word support by default (its judge took more right citations than wrong)
    assert build_judge(settings_of(llm_provider="local"), llm) is None
    assert build_judge(settings_of(llm_provider="local", citation_judge="on"), llm) is not None
    assert build_judge(settings_of(llm_provider="openai", citation_judge="off"), llm) is None
    assert build_judge(settings_of(llm_provider="openai", repair_citations=False), llm) is None
    # an LLM without log-probabilities: auto quietly goes without, on is a clear error
    assert build_judge(settings_of(llm_provider="openai"), object()) is None
    with pytest.raises(ConfigError, match="CITEFLOW_CITATION_JUDGE=on"):
        build_judge(settings_of(citation_judge="on"), object())


# --- judging the sentences of one answer at once --------------------------------------------

THREE_SENTENCES = (
    "Yahoo bought Viaweb [1]. Viaweb was bought in 1998 [2]. Ducks live near ponds [3]."
)


async def test_the_judge_checks_later_sentences_while_earlier_ones_wait_in_order() -> None:
    # the first sentence's verdict comes last; its piece still comes out first
    judge = ScriptedJudge({}, default=1.0, delays={"Yahoo": 0.2, "Viaweb": 0.05})
    answer = RepairedAnswer(CitationPolicy(judge=judge).checker(SOURCES))
    pieces = await answer.feed(THREE_SENTENCES)
    pieces += await answer.flush()
    assert "".join(p.text for p in pieces) == THREE_SENTENCES
    assert [p.citations for p in pieces] == [(1,), (2,), (3,)]
    assert judge.most_sentences == 3  # all three judged at once
    # at the end of the text, each piece comes out as soon as it is checked
    slow_second = ScriptedJudge({}, default=1.0, delays={"Viaweb": 30.0})
    answer = RepairedAnswer(CitationPolicy(judge=slow_second).checker(SOURCES))
    await answer.feed(THREE_SENTENCES)
    rest = answer.rest()
    first = await anext(rest)
    assert first.text.startswith("Yahoo")
    assert set(slow_second.judging) == {"Viaweb was bought in 1998."}  # still judged
    answer.cancel()
    await rest.aclose()
    # at most CHECKS_IN_FLIGHT sentences at a time, however their checks end
    many = ScriptedJudge({}, default=1.0, delays={"Yahoo": 0.01, "Viaweb": 0.05})
    many_answer = RepairedAnswer(CitationPolicy(judge=many).checker(SOURCES))
    years = " ".join(f"Viaweb was bought in {1990 + i} [2]." for i in range(8))
    await many_answer.feed(f"Yahoo bought Viaweb [1]. {years}")
    await many_answer.flush()
    assert many_answer.text == f"Yahoo bought Viaweb [1]. {years}"
    assert many.most_sentences == RepairedAnswer.CHECKS_IN_FLIGHT


async def test_a_decision_judged_first_still_waits_for_the_evidence_before_it() -> None:
    # the evidence sentence's verdict comes last; the decision after it is cited to that evidence
    judge = ScriptedJudge({"Ducks": 0.0}, default=1.0, delays={"Treated": 0.05})
    answer = RepairedAnswer(CitationPolicy(judge=judge).checker(STATIN_SOURCES, STATIN_QUESTION))
    await answer.feed("Treated patients recovered sooner [2]. Yes [3].")
    await answer.flush()
    assert answer.text == "Treated patients recovered sooner [2]. Yes [2]."
    assert judge.most_sentences == 2  # judged at once


async def test_an_abandoned_decision_waiting_for_its_evidence_ends_every_check_cleanly() -> None:
    judge = ScriptedJudge({"Ducks": 0.0}, default=1.0, delays={"Treated": 30.0})
    answer = RepairedAnswer(CitationPolicy(judge=judge).checker(STATIN_SOURCES, STATIN_QUESTION))
    before = asyncio.all_tasks()
    await answer.feed("Treated patients recovered sooner [2]. Yes [3]. Ducks swim [3]. ")
    await asyncio.sleep(0.01)  # the decision is judged, and waits for the evidence's check
    waiting = [
        task
        for task in asyncio.all_tasks() - before
        if task.get_coro().__qualname__ == "CitationChecker.check"  # type: ignore[union-attr]
    ]
    assert len(waiting) == 2 and set(judge.judging) == {"Treated patients recovered sooner."}
    answer.cancel()
    ended = await asyncio.gather(*waiting, return_exceptions=True)
    assert all(isinstance(outcome, asyncio.CancelledError) for outcome in ended)


async def test_an_abandoned_answer_cancels_its_running_checks() -> None:
    judge = ScriptedJudge({}, stall=30.0, delays={"Ducks": 0.0})
    answer = RepairedAnswer(CitationPolicy(judge=judge).checker(SOURCES))
    assert await answer.feed(THREE_SENTENCES) == []
    await asyncio.sleep(0.01)
    answer.cancel()
    await asyncio.sleep(0.01)
    assert judge.cancelled >= 2 and judge.judging == []


async def test_the_judge_is_asked_about_each_clause_a_marker_closes() -> None:
    judge = ScriptedJudge({}, default=1.0, delays={"Yahoo": 0.05, "ducks": 0.05})
    answer = await check_text(
        _judged(judge).checker(SOURCES),
        "Yahoo bought Viaweb in 1998 [1], and ducks live near ponds and rivers [3].",
    )
    assert (
        answer.text == "Yahoo bought Viaweb in 1998 [1], and ducks live near ponds and rivers [3]."
    )
    assert [(c.number, c.origin) for c in answer.citations] == [(1, "model"), (3, "model")]
    # each marker's source is judged for its own clause, never for the whole sentence
    assert {sentence for sentence, _ in judge.asked} == {
        "Yahoo bought Viaweb in 1998",
        "ducks live near ponds and rivers",
    }
    assert judge.most_sentences == 2  # the two clauses judged at once, as sentences are
