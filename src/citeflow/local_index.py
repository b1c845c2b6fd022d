"""Vectorised search over the embedded store's in-process points.

qdrant-client's local mode (the embedded store) keeps every point in memory and ranks a query by
scanning them all: a BM25 (sparse) query is a Python merge against every stored sparse vector,
about 30 ms per 1,000 chunks, so an embedded collection of 50,000 chunks would spend over a second
per question there. It also builds pydantic objects for every request and every hit.

`LocalIndex` searches the same in-process data with numpy and gives the same ranking and scores:

* dense: one matrix product over qdrant-client's own (normalised) vector array, the best ``limit``
  picked with ``argpartition``;
* keyword: an inverted index (term → rows, weights) kept beside the collection; a query touches the
  postings of its own terms only. Scores are Qdrant's: the query's term weights times the IDF of
  each term (``ln((n - df + 0.5) / (df + 0.5) + 1)``, from qdrant-client's own document
  frequencies), dotted with the stored document weights; points sharing no term are left out.

The index follows writes: points appended since the last search are indexed then, and `Store`
reports the points it overwrote (`touch`), whose old rows are then dropped. Deleted points are
masked with qdrant-client's live ``deleted`` flags at query time. Writes that bypass `Store`
(another client on the same object) may only append; `Store` writes everything itself.

`LocalIndex.attach` returns None when qdrant-client's internals are not the ones known here, and
the caller falls back to qdrant-client's own search.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["LocalIndex"]

FloatArray = npt.NDArray[np.float32]
IntArray = npt.NDArray[np.int64]

#: rebuild the inverted index from scratch once this share of its rows is dead (overwritten)
COMPACT_SHARE = 0.5


class LocalIndex:
    """Dense and BM25 search over one qdrant-client local collection (see the module doc)."""

    def __init__(self, local: Any, *, dense: str, sparse: str | None) -> None:
        self._local = local
        self._dense = dense
        self._sparse = sparse
        self._lock = threading.Lock()
        self._reset()

    @classmethod
    def attach(cls, local: Any, *, dense: str, sparse: str | None) -> LocalIndex | None:
        """An index over ``local`` when its internals are the known ones, else None."""
        try:
            vectors = local.vectors
            params = local.config.vectors
            distance = (params[dense] if isinstance(params, dict) else params).distance
            known = (
                isinstance(local.ids_inv, list)
                and isinstance(local.deleted, np.ndarray)
                and isinstance(local.deleted_per_vector.get(dense), np.ndarray)
                and isinstance(vectors.get(dense), np.ndarray)
                and str(getattr(distance, "value", distance)).lower() == "cosine"
            )
            if sparse is not None:
                modifier = local.config.sparse_vectors[sparse].modifier
                known = (
                    known
                    and isinstance(local.sparse_vectors.get(sparse), list)
                    and isinstance(local.sparse_vectors_idf, dict)
                    and isinstance(local.deleted_per_vector.get(sparse), np.ndarray)
                    and str(getattr(modifier, "value", modifier)).lower() == "idf"
                )
        except (AttributeError, KeyError, TypeError):
            return None
        return cls(local, dense=dense, sparse=sparse) if known else None

    @property
    def local(self) -> Any:
        return self._local

    @property
    def rows(self) -> int:
        """Rows of the inverted index (one per indexed point version, dead ones included)."""
        return len(self._row_point)

    @property
    def has_keywords(self) -> bool:
        return self._sparse is not None

    # --- upkeep ------------------------------------------------------------------------------
    def _reset(self) -> None:
        self._row_point: list[int] = []  # row → point index in the collection
        self._row_of: dict[int, int] = {}  # point index → its current row
        self._dead: set[int] = set()  # rows of overwritten points
        self._postings: dict[int, tuple[list[int], list[float]]] = {}
        self._arrays: dict[int, tuple[IntArray, FloatArray]] = {}
        self._seen = 0  # points indexed (qdrant-client appends, never reorders)
        self._touched: set[int] = set()
        self._rows_alive: tuple[IntArray, npt.NDArray[np.bool_]] | None = (
            None  # arrays of the above
        )

    def touch(self, points: Iterable[int]) -> None:
        """Points (collection indexes) overwritten in place since the last search."""
        with self._lock:
            self._touched.update(points)

    def _sync(self) -> None:
        if self._sparse is None:
            return
        total = len(self._local.ids_inv)
        if total < self._seen:  # the collection shrank: not something qdrant-client does
            self._reset()
        changed = sorted(i for i in self._touched if i < self._seen)
        self._touched.clear()
        if not changed and total == self._seen:
            return
        vectors = self._local.sparse_vectors[self._sparse]
        self._rows_alive = None
        for point in [*changed, *range(self._seen, total)]:
            old = self._row_of.get(point)
            if old is not None:
                self._dead.add(old)
            row = len(self._row_point)
            self._row_point.append(point)
            self._row_of[point] = row
            vector = vectors[point]
            for term, weight in zip(vector.indices, vector.values, strict=True):
                posting = self._postings.get(term)
                if posting is None:
                    self._postings[term] = ([row], [float(weight)])
                else:
                    posting[0].append(row)
                    posting[1].append(float(weight))
                self._arrays.pop(term, None)
        self._seen = total
        if len(self._dead) > COMPACT_SHARE * len(self._row_point):
            self._reset()
            self._sync()

    def _posting(self, term: int) -> tuple[IntArray, FloatArray] | None:
        found = self._arrays.get(term)
        if found is None:
            posting = self._postings.get(term)
            if posting is None:
                return None
            found = (np.asarray(posting[0], np.int64), np.asarray(posting[1], np.float32))
            self._arrays[term] = found
        return found

    def _row_arrays(self) -> tuple[IntArray, npt.NDArray[np.bool_]]:
        """Each row's point, and whether the row is current (not overwritten), as arrays; built
        once per change of the index, not per query."""
        if self._rows_alive is None:
            alive = np.ones(len(self._row_point), dtype=bool)
            if self._dead:
                alive[np.fromiter(self._dead, dtype=np.int64)] = False
            self._rows_alive = (np.asarray(self._row_point, dtype=np.int64), alive)
        return self._rows_alive

    # --- search ------------------------------------------------------------------------------
    def _live(self, vector: str, count: int) -> npt.NDArray[np.bool_]:
        deleted: npt.NDArray[np.bool_] = self._local.deleted[:count].astype(bool)
        gone: npt.NDArray[np.bool_] = self._local.deleted_per_vector[vector][:count].astype(bool)
        return ~(deleted | gone)

    def dense(self, query: Sequence[float], limit: int) -> tuple[list[str], list[float]]:
        """The ``limit`` best points by cosine similarity: ids and scores."""
        with self._lock:
            count = len(self._local.ids_inv)
            q = np.asarray(query, dtype=np.float32)
            norm = float(np.linalg.norm(q))
            if norm > 1e-9:
                q = q / norm
            scores = self._local.vectors[self._dense][:count] @ q
            scores[~self._live(self._dense, count)] = -np.inf
            picked = _top(scores, limit)
            ids = self._local.ids_inv
            return [str(ids[i]) for i in picked], [float(scores[i]) for i in picked]

    def sparse(
        self, indices: Sequence[int], values: Sequence[float], limit: int
    ) -> tuple[list[str], list[float], Any]:
        """The ``limit`` best points by BM25 (Qdrant's IDF modifier): ids, scores, point indexes.

        Points sharing no term with the query are not returned.
        """
        assert self._sparse is not None, "no keyword side"
        with self._lock:
            self._sync()
            count = len(self._local.ids_inv)
            live_points = self._live(self._sparse, count)
            documents = int(np.count_nonzero(live_points))
            frequencies = self._local.sparse_vectors_idf.get(self._sparse, {})
            rows = len(self._row_point)
            scores = np.zeros(rows, dtype=np.float64)
            matched = np.zeros(rows, dtype=bool)
            for term, value in zip(indices, values, strict=True):
                posting = self._posting(int(term))
                if posting is None:
                    continue
                df = frequencies.get(term, 0)
                idf = math.log((documents - df + 0.5) / (df + 0.5) + 1)
                at, weights = posting
                scores[at] += (float(value) * idf) * weights
                matched[at] = True
            row_point, current = self._row_arrays()
            keep = matched & current & live_points[row_point]
            scores[~keep] = -np.inf
            picked_rows = _top(scores, limit)
            points = row_point[picked_rows]
            ids = self._local.ids_inv
            return (
                [str(ids[i]) for i in points],
                [float(np.float32(scores[r])) for r in picked_rows],
                points,
            )

    def vector(self, point: int) -> FloatArray:
        """The stored (normalised) dense vector of a point (a copy), as qdrant-client returns
        it; an array, not a list: 100 lists of 384 floats per search were 5% of the server's CPU.
        """
        found: FloatArray = self._local.vectors[self._dense][point].copy()
        return found


def _top(scores: npt.NDArray[Any], limit: int) -> IntArray:
    """Indexes of the ``limit`` highest finite scores, best first."""
    finite = int(np.count_nonzero(np.isfinite(scores)))
    k = min(limit, finite)
    if k <= 0:
        return np.empty(0, dtype=np.int64)
    part = np.argpartition(-scores, k - 1)[:k] if k < len(scores) else np.arange(len(scores))
    order = part[np.argsort(-scores[part], kind="stable")]
    return order[:k].astype(np.int64)
