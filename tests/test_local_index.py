"""The embedded store's vectorised search ranks and scores exactly as qdrant-client's own."""

from __future__ import annotations

import random
import uuid
from pathlib import Path

import pytest
from llama_index.core.schema import TextNode
from qdrant_client.http import models as rest

from citeflow.bm25 import SparseVector
from citeflow.store import DENSE_VECTOR, SPARSE_VECTOR, Candidate, Hits, Store

DIM = 8
VOCAB = 40


def random_points(
    rng: random.Random, count: int, doc: str
) -> tuple[list[TextNode], list[SparseVector]]:
    nodes, sparse = [], []
    for _ in range(count):
        node = TextNode(id_=str(uuid.UUID(int=rng.getrandbits(128))), text="x")
        node.metadata["doc_id"] = doc
        node.embedding = [rng.gauss(0, 1) for _ in range(DIM)]
        terms = sorted(rng.sample(range(VOCAB), rng.randint(1, 6)))
        nodes.append(node)
        sparse.append(SparseVector(indices=terms, values=[rng.uniform(0.1, 3) for _ in terms]))
    return nodes, sparse


def qdrant_own(store: Store, dense: list[float], sparse: SparseVector, limit: int) -> Hits:
    """The same search through qdrant-client's local mode (what the fast path replaces)."""
    responses = store.client.query_batch_points(
        "c",
        requests=[
            rest.QueryRequest(query=dense, using=DENSE_VECTOR, limit=limit),
            rest.QueryRequest(
                query=rest.SparseVector(indices=sparse.indices, values=sparse.values),
                using=SPARSE_VECTOR,
                limit=limit,
            ),
        ],
    )
    dense_hits, sparse_hits = ([Candidate(str(p.id), p.score) for p in r.points] for r in responses)
    return Hits(dense=dense_hits, sparse=sparse_hits)


def assert_same(store: Store, rng: random.Random, queries: int = 15) -> None:
    for _ in range(queries):
        dense = [rng.gauss(0, 1) for _ in range(DIM)]
        terms = sorted(rng.sample(range(VOCAB + 5), 3))  # a few terms no point has
        sparse = SparseVector(indices=terms, values=[1.0] * len(terms))
        limit = rng.choice([3, 10, 1000])
        ours = store.search("c", dense=dense, sparse=sparse, limit=limit)
        theirs = qdrant_own(store, dense, sparse, limit)
        for side in ("dense", "sparse"):
            mine, own = getattr(ours, side), getattr(theirs, side)
            assert [c.id for c in mine] == [c.id for c in own], side
            assert [c.score for c in mine] == pytest.approx(
                [c.score for c in own], rel=1e-5, abs=1e-6
            )


@pytest.mark.parametrize("where", ["memory", "disk"])
def test_fast_search_matches_qdrant_through_writes(where: str, tmp_path: Path) -> None:
    store = Store.open_path(":memory:" if where == "memory" else tmp_path / "q")
    rng = random.Random(7)
    nodes, sparse = random_points(rng, 120, "a")
    store.add("c", nodes, sparse)
    assert store._local_index("c") is not None, "the fast path is in use"
    assert_same(store, rng)

    more, more_sparse = random_points(rng, 40, "b")  # appended after the index was built
    store.add("c", more, more_sparse)
    assert_same(store, rng)

    for node in nodes[:30]:  # overwritten in place: new vectors under the same ids
        node.embedding = [rng.gauss(0, 1) for _ in range(DIM)]
    _, rewritten = random_points(rng, 30, "a")
    store.add("c", nodes[:30], rewritten)
    assert_same(store, rng)

    store.delete_document("c", "b")  # deleted points leave both sides and the IDF
    assert_same(store, rng)
    store.add("c", more[:5], more_sparse[:5])  # deleted ids written again
    assert_same(store, rng)
    store.close()


def test_index_compacts_after_many_overwrites() -> None:
    store = Store.open_path(":memory:")
    rng = random.Random(3)
    nodes, sparse = random_points(rng, 20, "a")
    store.add("c", nodes, sparse)
    assert_same(store, rng, queries=3)
    for _ in range(4):
        _, sparse = random_points(rng, 20, "a")
        store.add("c", nodes, sparse)
        assert_same(store, rng, queries=3)
    index = store._local_index("c")
    assert index is not None
    assert index.rows <= 2 * len(nodes), "dead rows are dropped once they are half the index"


def test_a_dropped_and_recreated_collection_gets_a_fresh_index() -> None:
    store = Store.open_path(":memory:")
    rng = random.Random(5)
    store.add("c", *random_points(rng, 10, "a"))
    assert_same(store, rng, queries=2)
    store.drop("c")
    nodes, sparse = random_points(rng, 10, "b")
    store.add("c", nodes, sparse)
    assert_same(store, rng, queries=5)
    ids = {c.id for c in store.search("c", dense=[1.0] * DIM, limit=100).dense}
    assert ids == {n.node_id for n in nodes}


def test_keyword_candidates_carry_their_stored_dense_vectors() -> None:
    store = Store.open_path(":memory:")
    rng = random.Random(11)
    nodes, sparse = random_points(rng, 30, "a")
    store.add("c", nodes, sparse)
    query = SparseVector(indices=sparse[0].indices, values=[1.0] * len(sparse[0].indices))
    hits = store.search("c", sparse=query, limit=5, sparse_vectors=True)
    own = store.client.retrieve("c", ids=[c.id for c in hits.sparse], with_vectors=True)
    for point in own:
        assert isinstance(point.vector, dict)
        assert list(hits.vectors[str(point.id)]) == pytest.approx(point.vector[DENSE_VECTOR])
