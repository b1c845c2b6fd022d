"""Answering a dataset's questions with the real workflow, and recording what it returned.

``citeflow eval DATASET --answers N`` runs `CitationQueryWorkflow` (the configured LLM, or the
perfect-model fake) over the first N questions of a BEIR dataset whose corpus is indexed in the
evaluation cache, and keeps, per question, what the workflow's `CitedResponse` holds: the numbered
sources (document id, text, retrieval score), the model's raw text, the final text, the
citations and the sentences reported unsupported, and the seconds the answer took.

Each record is written to disk as soon as it exists (``<cache>/answers/<dataset>-<key>/``,
``key`` hashing the corpus index, the LLM, the prompts and the settings that change what the
model sees), so an interrupted run resumes and a re-run costs nothing. A re-run with other
*checking* settings (the citation policy) re-checks the recorded raw text with `recheck`, which
is exactly what the workflow does to the streamed text, without calling the model again.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tqdm.auto import tqdm

if TYPE_CHECKING:
    from llama_index.core.llms import LLM
    from llama_index.core.schema import NodeWithScore

    from citeflow.citations.repair import CitationPolicy
    from citeflow.evaluation.dataset import BeirDataset
    from citeflow.evaluation.perfect_model import AuthoredSentence, Gold, PerfectScore, Variant
    from citeflow.evaluation.runner import EvalContext
    from citeflow.settings import Settings
    from citeflow.workflows.citation_query import CitationQueryWorkflow

RECORD_FORMAT = 1
#: how a claim (a statement, as SciFact's queries are) is asked; a question is asked as it is
CLAIM_QUESTION = "Is it true that {claim}?"
#: the settings that change what the model is shown or how it is asked (not how it is checked)
GENERATION_SETTINGS = (
    "llm_provider",
    "llm_model",
    "llm_temperature",
    "llm_max_tokens",
    "local_model_path",
    "local_context_window",
    "top_k",
    "retrieval",
    "rrf_k",
    "hybrid_candidates",
    "grader",
    "relevance_threshold",
    "relevance_coverage",
    "max_rounds",
    "on_no_relevant",
    "citation_chunk_size",
    "citation_chunk_overlap",
    "max_sources",
    "context_budget",
    "fusion",
    "dense_weight",
    "chunk_size",
    "chunk_overlap",
    "feedback_chunks",
    "feedback_weight",
)


def question_of(query: str, template: str = CLAIM_QUESTION) -> str:
    """The question the workflow is asked for a dataset query: a question as it stands, a claim
    (no question mark) through ``template``."""
    text = " ".join(query.split())
    if text.endswith("?"):
        return text
    return template.format(claim=text.rstrip(". "))


def doc_id_of(source: NodeWithScore) -> str:
    """The corpus document a numbered source was cut from."""
    node = source.node
    return str(node.metadata.get("doc_id") or node.ref_doc_id or "")


def record_of(query_id: str, question: str, result: object, seconds: float) -> dict[str, Any]:
    """What the evaluation keeps of one `CitedResponse`."""
    from citeflow.result import CitedResponse

    if not isinstance(result, CitedResponse):  # pragma: no cover - the workflow's contract
        raise TypeError(f"the workflow returned {type(result).__name__}")
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
        "unsupported": list(getattr(result, "unsupported", [])),
        "grounded": result.grounded,
        "seconds": round(seconds, 3),
        "llm_seconds": round(result.timings.get("llm", 0.0), 3),
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
    }


class AnswerCache:
    """One JSON file per question under ``directory``; written atomically, read defensively."""

    def __init__(self, directory: Path, facts: Mapping[str, Any]) -> None:
        self.directory = directory
        self.facts = dict(facts)

    @classmethod
    def under(cls, root: Path, name: str, facts: Mapping[str, Any]) -> AnswerCache:
        blob = json.dumps(facts, sort_keys=True, default=str).encode()
        return cls(root / f"{name}-{hashlib.sha256(blob).hexdigest()[:16]}", facts)

    def _path(self, query_id: str) -> Path:
        cleaned = re.sub(r"[^A-Za-z0-9_.-]", "_", query_id)[:80]
        digest = hashlib.sha256(query_id.encode()).hexdigest()[:8]
        return self.directory / f"{cleaned}-{digest}.json"

    def get(self, query_id: str, question: str) -> dict[str, Any] | None:
        """The recorded answer, or None (missing, unreadable, or for another question)."""
        try:
            data = json.loads(self._path(query_id).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        ok = (
            isinstance(data, dict)
            and data.get("format") == RECORD_FORMAT
            and data.get("question") == question
            and isinstance(data.get("raw_text"), str)
        )
        return data if ok else None

    def put(self, record: Mapping[str, Any]) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        config = self.directory / "config.json"
        if not config.exists():
            _write(config, self.facts)
        _write(self._path(str(record["query_id"])), record)


def _write(target: Path, data: Any) -> None:
    tmp = target.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str) + "\n", encoding="utf-8")
    tmp.replace(target)


def generation_facts(settings: Settings, *, index_key: str, llm: str) -> dict[str, Any]:
    """What a recorded answer depends on: the corpus index, the LLM, the prompts, the settings
    that change what the model sees."""
    from citeflow import prompts
    from citeflow.citations.sources import SELECTION_VERSION
    from citeflow.query.synthesis import citation_mode_of
    from citeflow.settings import RetrievalSettings, values_by_variable

    mode = citation_mode_of(settings)
    structured = mode == "structured"
    texts = [
        getattr(v, "get_template", lambda v=v: str(v))()
        for k, v in sorted(vars(prompts).items())
        if k.isupper() and (structured or not k.startswith("CITATION_JSON_"))
    ]
    dumped = {
        name.removeprefix("CITEFLOW_").lower(): value
        for name, value in values_by_variable(settings).items()
    }
    fallback = settings.retrieval.fallback_chunks
    return {
        "format": RECORD_FORMAT,
        "index": index_key,
        "sources": SELECTION_VERSION,
        "llm": llm,
        "prompts": hashlib.sha256("\0".join(texts).encode()).hexdigest()[:16],
        "settings": {k: dumped[k] for k in GENERATION_SETTINGS if k in dumped},
        **({"citation_mode": mode} if mode != "markers" else {}),
        **(
            {"fallback_chunks": fallback}
            if fallback != RetrievalSettings.model_fields["fallback_chunks"].default
            else {}
        ),
    }


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
    bar = tqdm(total=len(query_ids), desc="answers", unit="question", disable=not progress)
    try:
        for qid in query_ids:
            question = question_of(dataset.queries[qid], template)
            record = cache.get(qid, question)
            if record is None:
                live = live or workflow()
                started = time.perf_counter()
                result = await live.run(query=question)
                record = record_of(qid, question, result, time.perf_counter() - started)
                cache.put(record)
                answered += 1
            records[qid] = record
            bar.update(1)
    finally:
        bar.close()
    return records, answered


async def recheck(record: Mapping[str, Any], policy: CitationPolicy) -> dict[str, Any]:
    """``record`` with its answer, citations and unsupported sentences rebuilt from the model's
    recorded text under ``policy``: what the workflow returns under that policy."""
    from citeflow.citations.repair import check_text

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


def answers_section(
    dataset: BeirDataset,
    context: EvalContext,
    *,
    count: int,
    template: str = CLAIM_QUESTION,
    llm: LLM | None = None,
) -> tuple[str, dict[str, Any]]:
    """``citeflow eval --answers N``: the first N questions answered by the workflow (the
    configured LLM, or ``llm``) and scored (`citeflow.evaluation.scoring`); the table and the
    report's section."""
    import asyncio

    from citeflow.citations.judge import build_judge, judge_on
    from citeflow.citations.repair import CitationPolicy
    from citeflow.evaluation.runner import corpus_index, index_key_of
    from citeflow.evaluation.scoring import score_all, table
    from citeflow.providers.llm import build_llm, describe_llm

    settings = context.settings
    name = describe_llm(settings) if llm is None else type(llm).__name__
    cache = AnswerCache.under(
        context.cache_dir / "answers",
        dataset.name,
        generation_facts(settings, index_key=index_key_of(dataset, context), llm=name),
    )
    owned: list[Any] = []

    def model() -> LLM:
        """The LLM given, else the configured one, built on first need (a cached run and a
        re-check without the judge never load it)."""
        if llm is not None:
            return llm
        if not owned:
            owned.append(build_llm(settings))
        built: LLM = owned[0]
        return built

    def workflow() -> CitationQueryWorkflow:
        return corpus_index(dataset, context).kb.workflow(model())

    ids = list(dataset.queries)[:count]
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
        f"Answers: {dataset.name}/{dataset.split}, first {len(ids)} questions, {name} "
        f"({answered} answered now, the rest from {cache.directory})"
    )
    return table(title, rows), {
        "llm": name,
        "cache": str(cache.directory),
        "answered_now": answered,
        "rows": {k: v.figures() for k, v in rows.items()},
    }


