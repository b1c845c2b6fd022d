"""Ranking metrics as BEIR reports them (trec_eval's definitions), as pure functions.

A *run* maps each query id to ``{document id: score}`` (higher is better); *qrels* map each query
id to ``{document id: graded relevance}`` (grade ≤ 0: judged non-relevant). A run is ranked as
trec_eval ranks it: by score, descending, ties broken by document id, descending.

* ``nDCG@k``: DCG = Σ_{i ≤ k} grade_i / log2(i + 1) over the ranking, divided by the DCG of the
  ideal ranking of *all* judged documents (grades sorted descending, cut at k): trec_eval's
  ``ndcg_cut.k`` with linear gains, which is what BEIR reports.
* ``Recall@k``: relevant documents in the top k / all relevant documents.
* ``MRR@k``: 1 / rank of the first relevant document in the top k, else 0.

Averages are over every query in the qrels: a query the run misses (or answers with nothing)
scores 0, and so does a query with no relevant document. (BEIR, through pytrec_eval, averages
over the queries present in the run instead; with a run that answers every query the two agree.)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence

__all__ = [
    "METRICS",
    "Qrels",
    "Run",
    "evaluate",
    "metric_name",
    "mrr_at_k",
    "ndcg_at_k",
    "per_query",
    "query_mrr",
    "query_ndcg",
    "query_recall",
    "rank",
    "recall_at_k",
]

Run = Mapping[str, Mapping[str, float]]
Qrels = Mapping[str, Mapping[str, int]]
QueryMetric = Callable[[Sequence[str], Mapping[str, int], int], float]


def rank(scores: Mapping[str, float]) -> list[str]:
    """Document ids best first: score descending, ties by document id descending (trec_eval)."""
    return [doc for doc, _ in sorted(scores.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)]


def _check_k(k: int) -> None:
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")


# --- one query -----------------------------------------------------------------------------------
def query_ndcg(ranking: Sequence[str], judged: Mapping[str, int], k: int) -> float:
    """nDCG@k of one ranked list (trec_eval ``ndcg_cut``; 0 when nothing is relevant)."""
    _check_k(k)
    ideal = sorted((g for g in judged.values() if g > 0), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    if idcg <= 0.0:
        return 0.0
    dcg = sum(max(judged.get(doc, 0), 0) / math.log2(i + 2) for i, doc in enumerate(ranking[:k]))
    return dcg / idcg


def query_recall(ranking: Sequence[str], judged: Mapping[str, int], k: int) -> float:
    """Recall@k of one ranked list (0 when nothing is relevant)."""
    _check_k(k)
    relevant = {doc for doc, g in judged.items() if g > 0}
    if not relevant:
        return 0.0
    return len(relevant.intersection(ranking[:k])) / len(relevant)


def query_mrr(ranking: Sequence[str], judged: Mapping[str, int], k: int) -> float:
    """Reciprocal rank of the first relevant document within the top k, else 0."""
    _check_k(k)
    for i, doc in enumerate(ranking[:k]):
        if judged.get(doc, 0) > 0:
            return 1.0 / (i + 1)
    return 0.0


#: metric family → per-query function; names are ``f"{family}@{k}"``.
METRICS: dict[str, QueryMetric] = {
    "nDCG": query_ndcg,
    "Recall": query_recall,
    "MRR": query_mrr,
}


def metric_name(family: str, k: int) -> str:
    """``metric_name("nDCG", 10) == "nDCG@10"``."""
    return f"{family}@{k}"


# --- a run -------------------------------------------------------------------------------------
def _mean(run: Run, qrels: Qrels, fn: QueryMetric, k: int) -> float:
    if not qrels:
        return 0.0
    total = sum(fn(rank(run.get(qid, {})), judged, k) for qid, judged in qrels.items())
    return total / len(qrels)


def ndcg_at_k(run: Run, qrels: Qrels, k: int) -> float:
    """Mean nDCG@k over the queries of ``qrels``."""
    return _mean(run, qrels, query_ndcg, k)


def recall_at_k(run: Run, qrels: Qrels, k: int) -> float:
    """Mean Recall@k over the queries of ``qrels``."""
    return _mean(run, qrels, query_recall, k)


def mrr_at_k(run: Run, qrels: Qrels, k: int) -> float:
    """Mean reciprocal rank (cut at k) over the queries of ``qrels``."""
    return _mean(run, qrels, query_mrr, k)


def per_query(
    run: Run, qrels: Qrels, k_values: Iterable[int], families: Iterable[str] = tuple(METRICS)
) -> dict[str, dict[str, float]]:
    """Query id → {``"nDCG@10"``: value, ...} for every query of ``qrels``."""
    ks = sorted(set(k_values))
    names = list(families)
    out: dict[str, dict[str, float]] = {}
    for qid, judged in qrels.items():
        ranking = rank(run.get(qid, {}))
        out[qid] = {
            metric_name(family, k): METRICS[family](ranking, judged, k)
            for family in names
            for k in ks
        }
    return out


def evaluate(
    run: Run, qrels: Qrels, k_values: Iterable[int], families: Iterable[str] = tuple(METRICS)
) -> dict[str, float]:
    """Mean of every metric at every k over the queries of ``qrels``, e.g. ``{"nDCG@10": …}``."""
    ks = sorted(set(k_values))
    names = list(families)
    rows = per_query(run, qrels, ks, names)
    n = len(rows)
    return {
        metric_name(family, k): (
            sum(r[metric_name(family, k)] for r in rows.values()) / n if n else 0.0
        )
        for family in names
        for k in ks
    }
