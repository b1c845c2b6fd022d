"""Are the default local model's answers about the essay cited, and cited correctly?

Ingests data/ (the essay) into a temporary embedded store, loads the default GGUF
(Qwen2.5-Coder-1.5B-Instruct Q4_K_M) and answers twelve questions whose answers the essay states
in one place (`tests/data/essay/questions.json`). For each question the essay's answering words
are written down there (``gold``); a citation is counted correct when the source it points to
contains one of them. Prints each answer
(and, with ``--raw``, what the model wrote before citation repair), then:

- cited: answers carrying at least one citation;
- correct: citations whose source holds the answer, of all citations;
- answers cited correctly: answers with at least one citation and every citation correct;
- found: answers whose sources hold the answer at all (retrieval and source selection).

    .venv/bin/python bench/essay_citations.py [--questions 12] [--raw] [--model PATH] [--dump F]
    .venv/bin/python bench/essay_citations.py --replay F   # re-repair (and judge) a dump's answers
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from citeflow.citations.judge import JudgeCheck, judge_on  # noqa: E402
from citeflow.citations.sources import source_text  # noqa: E402
from citeflow.evaluation.citations import areplay, repair_policy  # noqa: E402
from citeflow.evaluation.dense import default_cache_dir  # noqa: E402
from citeflow.evaluation.judging import settings_judge  # noqa: E402
from citeflow.knowledge_base import KnowledgeBase  # noqa: E402
from citeflow.providers.local_llm import LocalLlamaCppLLM  # noqa: E402
from citeflow.settings import load_settings  # noqa: E402


@dataclass(frozen=True)
class Question:
    text: str
    gold: tuple[str, ...]  # words of the essay that answer it (any one will do)


#: the questions and their gold, shared with the regression test (tests/test_essay_citations.py)
QUESTIONS_FILE = ROOT / "tests" / "data" / "essay" / "questions.json"
QUESTIONS = [
    Question(q["question"], tuple(q["gold"]))
    for q in json.loads(QUESTIONS_FILE.read_text(encoding="utf-8"))
]


def holds(text: str, gold: tuple[str, ...]) -> bool:
    flat = " ".join(text.split()).lower()
    return any(" ".join(g.split()).lower() in flat for g in gold)


@dataclass
class Answer:
    question: Question
    sources: list[str]
    raw: str
    text: str
    cited: list[int]  # source numbers the citations point to, first-cited first
    seconds: float = 0.0
    scores: list[float | None] | None = None  # the retriever's score of each source's chunk


async def answer_all(args: argparse.Namespace) -> list[Answer]:
    """Ask every question through the workflow with the default local model."""
    answers = []
    with tempfile.TemporaryDirectory() as tmp:
        overrides: dict[str, object] = {"data_dir": tmp}
        if args.model:
            overrides["local_model_path"] = args.model
        settings = load_settings(**overrides)
        kb = KnowledgeBase.build(
            [ROOT / "data"], collection="essay", settings=settings, progress=False
        )
        llm = LocalLlamaCppLLM.from_settings(settings)
        workflow = kb.workflow(llm=llm)
        print(f"model {settings.gguf_path.name}\n")
        for question in QUESTIONS[: args.questions]:
            started = time.perf_counter()
            result = await workflow.run(query=question.text)
            answers.append(
                Answer(
                    question,
                    [source_text(s) for s in result.source_nodes],
                    result.raw_response,
                    result.response,
                    list(dict.fromkeys(c.number for c in result.citations)),
                    time.perf_counter() - started,
                    [s.score for s in result.source_nodes],
                )
            )
        kb.close()
        llm.close()
    return answers


def dump_record(item: dict[str, Any]) -> dict[str, Any]:
    """One answer of a ``--dump`` as the record `citeflow.evaluation.citations.replay` takes."""
    scores = item.get("scores") or [None] * len(item["sources"])
    return {
        "question": item["question"],
        "sources": [{"text": t, "score": s} for t, s in zip(item["sources"], scores, strict=True)],
        "raw_text": item["raw"],
    }


def replay(path: Path) -> list[Answer]:
    """The answers of a ``--dump``, their raw text repaired again with today's settings, then
    put to the citation judge when it is on (its verdicts from the judge's cache; the model is
    loaded only for a citation not judged before)."""
    settings = load_settings()
    policy = repair_policy(settings)
    items = json.loads(path.read_text())

    async def replay_all(check: JudgeCheck | None) -> list[Answer]:
        answers = []
        for item in items:
            question = next(q for q in QUESTIONS if q.text == item["question"])
            text, found = await areplay(dump_record(item), policy, check)
            cited = list(dict.fromkeys(c.number for c in found))
            answers.append(Answer(question, item["sources"], item["raw"], text, cited))
        return answers

    if not judge_on(settings):
        return asyncio.run(replay_all(None))
    with settings_judge(settings, default_cache_dir() / "judge") as cache:
        return asyncio.run(replay_all(JudgeCheck(cache, cut=settings.citation_judge_cut)))


def report(answers: list[Answer], *, raw: bool) -> None:
    cited_answers = correct_answers = found = citations = correct = 0
    for a in answers:
        gold = a.question.gold
        found += any(holds(t, gold) for t in a.sources)
        marks = [(n, holds(a.sources[n - 1], gold)) for n in a.cited]
        citations += len(marks)
        correct += sum(ok for _, ok in marks)
        cited_answers += bool(marks)
        correct_answers += bool(marks) and all(ok for _, ok in marks)
        verdict = ", ".join(f"[{n}] {'ok' if ok else 'WRONG'}" for n, ok in marks) or "none"
        print(f"Q: {a.question.text}\nA: {a.text}")
        if raw:
            print(f"   raw: {a.raw}")
        holding = [i + 1 for i, t in enumerate(a.sources) if holds(t, gold)]
        print(
            f"   citations: {verdict}; answer in sources {holding} of {len(a.sources)}"
            + (f"; {a.seconds:.1f}s" if a.seconds else "")
            + "\n"
        )
    n = len(answers)
    print(f"cited: {cited_answers}/{n} answers")
    print(f"correct: {correct}/{citations} citations")
    print(f"answers cited correctly: {correct_answers}/{n}")
    print(f"found: {found}/{n} answers' sources hold the answer")
    if answers[0].seconds:
        print(f"median {statistics.median(a.seconds for a in answers):.1f}s per answer")


def dump(answers: list[Answer], path: Path) -> None:
    path.write_text(
        json.dumps(
            [
                {
                    "question": a.question.text,
                    "sources": a.sources,
                    "scores": a.scores,
                    "raw": a.raw,
                    "answer": a.text,
                }
                for a in answers
            ],
            indent=1,
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=len(QUESTIONS))
    parser.add_argument("--raw", action="store_true", help="also print the model's raw text")
    parser.add_argument("--model", help="a GGUF other than the default")
    parser.add_argument("--dump", type=Path, help="write questions, sources and raw answers here")
    parser.add_argument(
        "--replay", type=Path, help="no model: repair the raw answers of a --dump file again"
    )
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    answers = replay(args.replay) if args.replay else asyncio.run(answer_all(args))
    report(answers, raw=args.raw)
    if args.dump:
        dump(answers, args.dump)


if __name__ == "__main__":
    main()
