"""Translation of citeflow's dense vectors and filters into qdrant-edge's."""

from __future__ import annotations

from typing import Any

import numpy as np
from qdrant_edge import FieldCondition, Filter, IsEmptyCondition, MatchAny, MatchValue

from citeflow.store.engine import INCOMPLETE, Vector, Where

__all__ = ["dense_for_edge", "edge_filter"]


def dense_for_edge(vector: Vector) -> Any:
    """A dense vector as qdrant-edge takes it: a list of floats or a float32 array, as is (a
    copy per element cost a fifth of an upsert's time)."""
    if isinstance(vector, np.ndarray):
        return vector.astype(np.float32, copy=False)
    return vector if isinstance(vector, list) else list(vector)


def edge_filter(where: Where | None) -> Filter | None:
    if where is None:
        return None
    must: list[Any] = []
    must_not: list[Any] = []
    if where.doc_ids is not None:
        if len(where.doc_ids) == 1:
            match: Any = MatchValue(value=where.doc_ids[0])
        else:
            match = MatchAny(any=list(where.doc_ids))
        must.append(FieldCondition(key="doc_id", match=match))
    if where.not_content_hash is not None:
        must_not.append(
            FieldCondition(key="content_hash", match=MatchValue(value=where.not_content_hash))
        )
    if where.incomplete is not None:
        # "has the key": qdrant-edge 0.9.0 turns MatchValue(value=True) into the integer 1,
        # which matches no stored ``true``; the mark is only ever True, or absent
        unmarked = IsEmptyCondition(key=INCOMPLETE)
        (must_not if where.incomplete else must).append(unmarked)
    if not must and not must_not:
        return None
    return Filter(must=must or None, must_not=must_not or None)
