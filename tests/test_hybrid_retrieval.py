"""Hybrid retrieval end to end: BM25 sparse vectors in Qdrant, fusion, and ingestion in step."""

from __future__ import annotations

import math
import uuid
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from llama_index.core.base.embeddings.base import similarity as cosine
from llama_index.core.schema import BaseNode, Document, MetadataMode, TextNode
from llama_index.vector_stores.qdrant import QdrantVectorStore
from qdrant_client import QdrantClient
from qdrant_client.http import models as rest

from citeflow.bm25 import BM25Encoder
from citeflow.knowledge_base import KnowledgeBase
from citeflow.query.retrieval import Retriever
from citeflow.settings import RetrievalSettings, Settings
from citeflow.store import DENSE_VECTOR, SPARSE_VECTOR, Layout, Store
from citeflow.store.client import ClientEngine
from citeflow.testing.embedding import HashEmbedding
from tests.store_helpers import make_retriever, open_store

#: a dense side that can barely tell texts apart: 2 hashed buckets
BLURRY = HashEmbedding(dim=2)

OFFICE = {
    "printer": "The office printer is on the second floor next to the kitchen.",
    "error": "Printer error E4711 means the fuser unit overheated; wait ten minutes.",
    "toner": "Order printer toner through the facilities portal, not by email.",
    "paper": "Printer paper is stored in the cabinet by the printer.",
    "badge": "Badges for visitors are printed at the front desk.",
}


def make_kb(settings: Settings, store: Store, embed: HashEmbedding = BLURRY) -> KnowledgeBase:
    kb = KnowledgeBase(settings, store=store, embed_model=embed, collection="office")
    kb.add_documents([Document(id_=k, text=v) for k, v in OFFICE.items()])
    return kb


@pytest.fixture
def kb(settings: Settings, store: Store) -> KnowledgeBase:
    """OFFICE on the blurry dense side (this module's own ``kb``)."""
    return make_kb(settings, store)


def retriever(kb: KnowledgeBase, mode: str, **options: object) -> Retriever:
    return make_retriever(kb.store, kb.embed_model, kb.collection, 3, mode, **options)


def write_single_vector_collection(store: Store, name: str, embed: HashEmbedding) -> list[TextNode]:
    """OFFICE in a collection of the old layout (one unnamed dense vector, no BM25)."""
    nodes = [
        TextNode(id_=str(uuid.UUID(int=i)), text=text, embedding=embed.get_text_embedding(text))
        for i, text in enumerate(OFFICE.values())
    ]
    QdrantVectorStore(collection_name=name, client=qdrant_client(store)).add(nodes)
    return nodes


def qdrant_client(store: Store) -> QdrantClient:
    """The qdrant-client behind a store opened on ``:memory:`` (a Qdrant server's API)."""
    assert isinstance(store.engine, ClientEngine)
    return store.engine.client


async def doc_ids(r: Retriever, query: str, top_k: int = 3) -> list[str]:
    return [h.node.ref_doc_id or "" for h in (await r.asearch(query, top_k)).hits]


async def test_new_collections_have_the_hybrid_layout(kb: KnowledgeBase, store: Store) -> None:
    assert store.layout(kb.collection) == Layout(DENSE_VECTOR, SPARSE_VECTOR)
    info = qdrant_client(store).get_collection(kb.collection)
    assert info.config.params.sparse_vectors is not None
    assert info.config.params.sparse_vectors[SPARSE_VECTOR].modifier == "idf"


async def test_keyword_search_finds_an_exact_code_the_dense_side_misses(kb: KnowledgeBase) -> None:
    query = "what does E4711 mean"
    assert (await doc_ids(retriever(kb, "keyword"), query))[0] == "error"
    assert "error" not in await doc_ids(retriever(kb, "dense"), query)
    for fusion in ("relative", "rrf"):
        assert "error" in await doc_ids(retriever(kb, "hybrid", fusion=fusion), query)


async def test_idf_ranks_the_rare_term_above_the_common_one(kb: KnowledgeBase) -> None:
    # "printer" is in four documents, "toner" in one: Qdrant's IDF makes toner decide
    assert (await doc_ids(retriever(kb, "keyword"), "printer toner"))[0] == "toner"


async def test_ingestion_keeps_the_keyword_side_in_step(kb: KnowledgeBase, store: Store) -> None:
    keyword = retriever(kb, "keyword")
    kb.add_documents([Document(id_=k, text=v) for k, v in OFFICE.items()])  # unchanged: no-op
    assert await doc_ids(keyword, "E4711", top_k=10) == ["error"]

    kb.add_documents([Document(id_="error", text="Printer error Q-88 means a paper jam.")])
    assert await doc_ids(keyword, "E4711", top_k=10) == []  # replaced: old terms gone
    assert await doc_ids(keyword, "Q-88 jam", top_k=10) == ["error"]

    store.delete_document(kb.collection, "error")
    assert await doc_ids(keyword, "jam", top_k=10) == []


