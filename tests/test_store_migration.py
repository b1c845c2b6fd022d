"""A store written by an earlier citeflow (qdrant-client's local mode) moves into the embedded
engine on first open, or by ``citeflow migrate``: the same collections, ids, payloads and dense
vectors (nothing re-embedded), BM25 vectors copied (computed from the text where there were
none), the same listings and the same answers to searches; interrupted by ``kill -9`` or a full
disk, nothing is lost and the next open finishes it; a busy or damaged earlier store is one line
and left as it was.

The earlier store is written here as citeflow 3b14540 wrote it, by `OldStore` (its
``src/citeflow/store.py`` reduced to the calls its ingestion made; ~200 lines that serve only these
tests, which is why this module is over 400 lines) straight through qdrant-client: LlamaIndex's
hybrid layout, payloads from ``node_to_metadata_dict``, the ``incomplete`` mark, SQLite files in
write-ahead-log mode. The process writing it ends without closing anything, as ``kill -9`` would
leave it, so part of what it wrote is still in SQLite's log. A collection of the layout before BM25
existed (one unnamed dense vector) is written by LlamaIndex's ``QdrantVectorStore``, as citeflow
wrote those.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import pickle
import shutil
import sqlite3
import time
import uuid
from collections.abc import Iterable
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.schema import (
    BaseNode,
    Document,
    MetadataMode,
    NodeRelationship,
    RelatedNodeInfo,
    TextNode,
)
from llama_index.core.utils import get_tokenizer
from llama_index.core.vector_stores.utils import metadata_dict_to_node, node_to_metadata_dict
from llama_index.vector_stores.qdrant import QdrantVectorStore
from qdrant_client import QdrantClient
from qdrant_client.http import models as rest

from citeflow.bm25 import BM25Encoder, SparseVector
from citeflow.cli import main
from citeflow.errors import StoreLockedError, StoreUnreadableError
from citeflow.store import DocumentRecord, Store
from citeflow.store.client import ClientEngine
from citeflow.store.directory import LEGACY_KEPT, MARKER, SHARDS, has_legacy_store
from citeflow.store.edge import EdgeEngine
from citeflow.testing.embedding import HashEmbedding
from tests.conftest import stored_points
from tests.fakes.full_disk import FillingDisk
from tests.fakes.killed import kill_9_after

DENSE, SPARSE, INCOMPLETE = "text-dense", "text-sparse-new", "incomplete"
#: 3b14540's namespace for chunk ids (``ingestion/pipeline.py``)
NAMESPACE = uuid.UUID("6f1f3c1e-8a4b-4c0e-9a51-2f2f5e0c1d7a")
DIM = 32
EMBED = HashEmbedding(dim=DIM)
ENCODER = BM25Encoder()

#: knowledge base ``kb``: documents of two or three chunks each at a chunk size of 64 tokens
DOCS = {
    "ducks": (
        "Ducks are waterfowl birds. They live near ponds, rivers and lakes, where they dabble "
        "for plants and small insects. A duck's feathers shed water thanks to an oil gland near "
        "its tail. Most ducks nest on the ground, hidden in tall grass close to the water. "
        "Ducklings can swim within hours of hatching and follow their mother in a line."
    ),
    "viaweb": (
        "Viaweb was a company that made software for building online stores. It was started in "
        "1995 by the author and Robert Morris. Its editor ran on the server, so merchants built "
        "their shops in a browser. Yahoo bought Viaweb in 1998 and it became Yahoo Store, which "
        "ran for many years after the purchase."
    ),
    "toner": (
        "Printer error E4711 means the toner cartridge is empty. Open the front cover, pull the "
        "cartridge out and shake it gently to spread the remaining toner. Order new cartridges "
        "through the supplies portal; they arrive within two working days. Recycle the empty "
        "cartridge in the box the new one came in."
    ),
}
#: the document whose write was cut short (its embedder died after two batches)
GEESE = (
    "Geese migrate south in V-shaped flocks every autumn. They return north in spring to nest. "
    * 12
)
#: knowledge base ``notes``: 3,000 documents of one chunk, copied in several batches
NOTES = {f"note-{i}": f"Note {i}: owl {i} hunts mice near barn {i % 13}." for i in range(3_000)}
#: the collection written before BM25 existed
OLD_TEXTS = ("error E4711 means the toner is empty", "order toner through the portal")


class OldStore:
    """citeflow 3b14540's embedded store, reduced to the calls its ingestion made (see the module
    doc): qdrant-client in local mode on a directory."""

    def __init__(self, path: Path) -> None:
        self.client = QdrantClient(path=str(path))

    def create(self, name: str) -> None:
        """``Store.ensure_collection`` on the embedded store (no payload indexes), then
        ``Store._tune_embedded``: SQLite in WAL mode, on qdrant-client's own connection."""
        self.client.create_collection(
            collection_name=name,
            vectors_config={DENSE: rest.VectorParams(size=DIM, distance=rest.Distance.COSINE)},
            sparse_vectors_config={
                SPARSE: rest.SparseVectorParams(
                    index=rest.SparseIndexParams(), modifier=rest.Modifier.IDF
                )
            },
        )
        connection = self.client._client.collections[name].storage.storage
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("PRAGMA synchronous=NORMAL")

    def add(self, name: str, nodes: list[TextNode], vectors: list[list[float]]) -> None:
        """``Store.add(..., incomplete=True)`` with the BM25 vectors of the embedded texts."""
        texts = [n.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes]
        points = []
        for node, dense, terms in zip(nodes, vectors, ENCODER.encode_documents(texts), strict=True):
            vector: dict[str, Any] = {DENSE: dense}
            if terms.indices:
                vector[SPARSE] = rest.SparseVector(indices=terms.indices, values=terms.values)
            payload = node_to_metadata_dict(node, remove_text=False, flat_metadata=False)
            payload[INCOMPLETE] = True
            points.append(rest.PointStruct(id=node.node_id, vector=vector, payload=payload))
        self.client.upsert(collection_name=name, points=points, wait=True)

    def ingest(
        self,
        name: str,
        documents: dict[str, str],
        *,
        vectors: Any = EMBED.get_text_embedding_batch,
        batch: int = 64,
        dies_after: int | None = None,
    ) -> None:
        """``Ingestor.ingest_documents``: chunks embedded ``batch`` at a time in order of
        length, stored marked incomplete, the mark taken off each document once it is stored
        whole; after ``dies_after`` batches, the embedder dies."""
        chunks = [c for doc_id, text in documents.items() for c in _old_chunks(doc_id, text)]
        texts = [c.get_content(metadata_mode=MetadataMode.EMBED) for c in chunks]
        order = sorted(range(len(chunks)), key=lambda i: len(texts[i]))
        stored: dict[str, list[str]] = {}
        for number, at in enumerate(range(0, len(order), batch)):
            if number == dies_after:
                return
            window = order[at : at + batch]
            nodes = [chunks[i] for i in window]
            self.add(name, nodes, vectors([texts[i] for i in window]))
            finished: list[str] = []
            for chunk in nodes:
                written = stored.setdefault(chunk.metadata["doc_id"], [])
                written.append(chunk.node_id)
                if len(written) == chunk.metadata["chunk_count"]:
                    finished += stored.pop(chunk.metadata["doc_id"])
            if finished:
                self.client.delete_payload(name, keys=[INCOMPLETE], points=finished, wait=True)

    def delete_document(self, name: str, doc_id: str) -> None:
        condition = rest.FieldCondition(key="doc_id", match=rest.MatchValue(value=doc_id))
        selector = rest.FilterSelector(filter=rest.Filter(must=[condition]))
        self.client.delete(collection_name=name, points_selector=selector)


