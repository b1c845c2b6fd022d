"""Fusing the dense and keyword (BM25) result lists into one ranking.

* ``rrf``: reciprocal rank fusion, ``Σ weight / (k + rank)``. Uses ranks only, so the two sides'
  score scales never matter.
* ``relative``: each side's scores min-max normalised over its own candidates, then a weighted
  sum (LlamaIndex's "relative score" fusion). Keeps how much better the best hits are.

``dense_weight`` in [0, 1] weighs the dense side; the keyword side gets ``1 - dense_weight``.
A node found by one side only gets nothing from the other.

Measured on SciFact's 809 train claims (MiniLM + BM25, per side 100 candidates), nDCG@10:
relative 0.736 at dense_weight 0.4-0.5 vs. RRF 0.722-0.727 (k 10-60); hence the defaults
(relative, 0.5). Dense alone 0.671, BM25 alone 0.701.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from llama_index.core.schema import NodeWithScore

FusionMode = Literal["rrf", "relative"]


def _check_weight(dense_weight: float) -> None:
    if not 0.0 <= dense_weight <= 1.0:
        raise ValueError(f"dense_weight must be within [0, 1], got {dense_weight}")


def _merge(
    sides: Sequence[tuple[Sequence[NodeWithScore], Sequence[float], float]], top_k: int
) -> list[NodeWithScore]:
    nodes: dict[str, NodeWithScore] = {}
    fused: dict[str, float] = {}
    for hits, contributions, weight in sides:
        for hit, value in zip(hits, contributions, strict=True):
            node_id = hit.node.node_id
            nodes.setdefault(node_id, hit)
            fused[node_id] = fused.get(node_id, 0.0) + weight * value
    ranked = sorted(fused, key=lambda node_id: fused[node_id], reverse=True)[:top_k]
    return [NodeWithScore(node=nodes[i].node, score=fused[i]) for i in ranked]


def reciprocal_rank_fusion(
    dense: Sequence[NodeWithScore],
    sparse: Sequence[NodeWithScore],
    *,
    top_k: int,
    dense_weight: float = 0.5,
    k: int = 60,
) -> list[NodeWithScore]:
    """Weighted RRF of two rankings (best first); scores are the fused values."""
    _check_weight(dense_weight)
    if k < 0:
        raise ValueError(f"the RRF constant must be non-negative, got {k}")
    return _merge(
        [
            (dense, [1.0 / (k + rank) for rank in range(1, len(dense) + 1)], dense_weight),
            (sparse, [1.0 / (k + rank) for rank in range(1, len(sparse) + 1)], 1 - dense_weight),
        ],
        top_k,
    )


def _normalised(hits: Sequence[NodeWithScore]) -> list[float]:
    scores = [float(h.score or 0.0) for h in hits]
    if not scores:
        return []
    low, high = min(scores), max(scores)
    if high == low:
        return [1.0] * len(scores)
    return [(s - low) / (high - low) for s in scores]


def relative_score_fusion(
    dense: Sequence[NodeWithScore],
    sparse: Sequence[NodeWithScore],
    *,
    top_k: int,
    dense_weight: float = 0.5,
) -> list[NodeWithScore]:
    """Weighted sum of min-max normalised scores; scores are the fused values in [0, 1]."""
    _check_weight(dense_weight)
    return _merge(
        [
            (dense, _normalised(dense), dense_weight),
            (sparse, _normalised(sparse), 1 - dense_weight),
        ],
        top_k,
    )


def fuse(
    dense: Sequence[NodeWithScore],
    sparse: Sequence[NodeWithScore],
    *,
    mode: FusionMode,
    top_k: int,
    dense_weight: float = 0.5,
    rrf_k: int = 60,
) -> list[NodeWithScore]:
    """Fuse two rankings with the named method."""
    if mode == "rrf":
        return reciprocal_rank_fusion(
            dense, sparse, top_k=top_k, dense_weight=dense_weight, k=rrf_k
        )
    if mode == "relative":
        return relative_score_fusion(dense, sparse, top_k=top_k, dense_weight=dense_weight)
    raise ValueError(f"unknown fusion {mode!r} (use rrf or relative)")
