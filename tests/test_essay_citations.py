"""The essay's twelve questions (`bench/essay_citations.py`): do the sources hold each answer, and
do the default local model's recorded answers keep correct citations through today's repair?

The questions and the words of the essay that answer each one are in
`tests/data/essay/questions.json`; `tests/data/essay/answers.json` holds the sources and the raw
replies of Qwen2.5-Coder-1.5B-Instruct Q4_K_M (the default local model) recorded by
``bench/essay_citations.py --dump``. A citation is correct when its source holds the answer.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from citeflow.citations.sources import source_text
from citeflow.evaluation.citations import repair_policy, replay
from citeflow.knowledge_base import KnowledgeBase
from citeflow.settings import Settings
from tests.conftest import REPO
from tests.fakes.llm import ScriptedLLM

ESSAY = REPO / "tests" / "data" / "essay"
QUESTIONS: list[dict[str, Any]] = json.loads((ESSAY / "questions.json").read_text("utf-8"))


def holds(text: str, gold: list[str]) -> bool:
    flat = " ".join(text.split()).lower()
    return any(" ".join(g.split()).lower() in flat for g in gold)


def _defaults(**overrides: Any) -> Settings:
    return Settings(_env_file=None, **overrides)  # type: ignore[call-arg]


@pytest.mark.slow
async def test_the_sources_hold_the_answer_to_each_essay_question(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Retrieval, grading and source selection with the default settings and the real MiniLM
    embedder: measured 12 of 12 (before the coverage grader and the question-covering pieces:
    9 of 12, the answers to "What is Bel?", "Why did the author write Hacker News?" and "Who did
    they recruit to be president of Y Combinator?" dropped by the cosine threshold)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    settings = _defaults(data_dir=tmp_path / "data")
    kb = KnowledgeBase.build([REPO / "data"], "essay", settings=settings, progress=False)
    try:
        found = []
        for q in QUESTIONS:
            llm = ScriptedLLM(["An answer."])
            result = await kb.workflow(llm=llm).run(query=q["question"])
            if any(holds(source_text(s), q["gold"]) for s in result.source_nodes):
                found.append(q["question"])
    finally:
        kb.close()
    assert len(found) >= 11, sorted({q["question"] for q in QUESTIONS} - set(found))


def test_recorded_local_model_answers_keep_correct_citations() -> None:
    """The local model's recorded answers, repaired with today's defaults: measured 10 of 12
    answers cited (11 before stop 13), every citation correct but one (the model answered "Why
    was Viaweb called Viaweb?" from the wrong source). Before the question-weighted support, the
    citation of "The author used Fortran on the IBM 1401" moved to the source saying "IBM 1401",
    not "Fortran"."""
    settings = _defaults()
    gold = {q["question"]: q["gold"] for q in QUESTIONS}
    recorded = json.loads((ESSAY / "answers.json").read_text("utf-8"))
    assert [r["question"] for r in recorded] == list(gold)
    cited = correct = citations = 0
    for record in recorded:
        scores = record.get("scores") or [None] * len(record["sources"])
        _, found = replay(
            {
                "question": record["question"],
                "sources": [
                    {"text": t, "score": x} for t, x in zip(record["sources"], scores, strict=True)
                ],
                "raw_text": record["raw"],
            },
            repair_policy(settings),
        )
        numbers = list(dict.fromkeys(c.number for c in found))
        cited += bool(numbers)
        citations += len(numbers)
        correct += sum(holds(record["sources"][n - 1], gold[record["question"]]) for n in numbers)
    assert cited >= ESSAY_CITED
    assert correct >= ESSAY_CORRECT
    assert correct / citations >= 0.85


# measured at the stop-13 defaults (citation relevance 0.6): 10 of 12 answers cited, 9 of 10
# citations correct. At relevance 0.5 (before): 11 and 10; the citation lost is the answer about
# Sam Altman, whose quote ("... we'd try to recruit Sam Altman") holds half the question's words.
ESSAY_CITED = 10
ESSAY_CORRECT = 9
