"""Answering a dataset's questions with the real workflow, and recording what it returned.

``citeflow eval DATASET --answers N`` runs `CitationQueryWorkflow` (the configured LLM, or the
perfect-model fake) over the first N questions of a BEIR dataset whose corpus is indexed in the
evaluation cache, and keeps, per question, what the workflow's `CitedResponse` holds: the numbered
sources (document id, text, retrieval score), the model's raw text, the final text, the
citations and the sentences reported unsupported, and the seconds the answer took.

Each record is written as soon as it exists (`citeflow.evaluation.answer_cache`). A re-run with
other *checking* settings (the citation policy) re-checks the recorded raw text with `recheck`,
which is exactly what the workflow does to the streamed text, without calling the model again.
The perfect-model fake's answers: `citeflow.evaluation.perfect_answers`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from tqdm.auto import tqdm

from citeflow.citations.text import opens_with_question_word
from citeflow.evaluation.answer_cache import RECORD_FORMAT, AnswerCache, generation_facts
from citeflow.evaluation.dense import doc_id_of

if TYPE_CHECKING:
    from llama_index.core.llms import LLM

    from citeflow.citations.repair import CitationPolicy
    from citeflow.evaluation.dataset import BeirDataset
    from citeflow.evaluation.runner import EvalContext
    from citeflow.result import CitedResponse
    from citeflow.workflows.citation_query import CitationQueryWorkflow

#: how a claim (a statement, as SciFact's queries are) is asked; a question is asked as it is
CLAIM_QUESTION = "Is it true that {claim}?"


def question_of(query: str, template: str = CLAIM_QUESTION) -> str:
    """The question the workflow is asked for a dataset query: a question as it stands (its
    question mark added when it opens with a question word), a claim through ``template``."""
    text = " ".join(query.split())
    if text.rstrip("\"'”’)").endswith("?"):  # also 'recorded "Old and in the Way?"'
        return text
    bare = text.rstrip(". ")
    if opens_with_question_word(bare):  # a question without its "?", not a claim to ask about
        return f"{bare}?"
    return template.format(claim=bare)


def record_of(
    query_id: str, question: str, result: CitedResponse, seconds: float
) -> dict[str, Any]:
    """What the evaluation keeps of one `CitedResponse`."""
    return {
        "format": RECORD_FORMAT,
        "query_id": query_id,
        "question": question,
        "sources": [
            {"doc_id": doc_id_of(s), "text": source.text, "score": s.score}
            for s, source in zip(result.source_nodes, result.sources, strict=True)
        ],
        "raw_text": result.raw_response,
        "answer": result.response or "",
        "citations": [asdict(c) for c in result.citations],
        "unsupported": list(result.unsupported),
        "grounded": result.grounded,
        "seconds": round(seconds, 3),
        "llm_seconds": round(result.timings.get("llm", 0.0), 3),
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
    }


async def answer_now(
    workflow: CitationQueryWorkflow, query_id: str, question: str
) -> dict[str, Any]:
    """The record of ``question`` answered by ``workflow`` now, timed."""
    started = time.perf_counter()
    result = await workflow.run(query=question)
    return record_of(query_id, question, result, time.perf_counter() - started)


async def answer_all(
    dataset: BeirDataset,
    query_ids: Sequence[str],
    cache: AnswerCache,
    workflow: Callable[[], CitationQueryWorkflow],
    *,
    template: str = CLAIM_QUESTION,
    progress: bool = True,
) -> tuple[dict[str, dict[str, Any]], int]:
    """Each question's record, from the cache or by running the workflow now (built on first
    need). Returns the records by query id and how many were answered now."""
    live: CitationQueryWorkflow | None = None
    records: dict[str, dict[str, Any]] = {}
    answered = 0
    with tqdm(total=len(query_ids), desc="answers", unit="question", disable=not progress) as bar:
        for qid in query_ids:
            question = question_of(dataset.queries[qid], template)
            record = cache.get(qid, question)
            if record is None:
                live = live or workflow()
                record = await answer_now(live, qid, question)
                cache.put(record)
                answered += 1
            records[qid] = record
            bar.update(1)
    return records, answered


async def recheck(record: Mapping[str, Any], policy: CitationPolicy) -> dict[str, Any]:
    """``record`` with its answer, citations and unsupported sentences rebuilt from the model's
    recorded text under ``policy``: what the workflow returns under that policy."""
    from citeflow.citations.answer import check_text

    checker = policy.checker([s["text"] for s in record["sources"]], question=record["question"])
    checked = await check_text(checker, record["raw_text"])
    return {
        **record,
        "answer": checked.text,
        "citations": [asdict(c) for c in checked.citations],
        "unsupported": checked.unsupported,
    }


async def recheck_all(
    records: Mapping[str, Mapping[str, Any]], policy: CitationPolicy
) -> list[dict[str, Any]]:
    """`recheck` of every record, in order."""
    return [await recheck(r, policy) for r in records.values()]


def questions_of(dataset: BeirDataset, ids: Sequence[str]) -> str:
    """Which questions ``ids`` are, for a table's title: "first 80 questions", "questions
    81-160"."""
    first = list(dataset.queries).index(ids[0]) + 1 if ids else 1
    if first == 1:
        return f"first {len(ids)} questions"
    return f"questions {first}-{first + len(ids) - 1}"