async def test_hybrid_hits_are_scored_by_embedding_similarity(kb: KnowledgeBase) -> None:
    query = "what does E4711 mean"
    dense = await retriever(kb, "dense").asearch(query, 3)
    hits = await retriever(kb, "hybrid").aretrieve(query, top_k=3)
    keyword_only = [h for h in hits if h.node.node_id not in dense.relevance]
    assert [h.node.ref_doc_id for h in keyword_only] == ["error"]
    q = BLURRY.get_query_embedding(query)
    for hit in hits:  # dense hits and the keyword-only one alike: cosine similarity
        d = BLURRY.get_text_embedding(hit.node.get_content(metadata_mode=MetadataMode.EMBED))
        assert hit.score == pytest.approx(cosine(q, d), abs=1e-4)


async def test_dense_mode_ignores_keywords(settings: Settings, store: Store) -> None:
    kb = make_kb(settings, store, HashEmbedding(dim=256))
    ranking = await retriever(kb, "dense").asearch("toner order portal", 2)
    assert ranking.hits[0].node.ref_doc_id == "toner"
    assert ranking.relevance[ranking.hits[0].node.node_id] == ranking.hits[0].score


async def test_a_collection_without_keyword_side_is_searched_dense_only(
    settings: Settings, store: Store
) -> None:
    embed = HashEmbedding(dim=64)
    write_single_vector_collection(store, "old", embed)
    r = make_retriever(store, embed, "old", 2, "hybrid")
    assert store.layout("old").sparse is None
    hits = await r.aretrieve("order toner through the portal")
    assert "toner" in hits[0].node.get_content()


async def test_notebooks_can_open_the_collection_with_llamaindex(
    settings: Settings, store: Store
) -> None:
    kb = make_kb(settings, store, HashEmbedding(dim=64))
    nodes = kb.as_index().as_retriever(similarity_top_k=1).retrieve("toner facilities portal")
    assert nodes[0].node.ref_doc_id == "toner"


def test_the_embedded_store_keeps_one_shard_per_collection(
    settings: Settings, tmp_path: Path
) -> None:
    with closing(Store.open_path(tmp_path / "qdrant")) as store:
        make_kb(settings, store)
        assert store.embedded and store.collections() == ["office"]
        assert (tmp_path / "qdrant" / "shards" / "office" / "edge_config.json").is_file()
        assert store.layout("office") == Layout(DENSE_VECTOR, SPARSE_VECTOR)
    with closing(Store.open_path(tmp_path / "qdrant")) as reopened:  # the data is still there
        assert reopened.count("office") == len(OFFICE)


async def test_reindex_adds_the_keyword_side_without_re_embedding(
    settings: Settings, store: Store
) -> None:
    embed = HashEmbedding(dim=64)
    nodes = write_single_vector_collection(store, "old", embed)
    before = qdrant_client(store).retrieve("old", [nodes[1].node_id], with_vectors=True)[0].vector

    assert store.add_keyword_index("old", BM25Encoder()) == len(OFFICE)
    assert store.layout("old").sparse == SPARSE_VECTOR
    assert not store.exists("old.reindex")
    after = qdrant_client(store).retrieve("old", [nodes[1].node_id], with_vectors=True)[0].vector
    assert isinstance(before, list) and isinstance(after, dict)
    assert after[DENSE_VECTOR] == pytest.approx(before)  # the same embedding, not a new one
    r = make_retriever(store, BLURRY, "old", 1, "keyword")
    assert "E4711" in (await r.aretrieve("E4711"))[0].node.get_content()
    assert store.add_keyword_index("old", BM25Encoder()) == len(OFFICE)  # again: nothing to do


async def test_reindex_resumes_from_the_staging_collection(kb: KnowledgeBase, store: Store) -> None:
    # as if interrupted after the original was dropped: only the staging copy remains
    client = qdrant_client(store)
    client.create_collection(
        "office.reindex", vectors_config=client.get_collection("office").config.params.vectors
    )
    points, _ = client.scroll("office", limit=100, with_payload=True, with_vectors=[DENSE_VECTOR])
    client.upsert(
        "office.reindex",
        points=[rest.PointStruct(id=p.id, vector=p.vector, payload=p.payload) for p in points],
    )
    store.drop("office")
    assert store.add_keyword_index("office", BM25Encoder()) == len(OFFICE)
    assert await doc_ids(retriever(kb, "keyword"), "E4711") == ["error"]
    assert not store.exists("office.reindex")


def test_search_returns_candidates_and_nodes_loads_only_the_chosen(store: Store) -> None:
    encoder = BM25Encoder()
    nodes = [TextNode(id_=str(uuid.uuid4()), text=t) for t in ("ducks swim", "geese fly", "owls")]
    for i, node in enumerate(nodes):
        node.embedding = [1.0, float(i), 0.5]
    store.add("c", list(nodes), encoder.encode_documents([n.text for n in nodes]))
    hits = store.search(
        "c",
        dense=[1.0, 0.0, 0.5],
        sparse=encoder.encode_query("geese"),
        limit=3,
        sparse_vectors=True,
    )
    assert hits.dense[0].id == nodes[0].node_id
    assert [c.id for c in hits.sparse] == [nodes[1].node_id]
    assert hits.vectors[nodes[1].node_id] == pytest.approx([2 / 3, 2 / 3, 1 / 3])  # normalised
    loaded = store.nodes("c", [nodes[2].node_id, str(uuid.uuid4())])
    assert list(loaded) == [nodes[2].node_id]  # an unknown id is left out
    assert loaded[nodes[2].node_id].get_content() == "owls"


