"""Graders: the LLM grader's one call and its tolerant parsing, the score grader, the choice."""

from __future__ import annotations

import pytest
from llama_index.core.schema import NodeWithScore, TextNode

from citeflow.query.grading import (
    GRADE_MAX_TOKENS,
    KeepAllGrader,
    LLMGrader,
    ScoreGrader,
    build_grader,
    parse_relevant,
)
from citeflow.query.rewriting import HYPOTHETICAL_MAX_TOKENS, QUERY_MAX_TOKENS, reformulate
from citeflow.testing.llm import ScriptedLLM
from tests.settings_helpers import settings_of


def scored(node_id: str, text: str, score: float) -> NodeWithScore:
    return NodeWithScore(node=TextNode(id_=node_id, text=text), score=score)


def passages(*scores: float) -> list[NodeWithScore]:
    return [scored(f"n{i}", f"passage {i} about ducks", s) for i, s in enumerate(scores, start=1)]


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ('{"relevant": [1, 3]}', [1, 3]),
        ('```json\n{"relevant": [2]}\n```', [2]),
        ('Sure! {"relevant": [3, 1, 3]} These mention ducks.', [1, 3]),  # prose, repeats
        ("[2, 4]", [2, 4]),
        ("1, 3", [1, 3]),
        ('{"relevant": 2}', [2]),  # a bare number instead of a list
        ('{"relevant": ["1", "x", 2]}', [1, 2]),  # strings, junk
        ('{"relevant": [1, 9, 0, -2]}', [1]),  # out of range dropped
        ('{"relevant": []}', []),
        ("None of the passages is relevant.", []),
        ('{"relevant": [1, 2', [1, 2]),  # cut off mid-JSON (the output cap)
        ("", []),
    ],
)
def test_parse_relevant_tolerates_what_small_models_write(reply: str, expected: list[int]) -> None:
    assert parse_relevant(reply, count=4) == expected


async def test_llm_grader_judges_all_passages_in_one_capped_call() -> None:
    llm = ScriptedLLM(['{"relevant": [2, 3]}'])
    nodes = passages(0.9, 0.8, 0.7)
    kept = await LLMGrader(llm).grade("where do ducks live?", nodes)
    assert [n.node.node_id for n in kept] == ["n2", "n3"]
    assert len(llm.prompts) == 1
    assert all(f"{i}. passage {i}" in llm.prompts[0] for i in (1, 2, 3))
    assert llm.call_kwargs[0]["max_tokens"] == GRADE_MAX_TOKENS
    assert await LLMGrader(llm).grade("q", []) == []
    assert len(llm.prompts) == 1  # nothing to grade: no call


async def test_score_and_keep_all_graders() -> None:
    nodes = passages(0.6, 0.2, 0.3)
    assert [n.node.node_id for n in await ScoreGrader(0.25).grade("q", nodes)] == ["n1", "n3"]
    assert await KeepAllGrader().grade("q", nodes) == nodes


async def test_score_grader_keeps_a_chunk_holding_the_questions_words() -> None:
    """The dense similarity misses names: a chunk holding the question's words is relevant at
    any similarity; an off-topic question covers nothing and keeps nothing."""
    nodes = [
        scored("hn", "To test this new Arc, I wrote Hacker News in it.", 0.21),
        scored("lisp", "I gave a talk about Lisp at a conference.", 0.45),
        scored("art", "I painted still lives at night.", 0.1),
    ]
    question = "Why did the author write Hacker News?"
    assert [n.node.node_id for n in await ScoreGrader(0.25).grade(question, nodes)] == ["lisp"]
    kept = await ScoreGrader(0.25, coverage=0.6).grade(question, nodes)
    assert [n.node.node_id for n in kept] == ["hn", "lisp"]
    off_topic = "Is it true that aspirin lowers the risk of colorectal cancer?"
    low = [NodeWithScore(node=n.node, score=0.1) for n in nodes]
    assert await ScoreGrader(0.25, coverage=0.6).grade(off_topic, low) == []


def test_auto_grader_follows_the_provider() -> None:
    llm = ScriptedLLM()
    assert isinstance(build_grader(settings_of(llm_provider="local"), llm), ScoreGrader)
    assert isinstance(build_grader(settings_of(llm_provider="openai"), llm), LLMGrader)
    chosen = settings_of(llm_provider="local", grader="llm")
    assert isinstance(build_grader(chosen, llm), LLMGrader)


async def test_retry_reformulations_are_capped_by_kind() -> None:
    llm = ScriptedLLM(["ducks ponds habitat\nextra line", "Ducks live near   ponds and rivers."])
    assert await reformulate(llm, "where do ducks live", "ducks", 2) == "ducks ponds habitat"
    hypothetical = await reformulate(llm, "where do ducks live", "ducks", 3)
    assert hypothetical == "Ducks live near ponds and rivers."
    assert [k["max_tokens"] for k in llm.call_kwargs] == [
        QUERY_MAX_TOKENS,
        HYPOTHETICAL_MAX_TOKENS,
    ]
