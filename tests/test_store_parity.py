"""One behaviour, two engines: the embedded engine (qdrant-edge) and qdrant-client's API (its
``:memory:`` mode, standing in for a Qdrant server or cluster; no server binary installs here).

The same ingestion, re-ingestion, replacement, deletion, interrupted writes, searches and hybrid
retrieval run on both, and must agree:

* the same documents, chunk ids, payloads and listings, exactly;
* the same ranking on each side and after fusion: the same ids in the same order, except that
  candidates whose scores differ by less than 1e-5 may swap (both engines compute in float32
  with their own summation order, so exact ties can break either way), and where such a tie
  straddles the cut-off either engine may keep either of the tied candidates;
* the same scores: dense (cosine) within 1e-4, BM25 within 1e-3 relative, stored vectors within
  1e-5. So the grader's threshold and the relevance Open WebUI shows mean the same on either.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from llama_index.core.schema import (
    BaseNode,
    Document,
    NodeRelationship,
    RelatedNodeInfo,
    TextNode,
)

from citeflow.bm25 import BM25Encoder, SparseVector
from citeflow.ingestion.pipeline import Ingestor
from citeflow.store import Candidate, Store
from citeflow.testing.embedding import HashEmbedding
from tests.conftest import stored_points
from tests.store_helpers import ENGINES, make_retriever, open_store, small_ingestor

DENSE_ABS = 1e-4
SPARSE_REL = 1e-3
TIE = 1e-5
WORDS = (
    "ducks geese swans owls herons ponds rivers lakes marsh nests eggs winter spring migrate "
    "feathers wings flocks south north reeds insects fish snails seeds grass mud banks islands"
).split()


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[dict[str, Store]]:
    """Both engines, each holding nothing yet."""
    opened = {engine: open_store(engine, tmp_path) for engine in ENGINES}
    yield opened
    for store in opened.values():
        store.close()


def corpus(n: int = 300, dim: int = 64) -> tuple[list[TextNode], list[SparseVector]]:
    """``n`` chunks: seeded vectors (clustered, so rankings have near-ties) and texts; and the
    texts' BM25 vectors."""
    rng = np.random.default_rng(7)
    centres = rng.standard_normal((12, dim))
    nodes = []
    for i in range(n):
        words = " ".join(rng.choice(WORDS, int(rng.integers(6, 30))))
        vector = centres[i % 12] + 0.3 * rng.standard_normal(dim)
        node = TextNode(
            id_=f"00000000-0000-0000-0000-{i:012d}",
            text=f"note {i}: {words}",
            metadata={"doc_id": f"doc-{i // 5}", "file_name": f"f{i // 5}.txt"},
        )
        node.embedding = [float(x) for x in vector]
        nodes.append(node)
    return nodes, BM25Encoder().encode_documents([node.text for node in nodes])


def write_corpus(stores: dict[str, Store]) -> list[TextNode]:
    nodes, sparse = corpus()
    for store in stores.values():
        store.add("c", list[BaseNode](nodes), sparse)
    return nodes


def assert_same_ranking(
    a: list[Candidate], b: list[Candidate], *, rel: float = 0.0, abs_: float = 0.0
) -> None:
    """Same ids in the same order (ties under `TIE` may swap), scores within the tolerance."""
    assert [x.score for x in a] == pytest.approx([y.score for y in b], rel=rel, abs=abs_)
    # the places where a new group of tied candidates starts (by ``a``'s scores)
    starts = [i for i, x in enumerate(a) if i == 0 or abs(x.score - a[i - 1].score) > TIE]
    spans = list(itertools.pairwise([*starts, len(a)]))
    groups_a = [{c.id for c in a[i:j]} for i, j in spans]
    groups_b = [{c.id for c in b[i:j]} for i, j in spans]
    # every group of tied candidates the same, but the last one (a tie cut by the limit)
    assert groups_a[:-1] == groups_b[:-1]
    assert len(groups_a[-1]) == len(groups_b[-1])


def test_searches_rank_and_score_alike(stores: dict[str, Store]) -> None:
    nodes = write_corpus(stores)
    encoder = BM25Encoder()
    rng = np.random.default_rng(11)
    for q in range(20):
        source = nodes[int(rng.integers(0, len(nodes)))]
        dense = [x + 0.2 * float(rng.standard_normal()) for x in source.get_embedding()]
        sparse = encoder.encode_query(" ".join(nodes[q * 7].text.split()[2:5]))
        hits = {
            engine: store.search(
                "c", dense=dense, sparse=sparse, limit=10, sparse_limit=10, sparse_vectors=True
            )
            for engine, store in stores.items()
        }
        edge, server = hits["embedded"], hits["server-api"]
        assert len(edge.dense) == 10 and edge.sparse
        assert_same_ranking(edge.dense, server.dense, abs_=DENSE_ABS)
        assert_same_ranking(edge.sparse, server.sparse, rel=SPARSE_REL)
        assert edge.vectors.keys() == {c.id for c in edge.sparse}
        assert server.vectors.keys() == {c.id for c in server.sparse}
        for key in edge.vectors.keys() & server.vectors.keys():
            assert list(edge.vectors[key]) == pytest.approx(list(server.vectors[key]), abs=1e-5)


