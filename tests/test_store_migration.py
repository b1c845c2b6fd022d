"""A store written by an earlier citeflow (qdrant-client's local mode) moves into the embedded
engine on first open, or by ``citeflow migrate``: the same documents, ids, payloads and vectors
(nothing re-embedded), the same answers to searches; interrupted by ``kill -9`` or a full disk,
nothing is lost and the next open finishes it.

The earlier store is written here as the earlier citeflow wrote it: the same `Store` code over
qdrant-client with a directory (`ClientEngine`), which is what citeflow 3b14540's embedded store
was, plus one collection of the layout before BM25 existed (one unnamed dense vector).
"""

from __future__ import annotations

import multiprocessing
import os
import select
import signal
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from llama_index.core.schema import Document, TextNode
from llama_index.vector_stores.qdrant import QdrantVectorStore
from qdrant_client import QdrantClient

from citeflow.bm25 import BM25Encoder
from citeflow.cli import main
from citeflow.errors import StorageFullError, StoreLockedError, StoreUnreadableError
from citeflow.ingestion.pipeline import Ingestor
from citeflow.store import Store
from citeflow.store.client import ClientEngine
from citeflow.store.directory import LEGACY_KEPT, has_legacy_store
from tests.conftest import FACTS, stored_points
from tests.fakes.embedding import HashEmbedding, RecordingEmbedding
from tests.fakes.full_disk import FillingDisk

OPTIONS: dict[str, Any] = {"chunk_size": 64, "chunk_overlap": 8, "progress": False}
GEESE = (
    "Geese migrate south in V-shaped flocks every autumn. They return north in spring to nest. "
    * 12
)


@dataclass
class Legacy:
    """What the earlier store held, read through qdrant-client before the migration."""

    path: Path
    points: dict[str, dict[str, Any]]  # collection -> id -> (payload, dense, sparse)
    documents: dict[str, Any]
    searches: dict[str, list[tuple[float, str]]]


def _legacy_store(path: Path, *, bulk: int = 0) -> Legacy:
    """An earlier citeflow's embedded store at ``path``: knowledge base ``kb`` (three documents,
    one of them cut short), ``big`` (``bulk`` one-chunk documents) and ``old`` (before BM25)."""
    path.mkdir(parents=True)
    client = QdrantClient(path=str(path))
    store = Store(ClientEngine(client, location=str(path)))
    embed = HashEmbedding(dim=32)
    ingestor = Ingestor(store, embed, collection="kb", **OPTIONS)
    ingestor.ingest_documents([Document(id_=k, text=v) for k, v in FACTS.items()])
    dying = RecordingEmbedding(dim=32, embed_batch_size=2, fail_on_batch=2)
    with pytest.raises(RuntimeError, match="embedder died"):
        Ingestor(store, dying, collection="kb", **OPTIONS).ingest_documents(
            [Document(id_="geese", text=GEESE)]
        )
    if bulk:
        docs = [Document(id_=f"d{i}", text=f"note {i} on ducks and owls") for i in range(bulk)]
        Ingestor(store, embed, collection="big", **OPTIONS).ingest_documents(docs)
    texts = ("error E4711 means the toner is empty", "order toner through the portal")
    old = [
        TextNode(id_=f"00000000-0000-0000-0000-00000000000{i}", text=t) for i, t in enumerate(texts)
    ]
    for node in old:
        node.embedding = embed.get_text_embedding(node.get_content())
    QdrantVectorStore(collection_name="old", client=client).add(old)

    points: dict[str, dict[str, Any]] = {}
    for name in store.collections():
        points[name] = {
            p.id: (p.payload, list(p.dense or []), p.sparse) for p in stored_points(store, name)
        }
    query = embed.get_query_embedding("Where do ducks live?")
    searches = {name: _ranking(store, name, query) for name in ("kb", "old")}
    legacy = Legacy(path, points, store.documents("kb"), searches)
    store.close()
    return legacy


def _ranking(store: Store, collection: str, query: list[float]) -> list[tuple[float, str]]:
    """A dense search's hits as (score, id), best first; ties (equal to 1e-5) by id."""
    hits = store.search(collection, dense=query, limit=5).dense
    return sorted((round(-c.score, 5), c.id) for c in hits)


def _check_migrated(store: Store, legacy: Legacy) -> None:
    assert store.embedded and sorted(store.collections()) == sorted(legacy.points)
    for name, before in legacy.points.items():
        after = {p.id: p for p in stored_points(store, name)}
        assert after.keys() == before.keys() and store.count(name) == len(before)
        for point_id, (payload, dense, sparse) in before.items():
            assert after[point_id].payload == payload
            assert list(after[point_id].dense or []) == pytest.approx(dense, abs=1e-6)
            if sparse is not None:
                moved = after[point_id].sparse
                assert moved is not None and moved.indices == sparse.indices
                assert moved.values == pytest.approx(sparse.values, rel=1e-6)
    assert store.documents("kb") == legacy.documents
    assert not store.documents("kb")["geese"].complete
    query = HashEmbedding(dim=32).get_query_embedding("Where do ducks live?")
    for name, ranking in legacy.searches.items():
        assert _ranking(store, name, query) == ranking
    # the collection written before BM25 got its keyword side from its text
    hits = store.search("old", sparse=BM25Encoder().encode_query("E4711"), limit=1)
    assert [c.id for c in hits.sparse] == ["00000000-0000-0000-0000-000000000000"]