def _old_chunks(doc_id: str, text: str) -> list[TextNode]:
    """3b14540's ``Ingestor._chunks`` (chunk size 64, overlap 8): a document that fits in one
    chunk becomes one node as it is (``Ingestor._fits``, ``_split``), a longer one is split."""
    digest = hashlib.sha256(text.encode()).hexdigest()
    document = Document(id_=doc_id, text=text, metadata={"file_name": f"{doc_id}.txt"})
    metadata = max(len(document.get_metadata_str(m).encode()) for m in MetadataMode)
    if len(get_tokenizer()(text)) + metadata <= 64 - 8:
        nodes: list[BaseNode] = [
            TextNode(
                text=text,
                metadata=dict(document.metadata),
                excluded_embed_metadata_keys=list(document.excluded_embed_metadata_keys),
                excluded_llm_metadata_keys=list(document.excluded_llm_metadata_keys),
                metadata_separator=document.metadata_separator,
                metadata_template=document.metadata_template,
                text_template=document.text_template,
                start_char_idx=0,
                end_char_idx=len(text),
            )
        ]
    else:
        splitter = SentenceSplitter(chunk_size=64, chunk_overlap=8)
        nodes = splitter.get_nodes_from_documents([document])
    chunks = []
    for index, node in enumerate(nodes):
        assert isinstance(node, TextNode)
        node.id_ = str(uuid.uuid5(NAMESPACE, f"{doc_id}:{digest}:{index}"))
        node.metadata.update(
            doc_id=doc_id, content_hash=digest, chunk_index=index, chunk_count=len(nodes)
        )
        for key in ("doc_id", "content_hash", "chunk_index", "chunk_count"):
            node.excluded_embed_metadata_keys.append(key)
            node.excluded_llm_metadata_keys.append(key)
        node.relationships = {NodeRelationship.SOURCE: RelatedNodeInfo(node_id=doc_id)}
        chunks.append(node)
    return chunks


