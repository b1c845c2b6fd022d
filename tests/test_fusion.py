"""Fusing dense and BM25 rankings."""

from __future__ import annotations

import pytest

from citeflow.query.fusion import fuse, reciprocal_rank_fusion, relative_score_fusion
from citeflow.store import Candidate


def hits(*pairs: tuple[str, float]) -> list[Candidate]:
    return [Candidate(i, s) for i, s in pairs]


def ids(fused: list[tuple[str, float]]) -> list[str]:
    return [key for key, _ in fused]


DENSE = hits(("a", 0.9), ("b", 0.8), ("c", 0.7))
SPARSE = hits(("c", 12.0), ("d", 9.0), ("a", 1.0))


def test_rrf_rewards_agreement_and_keeps_single_side_hits() -> None:
    fused = reciprocal_rank_fusion(DENSE, SPARSE, top_k=10)
    assert ids(fused)[:2] == ["a", "c"]  # found by both
    assert set(ids(fused)) == {"a", "b", "c", "d"}
    assert fused[0][1] == pytest.approx(0.5 / 61 + 0.5 / 63)


def test_rrf_weights_choose_a_side() -> None:
    assert ids(reciprocal_rank_fusion(DENSE, SPARSE, top_k=3, dense_weight=1.0)) == ["a", "b", "c"]
    assert ids(reciprocal_rank_fusion(DENSE, SPARSE, top_k=3, dense_weight=0.0)) == ["c", "d", "a"]


def test_top_k_cuts_and_empty_sides_work() -> None:
    assert len(fuse(DENSE, SPARSE, mode="rrf", top_k=2)) == 2
    assert ids(fuse(DENSE, [], mode="rrf", top_k=5)) == ["a", "b", "c"]
    assert ids(fuse([], SPARSE, mode="relative", top_k=5)) == ["c", "d", "a"]
    assert fuse([], [], mode="relative", top_k=5) == []


def test_relative_fusion_normalises_each_side() -> None:
    scores = dict(relative_score_fusion(DENSE, SPARSE, top_k=10))
    # a: dense 1.0, sparse 0.0 → 0.5; c: dense 0.0, sparse 1.0 → 0.5; d: sparse 8/11 → 0.36
    assert scores == pytest.approx({"a": 0.5, "c": 0.5, "d": 0.5 * 8 / 11, "b": 0.25})


def test_relative_fusion_keeps_score_gaps_rrf_ignores() -> None:
    dense = hits(("a", 0.95), ("b", 0.20), ("c", 0.19))
    sparse = hits(("b", 10.0), ("c", 9.9), ("a", 0.1))
    assert ids(relative_score_fusion(dense, sparse, top_k=1)) == ["b"]
    assert ids(relative_score_fusion(dense, sparse, top_k=1, dense_weight=0.7)) == ["a"]


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="dense_weight"):
        fuse(DENSE, SPARSE, mode="rrf", top_k=3, dense_weight=1.5)
    with pytest.raises(ValueError, match="unknown fusion"):
        fuse(DENSE, SPARSE, mode="max", top_k=3)  # type: ignore[arg-type]