def golds_of(dataset: BeirDataset, query_ids: Sequence[str], template: str) -> list[Gold]:
    """The perfect model's gold for each question: its gold rationale sentences where the
    dataset has them (SciFact), else its relevant documents' texts, and its gold answer."""
    from citeflow.evaluation.perfect_model import Gold

    golds = []
    for qid in query_ids:
        sentences = [s for _, _, sents in dataset.evidence_texts(qid) for s in sents]
        evidence = sentences or [
            dataset.corpus[d].text for d in sorted(dataset.relevant(qid)) if d in dataset.corpus
        ]
        given = dataset.answers.get(qid)
        answer = (
            str(given["decision"])
            if isinstance(given, Mapping) and "decision" in given
            else str(given[0])
            if isinstance(given, list) and given
            else None
        )
        golds.append(Gold(question_of(dataset.queries[qid], template), tuple(evidence), answer))
    return golds


def perfect_answers(
    dataset: BeirDataset,
    context: EvalContext,
    query_ids: Sequence[str],
    variant: Variant,
    template: str = CLAIM_QUESTION,
) -> list[tuple[dict[str, Any], list[AuthoredSentence]]]:
    """The perfect-model fake's answers through the whole workflow: each record with what the
    fake wrote (its sentences, their correct sources and the numbers it put on them)."""
    import asyncio

    from citeflow.evaluation.perfect_model import PerfectAuthor, PerfectModelLLM
    from citeflow.evaluation.runner import corpus_index

    llm = PerfectModelLLM(PerfectAuthor(golds_of(dataset, query_ids, template), variant))
    workflow = corpus_index(dataset, context).kb.workflow(llm)

    async def run() -> list[tuple[dict[str, Any], list[AuthoredSentence]]]:
        out = []
        for qid in query_ids:
            question = question_of(dataset.queries[qid], template)
            started = time.perf_counter()
            result = await workflow.run(query=question)
            record = record_of(qid, question, result, time.perf_counter() - started)
            out.append((record, llm.authored_for(question)))
        return out

    return asyncio.run(run())