def test_bm25_scores_count_only_the_chunks_that_exist(stores: dict[str, Store]) -> None:
    """After an index build, deleted and replaced chunks no longer count in BM25's IDF: the
    embedded engine's own statistics keep them until its segment is vacuumed."""
    nodes, sparse = corpus(1500)
    for i, node in enumerate(nodes):
        node.relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id=f"doc-{i // 5}")
    encoder = BM25Encoder()
    for store in stores.values():
        store.add("c", list[BaseNode](nodes), sparse)
        store.optimize("c")
        for doc in range(0, 300, 3):  # a third of the documents go
            store.delete_document("c", f"doc-{doc}")
        replaced = [n for n in nodes if n.ref_doc_id in {"doc-1", "doc-4", "doc-7"}]
        store.add("c", list[BaseNode](replaced), sparse[: len(replaced)])
    assert stores["embedded"].count("c") == stores["server-api"].count("c") == 1000
    for words in ("ducks geese ponds", "owls winter", "snails mud banks", "herons fish eggs"):
        query = encoder.encode_query(words)
        edge, server = (
            s.search("c", sparse=query, limit=1, sparse_limit=10) for s in stores.values()
        )
        assert len(edge.sparse) == 10
        assert_same_ranking(edge.sparse, server.sparse, rel=SPARSE_REL)


def test_live_counts_are_asked_for_only_while_deleted_chunks_linger(tmp_path: Path) -> None:
    """Counting live chunks costs a pass over the collection per query: the embedded engine asks
    for it from the first delete until an index build leaves no deleted chunk behind, across
    reopening. BM25 scores match all along those of a store that never held the deleted ones."""
    from citeflow.store.edge import STALE_IDF
    from tests.store_helpers import DIM, fill, points

    written = points(8_000)  # doc-0 .. doc-799, ten chunks each
    deleted: set[str] = set()
    flag = tmp_path / "embedded" / "shards" / "kb" / STALE_IDF
    edge = open_store("embedded", tmp_path)
    fill(edge, "kb", 8_000)
    edge.optimize("kb")
    assert not flag.exists()
    query = BM25Encoder().encode_query("chunk ducks geese 42 swans")

    def same(round_: int) -> None:
        fresh = Store.open_path(tmp_path / f"fresh-{round_}")
        fresh.ensure_collection("kb", DIM)
        fresh.write("kb", [p for p in written if p.payload["doc_id"] not in deleted])
        ours = edge.search("kb", sparse=query, limit=1, sparse_limit=10).sparse
        theirs = fresh.search("kb", sparse=query, limit=1, sparse_limit=10).sparse
        fresh.close()
        assert len(ours) == 10
        assert_same_ranking(ours, theirs, rel=SPARSE_REL)

    def delete(docs: range) -> None:
        for doc in docs:
            edge.delete_document("kb", f"doc-{doc}")
            deleted.add(f"doc-{doc}")

    same(0)
    delete(range(0, 800, 10))  # a tenth: under the engine's vacuum threshold
    assert flag.exists()
    same(1)
    edge.optimize("kb")  # too few deleted to vacuum: they linger
    edge.close()
    edge = open_store("embedded", tmp_path)
    assert flag.exists()
    same(2)
    delete(range(1, 800, 3))  # now over a third
    edge.optimize("kb")  # vacuumed: the engine's own counts hold again
    assert not flag.exists()
    same(3)
    edge.close()


async def test_hybrid_retrieval_gives_the_same_chunks_and_relevance(
    stores: dict[str, Store],
) -> None:
    """Through citeflow's retriever (fusion, feedback, relevance): same order, same scores."""
    embed = HashEmbedding(dim=64)
    rng = np.random.default_rng(5)
    docs = [
        Document(id_=f"d{i}", text=" ".join(rng.choice(WORDS, int(rng.integers(5, 40)))))
        for i in range(60)
    ]
    results = {}
    for engine, store in stores.items():
        Ingestor(store, embed, collection="c", progress=False).ingest_documents(docs)
        retriever = make_retriever(store, embed, "c", 5, "hybrid")
        results[engine] = [
            [Candidate(n.node.node_id, n.score or 0.0) for n in await retriever.aretrieve(query)]
            for query in ("ducks on ponds", "geese migrate south", "owls nests eggs", "fish")
        ]
    for edge, server in zip(results["embedded"], results["server-api"], strict=True):
        assert len(edge) == len(server) == 5
        assert_same_ranking(edge, server, abs_=DENSE_ABS)