def test_first_open_migrates_an_earlier_store_without_re_embedding(tmp_path: Path) -> None:
    legacy = _legacy_store(tmp_path / "qdrant")
    store = Store.open_path(legacy.path, progress=False)
    try:
        _check_migrated(store, legacy)
    finally:
        store.close()
    assert not has_legacy_store(legacy.path)
    kept = legacy.path / LEGACY_KEPT
    assert (kept / "meta.json").is_file() and (kept / "collection" / "kb").is_dir()
    store = Store.open_path(legacy.path, progress=False)  # once only: the next open just opens
    try:
        _check_migrated(store, legacy)
    finally:
        store.close()


def _migrate_until_killed(path: str, notify_fd: int) -> None:
    """Child: the migration, each copied batch slowed and reported on ``notify_fd``."""
    real_write = Store.write

    def write(self: Store, collection: str, points: Any) -> None:
        real_write(self, collection, points)
        os.write(notify_fd, b".")
        time.sleep(0.2)

    Store.write = write  # type: ignore[method-assign]
    Store.open_path(path, progress=False)
    os._exit(3)  # not reached: killed midway


def test_a_migration_killed_midway_is_finished_by_the_next_open(tmp_path: Path) -> None:
    legacy = _legacy_store(tmp_path / "qdrant", bulk=1_500)
    read_fd, write_fd = os.pipe()
    child = multiprocessing.get_context("fork").Process(
        target=_migrate_until_killed, args=(str(legacy.path), write_fd), daemon=True
    )
    child.start()
    os.close(write_fd)
    try:
        seen = b""
        while len(seen) < 3:  # three batches copied: one collection done, another under way
            ready, _, _ = select.select([read_fd], [], [], 60)
            chunk = os.read(read_fd, 8) if ready else b""
            assert chunk, f"the migrating child stopped early (exit code {child.exitcode})"
            seen += chunk
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.join(10)
        os.close(read_fd)
    assert has_legacy_store(legacy.path)  # the old files stay until every collection is copied
    store = Store.open_path(legacy.path, progress=False)
    try:
        _check_migrated(store, legacy)
    finally:
        store.close()


def test_a_migration_stopped_by_a_full_disk_is_one_line_and_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    legacy = _legacy_store(tmp_path / "qdrant", bulk=600)
    disk = FillingDisk(monkeypatch, room=300)
    with pytest.raises(StorageFullError, match="nothing already stored was lost"):
        Store.open_path(legacy.path, progress=False)
    assert has_legacy_store(legacy.path)
    disk.free()
    store = Store.open_path(legacy.path, progress=False)
    try:
        _check_migrated(store, legacy)
    finally:
        store.close()


def test_citeflow_migrate_shows_progress_and_says_what_it_moved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    legacy = _legacy_store(tmp_path / "data" / "qdrant")
    monkeypatch.setenv("CITEFLOW_DATA_DIR", str(tmp_path / "data"))
    assert main(["migrate"]) == 0
    out, err = capsys.readouterr()
    assert "migrating kb" in err and "chunk/s" in err  # a progress bar per collection
    counts = {name: len(points) for name, points in legacy.points.items()}
    assert sorted(out.splitlines()) == sorted(
        f"{name}: {count} chunks, embedded engine" for name, count in counts.items()
    )
    assert main(["migrate", "-q"]) == 0  # already done: nothing to move, no bar
    out, err = capsys.readouterr()
    assert "migrating" not in err and len(out.splitlines()) == len(counts)


def test_a_damaged_earlier_store_is_one_line_and_left_alone(tmp_path: Path) -> None:
    legacy = _legacy_store(tmp_path / "qdrant")
    database = legacy.path / "collection" / "kb" / "storage.sqlite"
    damaged = b"this is not an SQLite file" * 100
    database.write_bytes(damaged)
    with pytest.raises(StoreUnreadableError, match="cannot be read for its migration"):
        Store.open_path(legacy.path, progress=False)
    assert database.read_bytes() == damaged and has_legacy_store(legacy.path)


def _hold_legacy(path: str, ready: Any) -> None:
    client = QdrantClient(path=path)
    ready.set()
    time.sleep(60)
    client.close()


def test_an_earlier_store_in_use_is_one_line(tmp_path: Path) -> None:
    legacy = _legacy_store(tmp_path / "qdrant")
    context = multiprocessing.get_context("spawn")
    ready = context.Event()
    holder = context.Process(target=_hold_legacy, args=(str(legacy.path), ready), daemon=True)
    holder.start()
    try:
        assert ready.wait(60)
        with pytest.raises(StoreLockedError, match="in use by another process"):
            Store.open_path(legacy.path, progress=False)
    finally:
        holder.kill()
        holder.join(10)
    assert has_legacy_store(legacy.path)
    assert sqlite3.connect(legacy.path / "collection" / "kb" / "storage.sqlite").execute(
        "select count(*) from points"
    ).fetchone()[0] == len(legacy.points["kb"])
