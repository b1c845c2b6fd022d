"""Ranking metrics as BEIR reports them, computed by trec_eval itself (pytrec_eval).

A *run* maps each query id to ``{document id: score}`` (higher is better); *qrels* map each query
id to ``{document id: graded relevance}`` (grade ≤ 0: judged non-relevant). trec_eval ranks a run
by score, descending, ties broken by document id, descending (`rank` does the same).

* ``nDCG@k``: trec_eval's ``ndcg_cut.k`` (linear gains; the ideal ranking is that of *all* judged
  documents), which is what BEIR reports.
* ``Recall@k``: trec_eval's ``recall.k``: relevant documents in the top k / all relevant ones.
* ``MRR@k``: trec_eval's ``recip_rank`` of the run cut at k (trec_eval has no cut for it; BEIR
  cuts the same way): 1 / rank of the first relevant document in the top k, else 0.

Averages are over every query in the qrels: a query the run misses (or answers with nothing)
scores 0, and so does a query with no relevant document. (BEIR averages over the queries present
in the run instead; with a run that answers every query the two agree.)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import pytrec_eval

__all__ = [
    "FAMILIES",
    "Qrels",
    "Run",
    "best_scores",
    "evaluate",
    "metric_name",
    "mrr_at_k",
    "ndcg_at_k",
    "per_query",
    "rank",
    "recall_at_k",
]

Run = Mapping[str, Mapping[str, float]]
Qrels = Mapping[str, Mapping[str, int]]

#: the metric families, in report order; names are ``f"{family}@{k}"``.
FAMILIES = ("nDCG", "Recall", "MRR")
#: family → trec_eval measure (``MRR`` is ``recip_rank`` of the run cut at k).
_TREC_MEASURE = {"nDCG": "ndcg_cut", "Recall": "recall"}


def rank(scores: Mapping[str, float]) -> list[str]:
    """Document ids best first: score descending, ties by document id descending (trec_eval)."""
    return [doc for doc, _ in sorted(scores.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)]


def best_scores(hits: Iterable[tuple[object, float]]) -> dict[str, float]:
    """A run's entry for one query from (document id, score) pairs: each document's best score."""
    scores: dict[str, float] = {}
    for doc_id, score in hits:
        doc, value = str(doc_id), float(score)
        if doc not in scores or value > scores[doc]:
            scores[doc] = value
    return scores


def metric_name(family: str, k: int) -> str:
    """``metric_name("nDCG", 10) == "nDCG@10"``."""
    return f"{family}@{k}"


def _check(ks: Sequence[int], families: Iterable[str]) -> None:
    if ks and min(ks) < 1:
        raise ValueError(f"k must be at least 1, got {min(ks)}")
    unknown = set(families) - set(FAMILIES)
    if unknown:
        raise ValueError(f"unknown metric families {sorted(unknown)}; known: {list(FAMILIES)}")


def _top(run: Run, k: int) -> dict[str, dict[str, float]]:
    """The run cut at k, in trec_eval's order (the scores kept, so the order is too)."""
    return {qid: {doc: scores[doc] for doc in rank(scores)[:k]} for qid, scores in run.items()}


def per_query(
    run: Run, qrels: Qrels, k_values: Iterable[int], families: Iterable[str] = FAMILIES
) -> dict[str, dict[str, float]]:
    """Query id → {``"nDCG@10"``: value, ...} for every query of ``qrels``."""
    ks = sorted(set(k_values))
    names = list(families)
    _check(ks, names)
    judged = {qid: dict(docs) for qid, docs in qrels.items()}
    ranked = {qid: dict(scores) for qid, scores in run.items() if qid in judged and scores}
    found: dict[str, dict[str, float]] = {qid: {} for qid in ranked}
    cut = [family for family in names if family in _TREC_MEASURE]
    if cut:
        measures = {f"{_TREC_MEASURE[family]}.{','.join(map(str, ks))}" for family in cut}
        results = pytrec_eval.RelevanceEvaluator(judged, measures).evaluate(ranked)
        for qid, values in results.items():
            for family in cut:
                for k in ks:
                    found[qid][metric_name(family, k)] = values[f"{_TREC_MEASURE[family]}_{k}"]
    if "MRR" in names:
        reciprocal = pytrec_eval.RelevanceEvaluator(judged, {"recip_rank"})
        for k in ks:
            for qid, values in reciprocal.evaluate(_top(ranked, k)).items():
                found[qid][metric_name("MRR", k)] = values["recip_rank"]
    return {
        qid: {
            metric_name(family, k): found.get(qid, {}).get(metric_name(family, k), 0.0)
            for family in names
            for k in ks
        }
        for qid in judged
    }


def evaluate(
    run: Run, qrels: Qrels, k_values: Iterable[int], families: Iterable[str] = FAMILIES
) -> dict[str, float]:
    """Mean of every metric at every k over the queries of ``qrels``, e.g. ``{"nDCG@10": …}``."""
    ks = sorted(set(k_values))
    names = list(families)
    rows = per_query(run, qrels, ks, names).values()
    metrics = [metric_name(family, k) for family in names for k in ks]
    return {m: sum(r[m] for r in rows) / len(rows) if rows else 0.0 for m in metrics}


def ndcg_at_k(run: Run, qrels: Qrels, k: int) -> float:
    """Mean nDCG@k over the queries of ``qrels``."""
    return evaluate(run, qrels, [k], ["nDCG"])[metric_name("nDCG", k)]


def recall_at_k(run: Run, qrels: Qrels, k: int) -> float:
    """Mean Recall@k over the queries of ``qrels``."""
    return evaluate(run, qrels, [k], ["Recall"])[metric_name("Recall", k)]


def mrr_at_k(run: Run, qrels: Qrels, k: int) -> float:
    """Mean reciprocal rank (cut at k) over the queries of ``qrels``."""
    return evaluate(run, qrels, [k], ["MRR"])[metric_name("MRR", k)]