def _note_vectors(texts: list[str]) -> list[list[float]]:
    """``notes``' embedder: vectors that no text gives back, and not of unit length."""
    seed = int.from_bytes(hashlib.blake2b(texts[0].encode(), digest_size=4).digest(), "big")
    return np.random.default_rng(seed).normal(2.0, 1.0, (len(texts), DIM)).tolist()


def _write_legacy(path: Path, notes: bool) -> None:
    """Child process: the earlier store at ``path``, left as by ``kill -9`` (see the module doc).

    ``kb``: three documents and one cut short; ``empty``: its one document deleted; ``notes``
    (with ``notes``): 3,000 chunks; ``old``: written before BM25."""
    store = OldStore(path)
    store.create("kb")
    store.ingest("kb", DOCS)
    store.ingest("kb", {"geese": GEESE}, batch=2, dies_after=2)
    store.create("empty")
    store.ingest("empty", {"ducks": DOCS["ducks"]})
    store.delete_document("empty", "ducks")
    if notes:
        store.create("notes")
        store.ingest("notes", NOTES, vectors=_note_vectors, batch=256)
    old = [TextNode(id_=str(uuid.UUID(int=i)), text=t) for i, t in enumerate(OLD_TEXTS)]
    for node in old:
        node.embedding = EMBED.get_text_embedding(node.get_content())
    QdrantVectorStore(collection_name="old", client=store.client).add(old)
    os._exit(0)  # nothing closed: SQLite's write-ahead log keeps what it holds


# --- what the earlier store held ------------------------------------------------------------
#: point id -> qdrant-client's stored point (a pickled PointStruct, as written), per collection
Rows = dict[str, dict[str, rest.PointStruct]]


def _rows(path: Path, names: Iterable[str]) -> Rows:
    """Every point of these collections of a qdrant-client local-mode store, as its SQLite
    files hold them."""
    rows: Rows = {}
    for name in names:
        uri = f"{(path / 'collection' / name / 'storage.sqlite').as_uri()}?mode=ro"
        with closing(sqlite3.connect(uri, uri=True)) as connection:
            found = connection.execute("select point from points").fetchall()
        points = [pickle.loads(blob) for (blob,) in found]
        rows[name] = {str(p.id): p for p in points}
    return rows


def _files(path: Path) -> tuple[str, Rows]:
    """What the earlier store holds: its ``meta.json`` and every point as stored."""
    meta = (path / "meta.json").read_text()
    return meta, _rows(path, json.loads(meta)["collections"])


#: (collection, query name) -> the query's dense vector or BM25 terms
QUERIES: dict[tuple[str, str], list[float] | SparseVector] = {
    ("kb", "dense"): EMBED.get_query_embedding("Where do ducks and geese live?"),
    ("kb", "keywords"): ENCODER.encode_query("geese ducks toner Viaweb water"),
    ("notes", "dense"): _note_vectors(["query"])[0],
    ("notes", "keywords"): ENCODER.encode_query("owl 417 barn 1"),
    ("old", "dense"): EMBED.get_query_embedding("toner E4711"),
}


@dataclass
class Legacy:
    """An earlier store at ``path`` and what qdrant-client read from it before any migration."""

    path: Path
    files: tuple[str, Rows]
    points: dict[str, dict[str, rest.Record]]
    documents: dict[str, dict[str, DocumentRecord]]
    searches: dict[tuple[str, str], list[tuple[float, str]]]


def _ranking(hits: list[Any]) -> list[tuple[float, str]]:
    """Hits as (-score, id), best first; ties (equal to 1e-4) by id."""
    return sorted((round(-float(h.score), 4), str(h.id)) for h in hits)


