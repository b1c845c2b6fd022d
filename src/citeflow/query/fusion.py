"""Fusing the dense and keyword (BM25) result lists into one ranking.

* ``rrf``: reciprocal rank fusion, ``Σ weight / (k + rank)``. Uses ranks only, so the two sides'
  score scales never matter.
* ``relative``: each side's scores min-max normalised over its own candidates, then a weighted
  sum (LlamaIndex's "relative score" fusion). Keeps how much better the best hits are.

``dense_weight`` in [0, 1] weighs the dense side; the keyword side gets ``1 - dense_weight``.
A candidate found by one side only gets nothing from the other (in relative fusion its real
cosine would be below the lowest dense candidate's, i.e. 0 once normalised, anyway).

The defaults (relative, 0.5) rank best on SciFact's train claims (nDCG@10 0.736 against
RRF's 0.727 at most).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

from citeflow.store import Candidate

FusionMode = Literal["rrf", "relative"]


def _check_weight(dense_weight: float) -> None:
    if not 0.0 <= dense_weight <= 1.0:
        raise ValueError(f"dense_weight must be within [0, 1], got {dense_weight}")


def _merge(
    sides: Sequence[tuple[Mapping[str, float], float]], top_k: int
) -> list[tuple[str, float]]:
    fused: dict[str, float] = {}
    for contributions, weight in sides:
        for key, value in contributions.items():
            fused[key] = fused.get(key, 0.0) + weight * value
    return sorted(fused.items(), key=lambda item: item[1], reverse=True)[:top_k]


def reciprocal_rank_fusion(
    dense: Sequence[Candidate],
    sparse: Sequence[Candidate],
    *,
    top_k: int,
    dense_weight: float = 0.5,
    k: int = 60,
) -> list[tuple[str, float]]:
    """Weighted RRF of two rankings (best first): (id, fused value) pairs, best first."""
    _check_weight(dense_weight)
    if k < 0:
        raise ValueError(f"the RRF constant must be non-negative, got {k}")
    return _merge(
        [
            ({h.id: 1.0 / (k + rank) for rank, h in enumerate(dense, 1)}, dense_weight),
            ({h.id: 1.0 / (k + rank) for rank, h in enumerate(sparse, 1)}, 1 - dense_weight),
        ],
        top_k,
    )


def _normalised(hits: Sequence[Candidate]) -> dict[str, float]:
    """Min-max normalised scores over ``hits``."""
    scores = {h.id: float(h.score) for h in hits}
    if not scores:
        return {}
    low, high = min(scores.values()), max(scores.values())
    span = high - low
    return {key: (value - low) / span if span else 1.0 for key, value in scores.items()}


def relative_score_fusion(
    dense: Sequence[Candidate],
    sparse: Sequence[Candidate],
    *,
    top_k: int,
    dense_weight: float = 0.5,
) -> list[tuple[str, float]]:
    """Weighted sum of min-max normalised scores: (id, fused value in [0, 1]), best first."""
    _check_weight(dense_weight)
    return _merge(
        [
            (_normalised(dense), dense_weight),
            (_normalised(sparse), 1 - dense_weight),
        ],
        top_k,
    )


def fuse(
    dense: Sequence[Candidate],
    sparse: Sequence[Candidate],
    *,
    mode: FusionMode,
    top_k: int,
    dense_weight: float = 0.5,
    rrf_k: int = 60,
) -> list[tuple[str, float]]:
    """Fuse two rankings with the named method: (id, fused value) pairs, best first."""
    if mode == "rrf":
        return reciprocal_rank_fusion(
            dense, sparse, top_k=top_k, dense_weight=dense_weight, k=rrf_k
        )
    if mode == "relative":
        return relative_score_fusion(dense, sparse, top_k=top_k, dense_weight=dense_weight)
    raise ValueError(f"unknown fusion {mode!r} (use rrf or relative)")
