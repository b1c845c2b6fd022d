"""What a storage engine does for `citeflow.store.Store`, in neither engine's own data model.

Two engines sit behind `Store`:

* `citeflow.store.edge.EdgeEngine`, the embedded default: the Qdrant engine in-process
  (qdrant-edge), one shard per collection in a directory;
* `citeflow.store.client.ClientEngine`: qdrant-client, for a Qdrant server or cluster by URL
  (and its ``:memory:`` mode, which stands in for a server in tests).

Both keep the same collection layout (LlamaIndex's hybrid Qdrant layout: a dense vector
`DENSE_VECTOR`, cosine, and a BM25 sparse vector `SPARSE_VECTOR` with Qdrant's IDF modifier) and
answer the same operations with the same scores: cosine similarity on the dense side, BM25 on the
keyword side. `Where` is the one filter language: the few conditions citeflow asks for, which each
engine turns into its own filter model.

The operations `Store` needs of an engine, which both have alike (neither is thread-safe:
`Store` calls them under its own lock): ``location`` (where the data lives, for messages: a
directory, a URL or ``:memory:``), ``close``, ``collections``, ``exists``, ``create`` (the
collection with the hybrid layout), ``layout``, ``drop``, ``count``, ``upsert``, ``delete_key``
(one payload key taken off some points), ``delete`` (the points passing a `Where`), ``scroll``
(every point passing a `Where`: its payload, all of it (True), none (False) or these keys, and
its vectors when asked; a page at a time), ``retrieve`` (points by id, missing ones left out),
``search`` (a `SearchRequest`), ``optimize`` (build the collection's indexes now, if the engine
defers it; whether it did work) and ``unindexed`` (how many points an optimize would still
index; 0: none).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import numpy as np
import numpy.typing as npt

from citeflow.bm25 import SparseVector

#: vector names of LlamaIndex's hybrid Qdrant layout (QdrantVectorStore's defaults)
DENSE_VECTOR = "text-dense"
SPARSE_VECTOR = "text-sparse-new"

#: payload key of a chunk whose document is being written: set on every chunk as it is stored,
#: removed from all of them once the document's last chunk is stored (`Store.mark_complete`).
#: Searches leave such chunks out, so a write cut short (a crash, ``kill -9``, a full disk)
#: never reaches an answer, and listings show the document as incomplete.
INCOMPLETE = "incomplete"

#: a dense vector: a list from qdrant-client, a list or numpy array from qdrant-edge
Vector = Sequence[float] | npt.NDArray[np.float32]


@dataclass(frozen=True, slots=True)
class Layout:
    """How a collection stores its vectors."""

    dense: str
    """name of the dense vector ("" for a collection with one unnamed vector)"""
    sparse: str | None
    """name of the BM25 sparse vector, or None when the collection has no keyword side"""


@dataclass(frozen=True, slots=True)
class Candidate:
    """One search hit before its payload is loaded: a point id and its score."""

    id: str
    score: float


@dataclass(frozen=True, slots=True)
class Hits:
    """One search's candidates per side, best first (either side may be empty).

    Candidates come without payloads: ranking needs ids and scores only, and turning a payload
    into a LlamaIndex node costs more than the search itself on a small collection. Load the
    chosen ones with `Store.nodes`.
    """

    dense: list[Candidate]
    sparse: list[Candidate]
    vectors: dict[str, Vector] = field(default_factory=dict)
    """dense vectors of keyword candidates, by point id (when asked for)"""


@dataclass(frozen=True, slots=True)
class Point:
    """One chunk to write: its id, vectors and payload."""

    id: str
    dense: Vector
    sparse: SparseVector | None
    payload: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Record:
    """One stored point read back: its id, payload (as asked for) and dense vector (if asked)."""

    id: str
    payload: dict[str, Any]
    dense: Vector | None = None
    sparse: SparseVector | None = None


@dataclass(frozen=True, slots=True)
class Where:
    """A filter on payloads, from the conditions citeflow needs (all given ones must hold)."""

    doc_ids: tuple[str, ...] | None = None
    """the chunk's ``doc_id`` is one of these"""
    not_content_hash: str | None = None
    """the chunk's ``content_hash`` is not this one (another version of its document)"""
    incomplete: bool | None = None
    """True: only chunks marked `INCOMPLETE`; False: only the others; None: both"""