def test_scores_mean_the_same(stores: dict[str, Store]) -> None:
    """Cosine on both: the query's own vector scores 1, an orthogonal one 0, an opposite -1."""
    vectors = {"same": [1.0, 0.0, 0.0], "orthogonal": [0.0, 1.0, 0.0], "opposite": [-1.0, 0, 0]}
    nodes = [
        TextNode(id_=f"00000000-0000-0000-0000-00000000000{i}", text=name, embedding=vector)
        for i, (name, vector) in enumerate(vectors.items())
    ]
    for store in stores.values():
        store.add("c", list[BaseNode](nodes), BM25Encoder().encode_documents(list(vectors)))
        hits = store.search("c", dense=[2.0, 0.0, 0.0], limit=3).dense
        assert [round(c.score, 5) for c in hits] == [1.0, 0.0, -1.0]


def _state(store: Store) -> tuple[object, ...]:
    points = stored_points(store, "kb")
    return (
        store.documents("kb"),
        sorted(p.id for p in points),
        sorted((p.id, sorted(p.payload.items())) for p in points),
        store.count("kb"),
    )


def test_ingest_reingest_replace_delete_alike(stores: dict[str, Store], tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "ducks.md").write_text("# Ducks\n\nDucks live near ponds and rivers. " * 20)
    (folder / "geese.txt").write_text("Geese migrate south in V-shaped flocks. " * 25)
    (folder / "owls.txt").write_text("Owls hunt at night and nest in old barns. " * 15)
    states: dict[str, list[tuple[object, ...]]] = {}
    for engine, store in stores.items():
        ingestor = small_ingestor(store, collection="kb")
        seen = []
        first = ingestor.ingest_paths([folder])
        assert first.documents_added == 3
        seen.append(_state(store))
        again = ingestor.ingest_paths([folder])
        assert again.unchanged == 3 and again.chunks == 0
        seen.append(_state(store))
        (folder / "geese.txt").write_text("Geese now winter on the lakes. " * 30)
        assert ingestor.ingest_paths([folder]).replaced == 1
        seen.append(_state(store))
        assert ingestor.delete_paths([folder / "owls.txt"]) == 1
        seen.append(_state(store))
        hashes = store.content_hashes("kb", [d.doc_id for d in store.documents("kb").values()])
        seen.append((hashes,))
        states[engine] = seen
        (folder / "geese.txt").write_text("Geese migrate south in V-shaped flocks. " * 25)
    assert states["embedded"] == states["server-api"]


def test_incomplete_chunks_are_hidden_alike_until_marked_complete(
    stores: dict[str, Store],
) -> None:
    nodes, sparse = corpus(20)
    query = nodes[3].get_embedding()
    for store in stores.values():
        store.add("c", list[BaseNode](nodes[:10]), sparse[:10])
        store.add("c", list[BaseNode](nodes[10:]), sparse[10:], incomplete=True)
        assert store.incomplete_points("c") == {n.node_id for n in nodes[10:]}
        hits = store.search("c", dense=query, sparse=sparse[12], limit=20, sparse_limit=20)
        assert {c.id for c in hits.dense + hits.sparse} <= {n.node_id for n in nodes[:10]}
        store.mark_complete("c", [n.node_id for n in nodes[10:]])
        assert not store.incomplete_points("c")
        hits = store.search("c", dense=query, limit=20)
        assert len(hits.dense) == 20
    assert stores["embedded"].documents("c") == stores["server-api"].documents("c")


def test_points_nodes_vectors_and_collections_alike(stores: dict[str, Store]) -> None:
    nodes = write_corpus(stores)
    ids = [nodes[i].node_id for i in (0, 17, 123)] + ["00000000-0000-0000-0000-999999999999"]
    edge, server = stores["embedded"], stores["server-api"]
    assert edge.count("c") == server.count("c") == len(nodes)
    assert edge.collections() == server.collections() == ["c"]
    edge_nodes, server_nodes = edge.nodes("c", ids), server.nodes("c", ids)
    assert list(edge_nodes) == list(server_nodes) == ids[:3]
    for key in ids[:3]:
        assert edge_nodes[key].get_content() == server_nodes[key].get_content()
        assert edge_nodes[key].metadata == server_nodes[key].metadata
        assert edge_nodes[key].ref_doc_id == server_nodes[key].ref_doc_id
    edge_vectors, server_vectors = edge.vectors("c", ids), server.vectors("c", ids)
    assert edge_vectors.keys() == server_vectors.keys() == set(ids[:3])
    for key, vector in edge_vectors.items():
        assert list(vector) == pytest.approx(list(server_vectors[key]), abs=1e-5)
        assert float(np.linalg.norm(vector)) == pytest.approx(1.0, abs=1e-5)  # normalised
    assert edge.drop("c") and server.drop("c")
    assert edge.collections() == server.collections() == []
    assert edge.count("c") == server.count("c") == 0
