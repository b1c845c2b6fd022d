"""The perfect-model fake's answers through the whole workflow (``citeflow eval --answers N
--perfect-model VARIANT``): how many of its correct citations citeflow keeps, how many it adds
wrong, and how many of its wrong ones it fixes or removes (`citeflow.evaluation.perfect_model`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from citeflow.evaluation.answers import CLAIM_QUESTION, answer_now, question_of, questions_of

if TYPE_CHECKING:
    from citeflow.evaluation.dataset import BeirDataset
    from citeflow.evaluation.perfect_model import AuthoredSentence, Gold, PerfectScore, Variant
    from citeflow.evaluation.runner import EvalContext


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
            record = await answer_now(workflow, qid, question)
            out.append((record, llm.authored_for(question)))
        return out

    return asyncio.run(run())


def perfect_section(
    dataset: BeirDataset,
    context: EvalContext,
    *,
    ids: Sequence[str],
    variant: Variant,
    template: str = CLAIM_QUESTION,
) -> tuple[str, dict[str, Any]]:
    """``citeflow eval --answers N --perfect-model VARIANT``: the questions ``ids`` answered by
    the perfect-model fake (`citeflow.evaluation.perfect_model`) through the whole workflow;
    prints how many of its correct citations citeflow kept, how many it added wrong, and how many
    of its wrong ones it fixed or removed, beside the usual figures."""
    from citeflow.evaluation.perfect_model import PerfectScore, joins_clauses, score_answer
    from citeflow.evaluation.scoring import score_all, table

    answered = perfect_answers(dataset, context, ids, variant, template)
    records = [record for record, _ in answered]
    clauses = joins_clauses(variant)
    perfect = PerfectScore.total(score_answer(a, r["answer"], clauses=clauses) for r, a in answered)
    name = f"perfect model ({variant})"
    rows = {
        f"{dataset.name}: {name}'s markers": score_all(records, dataset, raw=True),
        f"{dataset.name}: citeflow": score_all(records, dataset),
    }
    figures = perfect_figures(perfect)
    shown = ", ".join(f"{k} {v}" for k, v in figures.items())
    title = f"Answers: {dataset.name}/{dataset.split}, {questions_of(dataset, ids)}, {name}"
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