def perfect_section(
    dataset: BeirDataset,
    context: EvalContext,
    *,
    count: int,
    variant: Variant,
    template: str = CLAIM_QUESTION,
) -> tuple[str, dict[str, Any]]:
    """``citeflow eval --answers N --perfect-model VARIANT``: the first N questions answered by
    the perfect-model fake (`citeflow.evaluation.perfect_model`) through the whole workflow;
    prints how many of its correct citations citeflow kept, how many it added wrong, and how many
    of its wrong ones it fixed or removed, beside the usual figures."""
    from citeflow.evaluation.perfect_model import PerfectScore, score_answer
    from citeflow.evaluation.scoring import score_all, table

    answered = perfect_answers(dataset, context, list(dataset.queries)[:count], variant, template)
    records = [record for record, _ in answered]
    perfect = PerfectScore.total(score_answer(a, r["answer"]) for r, a in answered)
    name = f"perfect model ({variant})"
    rows = {
        f"{dataset.name}: {name}'s markers": score_all(records, dataset, raw=True),
        f"{dataset.name}: citeflow": score_all(records, dataset),
    }
    figures = perfect_figures(perfect)
    shown = ", ".join(f"{k} {v}" for k, v in figures.items())
    title = f"Answers: {dataset.name}/{dataset.split}, first {len(records)} questions, {name}"
    return table(title, rows) + f"\n{name}: {shown}", {
        "llm": name,
        "perfect": figures,
        "rows": {k: v.figures() for k, v in rows.items()},
    }


def perfect_figures(score: PerfectScore) -> dict[str, float | int | None]:
    """The perfect-model figures of the issue's targets."""

    def rate(value: float | None) -> float | None:
        return None if value is None else round(value, 3)

    return {
        "correct_written": score.correct_written,
        "kept_rate": rate(score.kept_rate),
        "wrong_added": score.wrong_added,
        "wrong_written": score.wrong_written,
        "fixed_or_removed_rate": rate(score.fixed_or_removed_rate),
        "unaligned": score.unaligned,
    }