def _read_legacy(path: Path) -> Legacy:
    """What qdrant-client finds in the earlier store at ``path`` (a copy: reading it merges
    SQLite's log into its files). Searches leave out points marked incomplete, as citeflow's
    did."""
    files = _files(path)
    with closing(QdrantClient(path=str(path))) as client:
        names = sorted(c.name for c in client.get_collections().collections)
        points = {}
        for name in names:
            found, _ = client.scroll(name, limit=100_000, with_payload=True, with_vectors=True)
            points[name] = {str(p.id): p for p in found}
        reader = Store(ClientEngine(client, location=str(path)))
        documents = {name: reader.documents(name) for name in names}
        complete = rest.Filter(
            must_not=[rest.FieldCondition(key=INCOMPLETE, match=rest.MatchValue(value=True))]
        )
        searches = {}
        for (name, side), query in QUERIES.items():
            if name not in names:
                continue
            using = (DENSE if name != "old" else None) if side == "dense" else SPARSE
            if isinstance(query, SparseVector):
                query = rest.SparseVector(indices=query.indices, values=query.values)  # type: ignore[assignment]
            hits = client.query_points(
                name, query=query, using=using, query_filter=complete, limit=8
            ).points
            searches[name, side] = _ranking(hits)
    return Legacy(path, files, points, documents, searches)


@pytest.fixture(scope="session")
def legacy_stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Legacy]:
    """Two earlier stores written once: ``small`` (``kb``, ``empty``, ``old``) and ``large``
    (the same and ``notes``), each with what qdrant-client read from it; tests take copies."""
    made = {}
    _old_chunks("geese", GEESE)  # the tokenizer loaded once, before the writers are forked
    for kind, notes in (("small", False), ("large", True)):
        path = tmp_path_factory.mktemp(kind) / "qdrant"
        child = multiprocessing.get_context("fork").Process(
            target=_write_legacy, args=(path, notes)
        )
        child.start()
        child.join(120)
        assert child.exitcode == 0
        assert (path / "collection" / "kb" / "storage.sqlite-wal").stat().st_size > 0
        scratch = path.parent / "read"
        shutil.copytree(path, scratch)
        made[kind] = _read_legacy(scratch)
        made[kind].path = path
        shutil.rmtree(scratch)
    return made


def _copy(legacy: Legacy, to: Path) -> Legacy:
    shutil.copytree(legacy.path, to)
    return Legacy(to, legacy.files, legacy.points, legacy.documents, legacy.searches)