def answer_cache(dataset: BeirDataset, context: EvalContext, llm: str) -> AnswerCache:
    """Where the answers of ``llm`` (its name) to ``dataset`` are recorded under the context's
    settings and corpus index. The configured local model's answers also key on the llama.cpp
    build that wrote them (its version and CPU features): another build may decode the same
    greedy answer differently."""
    from citeflow.evaluation.runner import index_key_of
    from citeflow.providers.llm import describe_llm

    settings = context.settings
    facts = generation_facts(settings, index_key=index_key_of(dataset, context), llm=llm)
    if settings.llm.provider == "local" and llm == describe_llm(settings):
        from citeflow.providers.cpu_build import installed_runtime

        version, features = installed_runtime()
        facts["runtime"] = f"xllamacpp {version} " + "+".join(sorted(features))
    return AnswerCache.under(context.cache_dir / "answers", dataset.name, facts)


def answers_section(
    dataset: BeirDataset,
    context: EvalContext,
    *,
    ids: Sequence[str],
    template: str = CLAIM_QUESTION,
    llm: LLM | None = None,
) -> tuple[str, dict[str, Any]]:
    """``citeflow eval --answers N [--skip K]``: the questions ``ids`` answered by the workflow
    (the configured LLM, or ``llm``) and scored (`citeflow.evaluation.scoring`); the table and the
    report's section."""
    import asyncio

    from citeflow.citations.judge import build_judge, judge_on
    from citeflow.citations.repair import CitationPolicy
    from citeflow.evaluation.runner import corpus_index
    from citeflow.evaluation.scoring import score_all, table
    from citeflow.providers.llm import build_llm, describe_llm

    settings = context.settings
    name = describe_llm(settings) if llm is None else type(llm).__name__
    cache = answer_cache(dataset, context, name)
    owned: list[LLM] = []

    def model() -> LLM:
        """The LLM given, else the configured one, built on first need (a cached run and a
        re-check without the judge never load it)."""
        if llm is None and not owned:
            owned.append(build_llm(settings))
        return llm if llm is not None else owned[0]

    def workflow() -> CitationQueryWorkflow:
        return corpus_index(dataset, context).kb.workflow(model())

    try:
        records, answered = asyncio.run(
            answer_all(dataset, ids, cache, workflow, template=template, progress=context.progress)
        )
        judge = build_judge(settings, model()) if judge_on(settings) else None
        policy = CitationPolicy(settings.citations, judge=judge, judge_timeout=settings.llm.timeout)
        rechecked = asyncio.run(recheck_all(records, policy))
    finally:
        for built in owned:
            close = getattr(built, "close", None)
            if callable(close):
                close()
    rows = {
        f"{dataset.name}: model's own markers": score_all(records.values(), dataset, raw=True),
        f"{dataset.name}: citeflow" + (" (judge)" if judge is not None else ""): score_all(
            rechecked, dataset
        ),
    }
    title = (
        f"Answers: {dataset.name}/{dataset.split}, {questions_of(dataset, ids)}, {name} "
        f"({answered} answered now, the rest from {cache.directory})"
    )
    return table(title, rows), {
        "llm": name,
        "cache": str(cache.directory),
        "answered_now": answered,
        "rows": {k: v.figures() for k, v in rows.items()},
    }
