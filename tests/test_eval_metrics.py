"""Retrieval metrics against hand-computed values (trec_eval / BEIR definitions)."""

from __future__ import annotations

import math

import pytest

from citeflow.evaluation.metrics import (
    evaluate,
    metric_name,
    mrr_at_k,
    ndcg_at_k,
    per_query,
    rank,
    recall_at_k,
)

# q1: graded judgements, a judged non-relevant document, an unjudged one ranked first.
# q2: judged, but the run has nothing for it: it scores 0 and still counts in the mean.
QRELS = {"q1": {"a": 2, "b": 1, "c": 0}, "q2": {"d": 1}}
RUN = {"q1": {"x": 0.9, "a": 0.8, "c": 0.7, "b": 0.6}, "q3": {"a": 1.0}}
# q1 ranks x, a, c, b: relevant at ranks 2 (grade 2) and 4 (grade 1).
#   DCG@3  = 2/log2(3)                 = 1.2618595
#   DCG@10 = 2/log2(3) + 1/log2(5)     = 1.6925361
#   IDCG   = 2/log2(2) + 1/log2(3)     = 2.6309298 (both relevant documents fit in 3)
NDCG3_Q1 = 1.2618595 / 2.6309298  # 0.4796249
NDCG10_Q1 = 1.6925361 / 2.6309298  # 0.6433224


def _one(family: str, ranking: list[str], judged: dict[str, int], k: int) -> float:
    """One query's metric for ``ranking`` (best first)."""
    run = {"q": {doc: float(len(ranking) - i) for i, doc in enumerate(ranking)}}
    return per_query(run, {"q": judged}, [k], [family])["q"][metric_name(family, k)]


def test_rank_orders_by_score_then_doc_id_descending_like_trec_eval() -> None:
    assert rank({"a": 0.5, "b": 0.9, "c": 0.5}) == ["b", "c", "a"]
    assert rank({}) == []


def test_query_ndcg_hand_computed() -> None:
    ranking = rank(RUN["q1"])
    assert ranking == ["x", "a", "c", "b"]
    assert _one("nDCG", ranking, QRELS["q1"], 3) == pytest.approx(0.4796249, abs=1e-6)
    assert _one("nDCG", ranking, QRELS["q1"], 10) == pytest.approx(0.6433224, abs=1e-6)
    assert _one("nDCG", ranking, QRELS["q1"], 1) == 0.0  # x is unjudged


def test_ideal_dcg_counts_every_judged_relevant_document_not_only_the_retrieved() -> None:
    # one of three relevant documents retrieved, at rank 1
    judged = {"a": 1, "b": 1, "c": 1}
    idcg = 1 + 1 / math.log2(3) + 1 / math.log2(4)  # 2.1309298
    assert _one("nDCG", ["a"], judged, 10) == pytest.approx(1 / idcg)
    assert _one("nDCG", ["a"], judged, 10) == pytest.approx(0.4692787, abs=1e-6)
    # the ideal ranking is cut at k too: nDCG@1 of a perfect first hit is 1
    assert _one("nDCG", ["a"], judged, 1) == 1.0


def test_graded_gain_is_linear() -> None:
    # grade 3 then grade 1 vs the ideal (same two documents, right order)
    assert _one("nDCG", ["lo", "hi"], {"hi": 3, "lo": 1}, 10) == pytest.approx(
        (1 + 3 / math.log2(3)) / (3 + 1 / math.log2(3))  # 0.8154648
    )


def test_query_recall_and_mrr_hand_computed() -> None:
    ranking = rank(RUN["q1"])
    assert _one("Recall", ranking, QRELS["q1"], 3) == 0.5
    assert _one("Recall", ranking, QRELS["q1"], 4) == 1.0
    assert _one("Recall", ranking, QRELS["q1"], 1) == 0.0
    assert _one("MRR", ranking, QRELS["q1"], 10) == 0.5
    assert _one("MRR", ranking, QRELS["q1"], 1) == 0.0
    assert _one("MRR", ["c", "b"], QRELS["q1"], 10) == 0.5  # c is judged 0: not relevant


def test_the_mrr_cut_breaks_ties_like_trec_eval() -> None:
    tied = {"q": {"a": 1.0, "b": 1.0}}  # ranked b, a
    assert per_query(tied, {"q": {"a": 1}}, [1, 2])["q"] == {
        "nDCG@1": 0.0,
        "nDCG@2": pytest.approx(1 / math.log2(3)),
        "Recall@1": 0.0,
        "Recall@2": 1.0,
        "MRR@1": 0.0,
        "MRR@2": 0.5,
    }
    assert per_query(tied, {"q": {"b": 1}}, [1])["q"]["MRR@1"] == 1.0


def test_queries_with_nothing_relevant_score_zero() -> None:
    assert _one("nDCG", ["a"], {"a": 0}, 10) == 0.0
    assert _one("Recall", ["a"], {"a": 0}, 10) == 0.0
    assert _one("MRR", ["a"], {"a": 0}, 10) == 0.0


def test_means_are_over_the_qrels_queries() -> None:
    # q2 (missed by the run) counts as 0; q3 (not judged) is ignored
    assert ndcg_at_k(RUN, QRELS, 3) == pytest.approx(NDCG3_Q1 / 2, abs=1e-6)
    assert ndcg_at_k(RUN, QRELS, 10) == pytest.approx(NDCG10_Q1 / 2, abs=1e-6)
    assert recall_at_k(RUN, QRELS, 3) == 0.25
    assert recall_at_k(RUN, QRELS, 100) == 0.5
    assert mrr_at_k(RUN, QRELS, 10) == 0.25
    assert ndcg_at_k(RUN, {}, 10) == 0.0


def test_evaluate_and_per_query_names_and_values() -> None:
    scores = evaluate(RUN, QRELS, [10, 3])
    assert list(scores) == [
        "nDCG@3",
        "nDCG@10",
        "Recall@3",
        "Recall@10",
        "MRR@3",
        "MRR@10",
    ]
    assert scores["nDCG@3"] == pytest.approx(0.2398124, abs=1e-6)
    assert scores["Recall@10"] == 0.5
    rows = per_query(RUN, QRELS, [3])
    assert rows["q1"] == {
        "nDCG@3": pytest.approx(0.4796249, abs=1e-6),
        "Recall@3": 0.5,
        "MRR@3": 0.5,
    }
    assert rows["q2"] == {"nDCG@3": 0.0, "Recall@3": 0.0, "MRR@3": 0.0}
    assert set(rows) == {"q1", "q2"}


def test_perfect_run_scores_one() -> None:
    qrels = {"q": {"a": 2, "b": 1}}
    run = {"q": {"a": 0.9, "b": 0.8, "z": 0.1}}
    assert evaluate(run, qrels, [10]) == {"nDCG@10": 1.0, "Recall@10": 1.0, "MRR@10": 1.0}


def test_k_must_be_positive() -> None:
    with pytest.raises(ValueError, match="k must be at least 1"):
        per_query(RUN, QRELS, [0])
