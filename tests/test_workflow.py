"""The citation query workflow with a scripted LLM, a hashing embedder and in-memory Qdrant."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any
from unittest.mock import create_autospec

import pytest
from llama_index.core.llms import ChatMessage
from llama_index.core.schema import NodeWithScore

from citeflow.citations.judge import build_judge
from citeflow.citations.markers import cited_numbers
from citeflow.citations.repair import CitationPolicy
from citeflow.errors import (
    CollectionNotFoundError,
    EmptyCollectionError,
    EmptyQueryError,
    UpstreamError,
)
from citeflow.events import AnswerDeltaEvent, StatusEvent
from citeflow.knowledge_base import KnowledgeBase
from citeflow.prompts import NOT_COVERED_ANSWER
from citeflow.providers.llm import build_llm
from citeflow.query.grading import KeepAllGrader
from citeflow.query.rewriting import QUERY_MAX_TOKENS
from citeflow.result import CitedResponse
from citeflow.settings import CitationSettings, RetrievalSettings
from citeflow.testing.llm import ScriptedLLM
from citeflow.testing.openai_server import FakeOpenAIServer, RecordedRequest, Reply
from citeflow.workflows.citation_query import CitationQueryWorkflow
from tests.server_helpers import PacedLLM
from tests.settings_helpers import llm_settings


class ScriptedGrader:
    """Rejects everything for the first ``reject`` calls, then keeps everything."""

    name = "scripted"

    def __init__(self, reject: int) -> None:
        self.reject = reject
        self.queries: list[str] = []

    async def grade(self, query: str, nodes: Sequence[NodeWithScore]) -> list[NodeWithScore]:
        self.queries.append(query)
        return [] if len(self.queries) <= self.reject else list(nodes)


def _workflow(
    kb: KnowledgeBase, llm: ScriptedLLM, retrieval: dict[str, Any] | None = None, **kw: object
) -> CitationQueryWorkflow:
    """The workflow over ``kb``'s top 3 chunks, score-graded at 0.2, with ``retrieval``'s
    settings changed."""
    return CitationQueryWorkflow(
        retriever=kb.retriever(top_k=3),
        llm=llm,
        retrieval=RetrievalSettings.defaults(**{"relevance_threshold": 0.2, **(retrieval or {})}),
        **kw,  # type: ignore[arg-type]
    )


def _source_of(result: CitedResponse, word: str) -> int:
    for number, node in enumerate(result.source_nodes, start=1):
        if word in node.node.get_content():
            return number
    raise AssertionError(f"no source mentions {word!r}")


async def _streamed_run(
    workflow: CitationQueryWorkflow, query: str
) -> tuple[CitedResponse, list[str], list[str]]:
    """A run's result, checked to be the answer text it streamed; the stages it went through (its
    `StatusEvent`s); and the pieces of the answer (its `AnswerDeltaEvent`s)."""
    handler = workflow.run(query=query)
    events = [event async for event in handler.stream_events()]
    result = await handler
    deltas = [event.text for event in events if isinstance(event, AnswerDeltaEvent)]
    assert isinstance(result, CitedResponse) and "".join(deltas) == result.response
    return result, [event.stage for event in events if isinstance(event, StatusEvent)], deltas


async def test_answer_cites_existing_sources(kb: KnowledgeBase) -> None:
    llm = ScriptedLLM(["Yahoo bought Viaweb in 1998 [1]. It became Yahoo Store [1]."])
    result = await _workflow(kb, llm).run(query="Who bought Viaweb?")
    assert isinstance(result, CitedResponse)
    assert str(result) == result.response
    viaweb = _source_of(result, "Yahoo bought Viaweb")
    assert result.cited == [viaweb]
    assert cited_numbers(result.response) == [viaweb]
    assert result.source_nodes[viaweb - 1].node.get_text().startswith(f"Source {viaweb}:\n")
    assert result.cited_nodes == [result.source_nodes[viaweb - 1]]
    assert result.citations[0].quote.startswith("Yahoo bought Viaweb in 1998")
    assert result.grounded and result.rounds == 1
    assert set(result.timings) >= {"rewrite", "retrieve", "grade", "cite", "synthesize"}
    # the prompt numbered the sources and carried the question
    assert "Who bought Viaweb?" in llm.prompts[-1]
    assert "[1]" in llm.prompts[-1]


async def test_stream_events_match_final_answer(kb: KnowledgeBase) -> None:
    raw = "Yahoo bought Viaweb in 1998 [9]. Ducks live near ponds [1].\nThat is all."
    question = "Who bought Viaweb, and where do ducks live?"
    result, stages, deltas = await _streamed_run(_workflow(kb, ScriptedLLM([raw])), question)
    assert len(deltas) >= 3
    assert stages[0] == "searching" and stages[-1] == "done"
    assert {"grading", "citing", "writing"} <= set(stages)
    # [9] points at no source: it never reaches the user, and each sentence cites its support
    assert "[9]" not in result.response
    assert all(1 <= n <= len(result.source_nodes) for n in cited_numbers(result.response))
    assert _source_of(result, "Yahoo bought") in result.cited
    assert _source_of(result, "ponds") in result.cited
    # what the model wrote stays inspectable
    assert result.raw_response == raw


async def test_document_footnotes_are_not_citations(kb: KnowledgeBase) -> None:
    # the stories document carries a footnote "[15]"; a model copying it must not cite it
    llm = ScriptedLLM(["The author wrote awful short stories before college [15]."])
    result = await _workflow(kb, llm).run(query="What did the author write before college?")
    assert "[15]" not in llm.prompts[-1]
    assert "[15]" not in result.response
    assert result.cited == [_source_of(result, "short stories")]


async def test_retry_rewrites_query_and_searches_again(kb: KnowledgeBase) -> None:
    grader = ScriptedGrader(reject=1)
    llm = ScriptedLLM(["Viaweb online store software Yahoo", "Viaweb made store software [1]."])
    workflow = _workflow(kb, llm, {"max_rounds": 2}, grader=grader)
    result, stages, _ = await _streamed_run(workflow, "Which startup did he found?")
    assert "retrying" in stages
    assert stages.count("searching") == 2
    assert grader.queries == ["Which startup did he found?", "Viaweb online store software Yahoo"]
    assert "Which startup did he found?" in llm.prompts[0]  # the reformulation prompt
    assert result.rounds == 2 and result.grounded
    assert llm.call_kwargs[0]["max_tokens"] == QUERY_MAX_TOKENS  # a query is short
    assert "max_tokens" not in llm.call_kwargs[1]  # the answer keeps the configured budget


async def test_all_rounds_fail_answers_from_best_hits(kb: KnowledgeBase) -> None:
    grader = ScriptedGrader(reject=10)
    llm = ScriptedLLM(["ducks ponds", "Ducks live near ponds [1]."])
    workflow = _workflow(kb, llm, {"max_rounds": 2}, grader=grader)
    result = await workflow.run(query="Where do ducks live?")
    assert result.rounds == 2
    assert not result.grounded
    assert result.source_nodes and result.cited


async def test_all_rounds_fail_can_refuse(kb: KnowledgeBase) -> None:
    llm = ScriptedLLM(["unused keywords"])
    refuse = {"max_rounds": 1, "on_no_relevant": "refuse"}
    workflow = _workflow(kb, llm, refuse, grader=ScriptedGrader(reject=10))
    result = await workflow.run(query="What is the airspeed of a swallow?")
    assert result.response == NOT_COVERED_ANSWER
    assert result.source_nodes == [] and result.cited == []
    assert llm.prompts == []  # no LLM call at all


async def test_history_is_condensed_into_a_standalone_query(kb: KnowledgeBase) -> None:
    grader = ScriptedGrader(reject=0)
    llm = ScriptedLLM(["Who bought Viaweb", "Yahoo bought Viaweb in 1998 [1]."])
    history = [
        ChatMessage(role="user", content="Tell me about Viaweb."),
        ChatMessage(role="assistant", content="Viaweb made online store software."),
    ]
    result = await _workflow(kb, llm, grader=grader).run(query="Who bought it?", history=history)
    assert "Tell me about Viaweb." in llm.prompts[0]
    assert llm.call_kwargs[0]["max_tokens"] == QUERY_MAX_TOKENS
    assert result.search_query == "Who bought Viaweb"
    assert grader.queries == ["Who bought Viaweb"]
    assert result.query == "Who bought it?"


async def test_plain_question_is_passed_through_without_llm(kb: KnowledgeBase) -> None:
    llm = ScriptedLLM(["Ducks live near ponds [1]."])
    result = await _workflow(kb, llm, grader=KeepAllGrader()).run(query="  Where do ducks live? ")
    assert result.search_query == "Where do ducks live?"
    assert len(llm.prompts) == 1  # synthesis only


async def test_empty_question_is_a_clear_error(kb: KnowledgeBase) -> None:
    with pytest.raises(EmptyQueryError, match="empty"):
        await _workflow(kb, ScriptedLLM()).run(query="   ")


async def test_unknown_collection_is_a_clear_error(kb: KnowledgeBase) -> None:
    other = KnowledgeBase(kb.settings, store=kb.store, embed_model=kb.embed_model, collection="x")
    with pytest.raises(CollectionNotFoundError, match="citeflow ingest"):
        await _workflow(other, ScriptedLLM()).run(query="anything")


async def test_empty_collection_is_a_clear_error(kb: KnowledgeBase) -> None:
    for doc in kb.documents():
        kb.store.delete_document(kb.collection, doc.doc_id)
    assert kb.count() == 0
    with pytest.raises(EmptyCollectionError, match="no documents"):
        await _workflow(kb, ScriptedLLM()).run(query="anything")


async def test_llm_failure_mid_stream_fails_the_run_promptly(kb: KnowledgeBase) -> None:
    llm = PacedLLM(["Yahoo bought Viaweb. It became Yahoo Store."], fail_after=3)
    handler = _workflow(kb, llm).run(query="Who bought Viaweb?")
    with pytest.raises(UpstreamError, match="upstream went away") as info:
        await asyncio.wait_for(handler, timeout=5)
    assert isinstance(info.value.__cause__, ConnectionError)


async def test_workflow_over_openai_compatible_http(kb: KnowledgeBase) -> None:
    """The whole workflow against a fake OpenAI server: answer streamed over HTTP, then a 500."""
    with FakeOpenAIServer() as server:
        llm = build_llm(llm_settings(server), max_retries=0)
        workflow = _workflow(kb, llm)  # type: ignore[arg-type]
        server.script("Yahoo bought Viaweb in 1998 [1].")
        result = await workflow.run(query="Who bought Viaweb?")
        assert result.cited == [_source_of(result, "Yahoo bought")]
        assert server.last_request is not None and server.last_request.stream
        server.script(Reply.error(500))
        with pytest.raises(UpstreamError, match="HTTP 500"):
            await asyncio.wait_for(workflow.run(query="Who bought Viaweb?"), timeout=10)
        server.script(Reply.drop(after_tokens=3))
        with pytest.raises(UpstreamError):
            await asyncio.wait_for(workflow.run(query="Who bought Viaweb?"), timeout=10)


async def test_the_options_reach_the_citation_check_and_unsupported_is_reported(
    kb: KnowledgeBase,
) -> None:
    citations = CitationSettings.defaults(support_keep=0.3, support_threshold=0.6)
    answer = "Yahoo bought Viaweb [1]. Penguins compose symphonies on distant moons [1]."
    workflow = _workflow(kb, ScriptedLLM([answer]), policy=CitationPolicy(citations))
    policy = workflow.synthesizer.policy
    assert (policy.settings.support_keep, policy.settings.support_threshold) == (0.3, 0.6)
    result = await workflow.run(query="Who bought Viaweb?")
    assert isinstance(result, CitedResponse)
    assert all(isinstance(node.score, float) for node in result.source_nodes)
    # the supported sentence keeps a citation; the one no source supports loses its marker and
    # is reported, never silently left looking sourced
    assert result.cited == [_source_of(result, "Yahoo bought")]
    assert result.unsupported == ["Penguins compose symphonies on distant moons."]
    assert "moons." in result.response and "moons [" not in result.response


async def test_hosted_judge_verifies_citations_over_http(kb: KnowledgeBase) -> None:
    """The workflow with an OpenAI LLM (the judge verifies by default): each sentence's cited
    source and best candidates are put to the judge; "No" to all takes the marker out of the
    streamed and final text and reports the sentence, "Yes" keeps it."""
    no = {"No": -0.1, "Yes": -2.5}
    yes = {"Yes": -0.1, "No": -2.5}
    answer = "Yahoo bought Viaweb in 1998 [1]."
    with FakeOpenAIServer() as server:
        settings = llm_settings(server)
        llm = build_llm(settings, max_retries=0)
        judge = build_judge(settings, llm)
        assert judge is not None  # auto: on for a hosted LLM with log-probabilities
        workflow = _workflow(kb, llm, policy=CitationPolicy(judge=judge))  # type: ignore[arg-type]
        for verdict, cited in ((no, False), (yes, True)):

            def reply(request: RecordedRequest, verdict: dict[str, float] = verdict) -> Reply:
                if request.json.get("logprobs"):
                    return Reply(text="No", top_logprobs=verdict)
                return Reply(text=answer)

            server.script(reply)
            result, _, _ = await _streamed_run(workflow, "Who bought Viaweb?")
            assert bool(result.citations) is cited
            assert bool(cited_numbers(result.response)) is cited
            assert bool(result.unsupported) is not cited
            judged = server.last_request.json
            assert judged["max_tokens"] == 1 and judged["logprobs"] is True
            prompt = judged["messages"][-1]["content"]
            assert "Statement: Yahoo bought Viaweb in 1998." in prompt
            assert "Passage: Yahoo bought Viaweb" in prompt


async def test_bad_model_output_still_gives_a_clean_answer(kb: KnowledgeBase) -> None:
    """An empty reply, a reply of markers only, markers past the last source, a reply cut off
    mid-JSON: each gives a clean answer, never a traceback or an empty string."""
    for reply, expected in (
        (" \n", NOT_COVERED_ANSWER),  # (a reply of nothing at all breaks the fake itself)
        ("[1][2]", NOT_COVERED_ANSWER),
        ("Yahoo bought Viaweb [99].", None),
        ('{"sentences": [{"sources": [1], "text": "Yahoo bought', None),
    ):
        workflow = _workflow(kb, ScriptedLLM([reply]))
        result, _, _ = await _streamed_run(workflow, "Who bought Viaweb?")
        assert result.response
        assert "[99]" not in result.response
        if expected is not None:
            assert result.response == expected


async def test_a_model_going_round_in_a_loop_is_stopped(kb: KnowledgeBase) -> None:
    """Its repeated sentences are left out of the answer, and after the second repeat the
    workflow stops reading the model: what it would have written next is never read."""
    loop = "It became Yahoo Store [1]. "
    raw = "Yahoo bought Viaweb in 1998 [1]. " + loop * 8 + "Ducks live near ponds [1]."
    result, _, _ = await _streamed_run(_workflow(kb, ScriptedLLM([raw])), "Who bought Viaweb?")
    assert result.response.count("It became Yahoo Store") == 1
    assert "Ducks" not in result.raw_response
    assert result.raw_response.count("It became Yahoo Store") < 8


class _SlowJudge:
    """A judge that takes a while per call and notes whether the model's stream was already
    closed when each call ended."""

    def __init__(self, llm: PacedLLM) -> None:
        self.llm = llm
        self.closed_at_end: list[bool] = []

    async def support(self, sentence: str, quote: str) -> float | None:
        await asyncio.sleep(0.2)
        self.closed_at_end.append(self.llm.closed_early.is_set())
        return 1.0


async def test_a_looping_model_is_closed_before_the_checks_still_running_end(
    kb: KnowledgeBase,
) -> None:
    """Once the loop is seen the model's request ends at once, not after the judge has checked
    the sentences already read: it generates nothing more meanwhile."""
    loop = "It became Yahoo Store [1]. "
    llm = PacedLLM(["Yahoo bought Viaweb in 1998 [1]. " + loop * 8 + "Ducks live near ponds [1]."])
    judge = _SlowJudge(llm)
    workflow = _workflow(kb, llm, policy=CitationPolicy(judge=judge))  # type: ignore[arg-type]
    result = await workflow.run(query="Who bought Viaweb?")
    assert isinstance(result, CitedResponse) and "Ducks" not in result.raw_response
    assert llm.closed_early.is_set() and not llm.finished.is_set()
    assert any(judge.closed_at_end), judge.closed_at_end


async def test_the_step_cache_answers_the_same_and_builds_the_steps_once(
    kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    from workflows import Workflow

    from citeflow.speedups import StepCache

    steps = create_autospec(Workflow._get_steps, side_effect=Workflow._get_steps)
    monkeypatch.setattr(Workflow, "_get_steps", steps)
    answer = "Yahoo bought Viaweb in 1998 [1]."
    plain = kb.workflow(llm=ScriptedLLM([answer]))
    first = await plain.run(query="Who bought Viaweb?")
    plain_builds = steps.call_count
    steps.reset_mock()

    cached_kb = KnowledgeBase(
        kb.settings.updated(server={"step_cache": True}),
        store=kb.store,
        embed_model=kb.embed_model,
        collection=kb.collection,
    )
    cached = cached_kb.workflow(llm=ScriptedLLM([answer]))
    assert isinstance(cached, StepCache) and isinstance(cached, CitationQueryWorkflow)
    assert not isinstance(plain, StepCache)
    second = await cached.run(query="Who bought Viaweb?")
    again = await cached.run(query="Who bought Viaweb?")
    assert str(first) == str(second) == str(again)
    assert first.cited == second.cited
    assert plain_builds > 2  # the runtime asks on every step
    assert steps.call_count == 1  # the cached workflow built them once, for both runs