# --- pseudo-relevance feedback -----------------------------------------------------------------
class FixedEmbedding(HashEmbedding):
    """Every query (and text) embeds to the same vector."""

    vector: list[float]

    def _vector(self, text: str) -> list[float]:
        return list(self.vector)


QUERY = [1.0, 0.0, 0.0]
#: "alpha" (both sides' best), "close" (near it, far from the query), "decoy" (the query's
#: second best by embedding, away from "alpha")
FEEDBACK_POINTS = {
    "alpha": ("alpha beta", [0.8, 0.6, 0.0]),
    "close": ("gamma", [0.3, 0.954, 0.0]),
    "decoy": ("delta", [0.7, -0.714, 0.0]),
}


def feedback_points(store: Store) -> dict[str, str]:
    """The three points written into ``store``: their ids by name."""
    ids = {name: str(uuid.uuid4()) for name in FEEDBACK_POINTS}
    nodes: list[BaseNode] = [
        TextNode(id_=ids[name], text=text, embedding=vector)
        for name, (text, vector) in FEEDBACK_POINTS.items()
    ]
    texts = [text for text, _ in FEEDBACK_POINTS.values()]
    store.add("c", nodes, BM25Encoder().encode_documents(texts))
    return ids


def feedback_retriever(store: Store, mode: str = "hybrid", **options: object) -> Retriever:
    return make_retriever(
        store, FixedEmbedding(vector=QUERY), "c", 2, mode, candidates=2, **options
    )


async def test_feedback_finds_chunks_near_the_top_hits(either_store: Store) -> None:
    names = {v: k for k, v in feedback_points(either_store).items()}
    off = await feedback_retriever(either_store, feedback_chunks=0).asearch("alpha")
    assert [names[h.node.node_id] for h in off.hits] == ["alpha", "decoy"]

    # the query moved towards "alpha" (the fused top 1): "close" overtakes "decoy"
    on = feedback_retriever(either_store, feedback_chunks=1, feedback_weight=1.0)
    ranking = await on.asearch("alpha")
    assert [names[h.node.node_id] for h in ranking.hits] == ["alpha", "close"]
    # relevance stays the cosine with the query itself, not with the moved one
    for hit in ranking.hits:
        vector = FEEDBACK_POINTS[names[hit.node.node_id]][1]
        assert ranking.relevance[hit.node.node_id] == pytest.approx(cosine(QUERY, vector), abs=1e-4)
    scored = await on.aretrieve("alpha")
    assert scored[1].score == pytest.approx(cosine(QUERY, FEEDBACK_POINTS["close"][1]), abs=1e-4)


async def test_feedback_needs_both_sides_and_hybrid_mode(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    store = open_store("embedded", tmp_path)
    ids = feedback_points(store)
    searches: list[bool] = []
    search = store.search

    def counting(*args: Any, **kwargs: Any) -> Any:
        searches.append(kwargs.get("sparse") is not None)
        return search(*args, **kwargs)

    monkeypatch.setattr(store, "search", counting)
    options: dict[str, Any] = {"feedback_chunks": 1, "feedback_weight": 1.0}
    await feedback_retriever(store, **options).asearch("alpha")
    assert searches == [True, False]  # hybrid, then the dense side again
    searches.clear()
    dense = await feedback_retriever(store, "dense", **options).asearch("alpha")
    assert searches == [False]
    assert [h.node.node_id for h in dense.hits] == [ids["alpha"], ids["decoy"]]
    searches.clear()
    await feedback_retriever(store, **options).asearch("omega")  # no keyword matches
    assert searches == [True]
    searches.clear()
    await feedback_retriever(store, feedback_chunks=1, feedback_weight=0.0).asearch("alpha")
    assert searches == [True]
    store.close()


def test_store_vectors_by_id(either_store: Store) -> None:
    ids = feedback_points(either_store)
    found = either_store.vectors("c", [ids["close"], str(uuid.uuid4())])
    assert list(found) == [ids["close"]]  # an unknown id is left out
    expected = FEEDBACK_POINTS["close"][1]
    norm = math.sqrt(sum(x * x for x in expected))
    assert list(found[ids["close"]]) == pytest.approx([x / norm for x in expected], abs=1e-6)
    assert either_store.vectors("c", []) == {}


def test_feedback_is_on_by_default() -> None:
    """Three chunks at weight 0.5 (``CITEFLOW_FEEDBACK_*`` reaching these settings is
    `test_settings.test_every_old_variable_lands_in_its_group`'s)."""
    defaults = RetrievalSettings.defaults()
    assert (defaults.feedback_chunks, defaults.feedback_weight) == (3, 0.5)