def dense_of(vector: Any, name: str = DENSE_VECTOR) -> Vector | None:
    """The dense vector among the vectors an engine returned for a point: a dict by vector name
    (``name``), or the one unnamed vector itself (a list, or a numpy array from qdrant-edge)."""
    if isinstance(vector, dict):
        vector = vector.get(name)
    return vector if isinstance(vector, list | np.ndarray) else None


def record_of(point_id: Any, payload: Any, vector: Any, dense: str = DENSE_VECTOR) -> Record:
    """A point as either engine returned it (``vector``: None when not asked for), as a
    `Record`; ``dense`` names its dense vector."""
    found = vector.get(SPARSE_VECTOR) if isinstance(vector, dict) else None
    sparse = None
    if found is not None:
        sparse = SparseVector(indices=list(found.indices), values=list(found.values))
    return Record(
        id=str(point_id),
        payload=dict(payload or {}),
        dense=dense_of(vector, dense) if vector is not None else None,
        sparse=sparse,
    )


def payload_filter(
    where: Where | None, models: ModuleType, mark_condition: Any, holds_on_incomplete: bool
) -> Any:
    """``where`` in an engine's filter model, or None when it sets no condition.

    ``models``: the engine's filter classes (``qdrant_client.http.models`` or ``qdrant_edge``,
    which name and build ``Filter``, ``FieldCondition``, ``MatchValue`` and ``MatchAny`` alike);
    ``mark_condition``: its condition on the `INCOMPLETE` mark, which holds on incomplete chunks
    (``holds_on_incomplete``) or on the others.
    """
    if where is None:
        return None
    must: list[Any] = []
    must_not: list[Any] = []
    if where.doc_ids is not None:
        if len(where.doc_ids) == 1:
            match: Any = models.MatchValue(value=where.doc_ids[0])
        else:
            match = models.MatchAny(any=list(where.doc_ids))
        must.append(models.FieldCondition(key="doc_id", match=match))
    if where.not_content_hash is not None:
        must_not.append(
            models.FieldCondition(
                key="content_hash", match=models.MatchValue(value=where.not_content_hash)
            )
        )
    if where.incomplete is not None:
        (must if where.incomplete == holds_on_incomplete else must_not).append(mark_condition)
    if not must and not must_not:
        return None
    return models.Filter(must=must or None, must_not=must_not or None)


#: chunks whose document's write finished (what searches see)
COMPLETE_ONLY = Where(incomplete=False)


@dataclass(frozen=True, slots=True)
class SearchRequest:
    """Dense and/or BM25 search in one round trip (see `Store.search`)."""

    dense: Vector | None
    sparse: SparseVector | None
    limit: int
    sparse_limit: int
    sparse_vectors: bool
    where: Where | None = COMPLETE_ONLY


def hits_of(
    request: SearchRequest, sides: Sequence[Sequence[Any]], use_sparse: bool, dense: str
) -> Hits:
    """An engine's scored points for a search's queries (the dense one first, when asked;
    ``use_sparse``: the BM25 one last) as `Hits`; ``dense`` names the dense vector."""
    found = [[Candidate(str(p.id), float(p.score)) for p in side] for side in sides]
    vectors: dict[str, Vector] = {}
    if use_sparse and request.sparse_vectors:
        for point in sides[-1]:
            vector = dense_of(point.vector, dense)
            if vector is not None:
                vectors[str(point.id)] = vector
    return Hits(
        dense=found[0] if request.dense is not None else [],
        sparse=found[-1] if use_sparse else [],
        vectors=vectors,
    )