@pytest.fixture(autouse=True)
def _data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``citeflow migrate`` looks in the data directory `small` and `large` are copied into."""
    monkeypatch.setenv("CITEFLOW_DATA_DIR", str(tmp_path / "data"))


@pytest.fixture
def small(legacy_stores: dict[str, Legacy], tmp_path: Path) -> Legacy:
    return _copy(legacy_stores["small"], tmp_path / "data" / "qdrant")


@pytest.fixture
def large(legacy_stores: dict[str, Legacy], tmp_path: Path) -> Legacy:
    return _copy(legacy_stores["large"], tmp_path / "data" / "qdrant")


def test_the_earlier_store_is_as_citeflow_3b14540_left_it(small: Legacy) -> None:
    """The fixture: hybrid and pre-BM25 layouts, one document cut short, an empty collection."""
    assert sorted(small.points) == ["empty", "kb", "old"]
    meta = json.loads(small.files[0])["collections"]
    assert set(meta["kb"]["vectors"]) == {DENSE} and meta["kb"]["sparse_vectors"][SPARSE]
    assert "size" in meta["old"]["vectors"] and not meta["old"].get("sparse_vectors")
    kb = small.documents["kb"]
    assert [d for d, r in sorted(kb.items()) if r.complete] == ["ducks", "toner", "viaweb"]
    assert kb["geese"].stored == f"4 of {len(_old_chunks('geese', GEESE))}"
    assert small.points["empty"] == {}
    assert all(small.searches[key] for key in small.searches)


# --- checks ---------------------------------------------------------------------------------
def _unit(vector: Any) -> list[float]:
    return list(np.asarray(vector, dtype=float) / np.linalg.norm(vector))


def _search(store: Store, name: str, side: str) -> list[tuple[float, str]]:
    query = QUERIES[name, side]
    if isinstance(query, SparseVector):
        return _ranking(store.search(name, sparse=query, limit=8).sparse)
    return _ranking(store.search(name, dense=query, limit=8).dense)


def _check_ranking(found: list[tuple[float, str]], expected: list[tuple[float, str]]) -> None:
    """The same scores place by place, and the same ids but for ties at the last place (a
    limit cuts a group of equal scores at any of its members)."""
    assert [s for s, _ in found] == pytest.approx([s for s, _ in expected], abs=1e-4)
    last = expected[-1][0]
    assert [i for s, i in found if s < last - 1e-4] == [i for s, i in expected if s < last - 1e-4]


def _check_migrated(store: Store, legacy: Legacy) -> None:
    """Everything the earlier store held, and answered, the embedded store holds and answers."""
    written = legacy.files[1]
    assert store.embedded and store.collections() == sorted(legacy.points)
    for name, before in legacy.points.items():
        after = {p.id: p for p in stored_points(store, name)}
        assert after.keys() == before.keys() and store.count(name) == len(before)
        for point_id, point in after.items():
            row = written[name][point_id]
            assert point.payload == before[point_id].payload == row.payload
            assert isinstance(row.vector, dict)  # hybrid, or one unnamed vector: {"": [...]}
            written_dense = row.vector[DENSE if DENSE in row.vector else ""]
            assert list(point.dense or []) == pytest.approx(_unit(written_dense), abs=1e-6)
            assert point.sparse is not None and point.sparse.indices
            terms = row.vector.get(SPARSE)
            if terms is None:  # written before BM25: its keyword side computed from the text
                assert name == "old"
                text = metadata_dict_to_node(row.payload or {}).get_content(MetadataMode.EMBED)
                terms = ENCODER.encode_document(text)
            assert point.sparse.indices == terms.indices
            assert point.sparse.values == pytest.approx(terms.values, rel=1e-6)
        assert store.documents(name) == legacy.documents[name]
    assert not store.documents("kb")["geese"].complete
    for (name, side), ranking in legacy.searches.items():
        _check_ranking(_search(store, name, side), ranking)
    # the document cut short stays out of searches; the collection before BM25 has keywords now
    geese = {i for i, p in legacy.points["kb"].items() if (p.payload or {})["doc_id"] == "geese"}
    hits = store.search("kb", sparse=ENCODER.encode_query("geese migrate"), limit=50).sparse
    assert len(geese) == 4 and not geese & {h.id for h in hits}
    hits = store.search("old", sparse=ENCODER.encode_query("E4711"), limit=1).sparse
    assert [h.id for h in hits] == [str(uuid.UUID(int=0))]


def _check_kept(legacy: Legacy) -> None:
    """The earlier files were moved aside, as they were."""
    kept = legacy.path / LEGACY_KEPT
    assert not has_legacy_store(legacy.path) and has_legacy_store(kept)
    assert _files(kept) == legacy.files


def _check_untouched(legacy: Legacy) -> None:
    """The earlier store is still where it was, as it was, and not marked as migrated."""
    assert has_legacy_store(legacy.path) and not (legacy.path / MARKER).exists()
    assert _files(legacy.path) == legacy.files
    assert not (legacy.path / LEGACY_KEPT).exists()


def _check_opened(legacy: Legacy) -> None:
    """Opening the store finds everything migrated (`_check_migrated`), the earlier files kept."""
    with closing(Store.open_path(legacy.path, progress=False)) as store:
        _check_migrated(store, legacy)
    _check_kept(legacy)


# --- tests ----------------------------------------------------------------------------------
def test_first_open_migrates_without_re_embedding_and_only_once(large: Legacy) -> None:
    _check_opened(large)
    shards = sorted(p.name for p in (large.path / SHARDS).iterdir())
    assert shards == ["empty", "kb", "notes", "old"]  # no staging copy left behind
    _check_opened(large)  # the next open just opens


def _migrate_until_killed(path: str, notify_fd: int) -> None:
    """Child: the migration, each batch it copies reported on ``notify_fd``, then slowed."""
    real_upsert = EdgeEngine.upsert

    def upsert(self: EdgeEngine, collection: str, points: Any) -> None:
        real_upsert(self, collection, points)
        os.write(notify_fd, b".")
        time.sleep(0.2)

    EdgeEngine.upsert = upsert  # type: ignore[method-assign]
    Store.open_path(path, progress=False)
    os._exit(3)  # not reached: killed midway


def test_a_migration_killed_midway_is_finished_by_the_next_open(large: Legacy) -> None:
    # kb's one batch, then three of notes' twelve
    kill_9_after(4, _migrate_until_killed, str(large.path), what="migrating", within=60)
    # killed while copying notes: the collections before it done, notes' half copy aside
    shards = sorted(p.name for p in (large.path / SHARDS).iterdir())
    assert shards == [".notes.migrating", "empty", "kb"]
    _check_untouched(large)  # the earlier files stay until every collection is copied

    _check_opened(large)  # nothing lost, nothing twice
    assert sorted(p.name for p in (large.path / SHARDS).iterdir()) == sorted(large.points)


def test_a_migration_stopped_by_a_full_disk_is_one_line_and_resumes(
    large: Legacy, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    disk = FillingDisk(monkeypatch, room=1_000)  # kb, then notes' fourth batch finds no room
    assert main(["migrate", "-q"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert err.startswith("citeflow: error: not enough free space on the disk holding the store")
    _check_untouched(large)
    assert not (large.path / SHARDS / "notes").exists()

    disk.free()
    _check_opened(large)


def _summary(legacy: Legacy) -> list[str]:
    """What ``citeflow migrate`` says on stdout: one line per collection."""
    return [
        f"{name}: {len(points)} chunks, embedded engine"
        for name, points in sorted(legacy.points.items())
    ]


def test_citeflow_migrate_shows_a_bar_per_collection_and_what_it_moved(
    small: Legacy, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["migrate"]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == _summary(small)
    for name, points in small.points.items():
        if points:
            assert f"migrating {name}: 100%" in err and f"{len(points)}/{len(points)}" in err
    assert f"the old files are kept in {small.path / LEGACY_KEPT}" in err
    _check_kept(small)

    assert main(["migrate"]) == 0  # done: nothing more to move
    out, err = capsys.readouterr()
    assert out.splitlines() == _summary(small) and "migrat" not in err


def test_citeflow_migrate_quiet_shows_no_bar(
    small: Legacy, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["migrate", "-q"]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == _summary(small)
    assert "migrating" not in err and "%|" not in err
    _check_kept(small)


def _hold(path: str, conn: Any) -> None:
    """Child: an earlier citeflow with the store open, until told to stop."""
    client = QdrantClient(path=path)
    conn.send("open")
    conn.recv()
    client.close()


def test_an_earlier_store_in_use_is_one_line_and_left_alone(
    small: Legacy, capsys: pytest.CaptureFixture[str]
) -> None:
    context = multiprocessing.get_context("fork")
    ours, theirs = context.Pipe()
    holder = context.Process(target=_hold, args=(str(small.path), theirs), daemon=True)
    holder.start()
    try:
        assert ours.poll(60) and ours.recv() == "open"
        assert main(["migrate"]) == 1
        out, err = capsys.readouterr()
        assert out == "" and err.count("\n") == 1
        assert err.startswith(f"citeflow: error: the embedded store {small.path} is in use")
        with pytest.raises(StoreLockedError):
            Store.open_path(small.path, progress=False)
        _check_untouched(small)
        assert not (small.path / SHARDS).exists()
    finally:
        ours.send("stop")
        holder.join(10)
    assert main(["migrate", "-q"]) == 0  # once the other process is gone
    _check_kept(small)


@pytest.mark.parametrize("damaged", ["collection/old/storage.sqlite", "meta.json"])
def test_a_damaged_earlier_store_is_one_line_and_left_alone(
    small: Legacy, damaged: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # old's file alone holds that collection (no WAL); a hybrid collection's file overwritten so
    # would be rebuilt by SQLite from its write-ahead log, which holds every page written
    garbage = b"this is not what qdrant-client wrote" * 100
    (small.path / damaged).write_bytes(garbage)
    assert main(["migrate"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert err.startswith(f"citeflow: error: the store {small.path} was written by an earlier ")
    assert "cannot be read for its migration" in err
    with pytest.raises(StoreUnreadableError):
        Store.open_path(small.path, progress=False)
    assert (small.path / damaged).read_bytes() == garbage
    assert has_legacy_store(small.path) and not (small.path / SHARDS).exists()
    assert not (small.path / MARKER).exists() and not (small.path / LEGACY_KEPT).exists()
    if damaged == "meta.json":
        assert _rows(small.path, small.points) == small.files[1]
    else:
        assert (small.path / "meta.json").read_text() == small.files[0]
        others = [name for name in small.points if name != "old"]
        assert _rows(small.path, others) == {n: small.files[1][n] for n in others}
