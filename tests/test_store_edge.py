"""The embedded engine's directory under bad conditions: another version's files, two
processes, a real full disk, ``kill -9`` while indexing. Each is one clear line, and nothing
already stored is lost.

(``kill -9`` during an ingestion: `test_faults.py::test_kill_9_during_ingest_then_ingest_again`;
a disk filling up during ``citeflow ingest``: `test_faults.py`, through the free-space check.)
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from citeflow.errors import StorageFullError, StoreLockedError, StoreUnreadableError
from citeflow.store import Store
from citeflow.store.directory import MARKER, RESERVE_BYTES
from citeflow.store.edge import EdgeEngine
from tests.store_helpers import DIM, fill, points


def filled(path: Path, **sizes: int) -> None:
    """A store at ``path`` holding ``sizes[name]`` `points` in each collection ``name``, closed."""
    with closing(Store.open_path(path)) as store:
        for collection, n in sizes.items():
            fill(store, collection, n)


def snapshot(directory: Path) -> dict[str, int]:
    return {str(p.relative_to(directory)): p.stat().st_size for p in directory.rglob("*")}


def test_a_store_of_a_newer_format_is_one_line_and_left_alone(tmp_path: Path) -> None:
    filled(tmp_path / "s", kb=10)
    marker = tmp_path / "s" / MARKER
    marker.write_text(json.dumps({"format": 99, "engine": "qdrant-edge"}))
    before = snapshot(tmp_path / "s")
    with pytest.raises(StoreUnreadableError, match=r"newer citeflow .*format 99.*upgrade"):
        Store.open_path(tmp_path / "s")
    assert snapshot(tmp_path / "s") == before


def test_a_damaged_marker_is_one_line_and_left_alone(tmp_path: Path) -> None:
    Store.open_path(tmp_path / "s").close()
    (tmp_path / "s" / MARKER).write_text("{not json")
    with pytest.raises(StoreUnreadableError, match=r"damaged citeflow-store\.json"):
        Store.open_path(tmp_path / "s")
    assert (tmp_path / "s" / MARKER).read_text() == "{not json"


def test_a_shard_that_cannot_be_read_is_one_line_and_the_others_still_answer(
    tmp_path: Path,
) -> None:
    filled(tmp_path / "s", good=20, bad=20)
    (tmp_path / "s" / "shards" / "bad" / "edge_config.json").write_text("{not json")
    with closing(Store.open_path(tmp_path / "s")) as store:
        with pytest.raises(StoreUnreadableError, match=r"'bad' .* cannot be opened"):
            store.count("bad")
        assert store.count("good") == 20


def _hold_store(path: str, ready: multiprocessing.synchronize.Event) -> None:
    store = Store.open_path(path)
    ready.set()
    time.sleep(60)
    store.close()


def test_a_second_process_gets_one_line(tmp_path: Path) -> None:
    path = tmp_path / "data" / "qdrant"
    Store.open_path(path).close()
    context = multiprocessing.get_context("spawn")
    ready = context.Event()
    holder = context.Process(target=_hold_store, args=(str(path), ready), daemon=True)
    holder.start()
    try:
        assert ready.wait(60)
        with pytest.raises(StoreLockedError, match="in use by another process"):
            Store.open_path(path)
        env = {**os.environ, "CITEFLOW_DATA_DIR": str(tmp_path / "data")}
        done = subprocess.run(
            [sys.executable, "-m", "citeflow.cli", "documents"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 1 and "Traceback" not in done.stderr
        assert (
            done.stderr.strip().splitlines()[-1].startswith("citeflow: error: the embedded store")
        )
    finally:
        holder.kill()
        holder.join(10)
    Store.open_path(path).close()  # the lock went with the process


def _index_until_killed(path: str, started: multiprocessing.synchronize.Event) -> None:
    store = Store.open_path(path)
    started.set()
    store.optimize("kb")
    os._exit(3)  # not reached: killed while indexing


def test_an_index_build_needs_room_for_one_more_copy_of_the_shard(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The build writes a new segment beside the old ones: it asks for the shard's size in free
    space, no more (a 1,000,000-chunk store must not need sixteen times its size), and is
    refused with one line, the store intact, when that is not there."""
    from citeflow.store import directory

    store = Store.open_path(tmp_path / "s")
    fill(store, "kb", 8_000)  # past the size a segment is scanned at instead of indexed
    shard = tmp_path / "s" / "shards" / "kb"
    size = sum(f.stat().st_size for f in shard.rglob("*") if f.is_file())
    free = {"bytes": RESERVE_BYTES + size // 2}
    monkeypatch.setattr(directory, "free_bytes", lambda root: free["bytes"])
    with pytest.raises(StorageFullError, match="not enough free space"):
        store.optimize("kb")
    assert store.count("kb") == 8_000 and store.unindexed("kb") > 0
    free["bytes"] = RESERVE_BYTES + 2 * size
    assert store.optimize("kb")
    assert store.unindexed("kb") == 0 and store.count("kb") == 8_000
    store.close()


def test_kill_9_while_indexing_loses_nothing(tmp_path: Path) -> None:
    filled(tmp_path / "s", kb=8_000)
    context = multiprocessing.get_context("spawn")
    started = context.Event()
    child = context.Process(
        target=_index_until_killed, args=(str(tmp_path / "s"), started), daemon=True
    )
    child.start()
    assert started.wait(60)
    time.sleep(0.3)  # well inside the build (1.3 s for 8,000 points on a fast 2-core machine)
    os.kill(child.pid, signal.SIGKILL)
    child.join(10)
    assert child.exitcode == -signal.SIGKILL
    with closing(Store.open_path(tmp_path / "s")) as store:
        assert store.count("kb") == 8_000
        wanted = points(1, start=4_321)[0]
        hits = store.search("kb", dense=wanted.dense, sparse=None, limit=1)
        assert [c.id for c in hits.dense] == [wanted.id]
        assert store.nodes("kb", [wanted.id])[wanted.id].get_content().startswith("chunk 4321")


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real filesystem with little room: a tmpfs of the reserve plus 96 MiB (Linux, root)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    size = RESERVE_BYTES + 96 * 2**20
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)],
        capture_output=True,
        check=False,
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {made.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _fill_until_full(path: str) -> None:
    """Child: write until the store refuses; exit 0 on the clear error (a crash is a signal)."""
    store = Store.open_path(path)
    written = 0
    try:
        store.ensure_collection("kb", DIM)
        while True:
            store.write("kb", points(256, start=written))
            written += 256
    except StorageFullError as exc:
        Path(path, "written").write_text(f"{written}\n{exc}")
        store.close()
        os._exit(0)
    os._exit(4)


def test_a_real_full_disk_is_refused_before_the_engine_crashes(small_disk: Path) -> None:
    """On a full disk qdrant-edge's memory-mapped writes would kill the process (SIGBUS); the
    free-space check refuses the write first, and everything acknowledged stays."""
    path = small_disk / "s"
    child = multiprocessing.get_context("spawn").Process(target=_fill_until_full, args=(str(path),))
    child.start()
    child.join(300)
    assert child.exitcode == 0, f"the writer died (exit {child.exitcode})"
    written_text, message = (path / "written").read_text().split("\n", 1)
    written = int(written_text)
    assert written > 0
    assert "not enough free space on the disk holding the store" in message
    assert "nothing already stored was lost" in message
    with closing(Store.open_path(path)) as store:
        assert store.count("kb") == written
        with pytest.raises(StorageFullError):
            store.write("kb", points(256, start=written))
        assert store.count("kb") == written


def test_the_server_says_at_start_up_what_is_not_indexed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from citeflow.api import engine

    with closing(Store.open_path(tmp_path / "s")) as store:
        fill(store, "kb", 300)
        assert store.unindexed("kb") >= 300  # written, not indexed: searched by a scan
        monkeypatch.setattr(engine, "UNINDEXED_WARNING", 200)
        with caplog.at_level("WARNING", logger="citeflow.server"):
            engine._warn_unindexed(store)
        [record] = caplog.records
        assert "'kb' are not indexed yet" in record.getMessage()
        assert "citeflow optimize --collection kb" in record.getMessage()


def test_citeflow_optimize_indexes_what_the_api_wrote(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from citeflow.cli import main

    store = Store.open_path(tmp_path / "data" / "qdrant")
    fill(store, "kb", 12_000)  # past the size qdrant-edge scans instead of indexing
    pending = store.unindexed("kb")
    store.close()
    assert pending >= 12_000
    built: list[str] = []
    real = EdgeEngine.optimize

    def optimize(engine: EdgeEngine, collection: str) -> bool:
        built.append(collection)
        return real(engine, collection)

    monkeypatch.setattr(EdgeEngine, "optimize", optimize)
    monkeypatch.setenv("CITEFLOW_DATA_DIR", str(tmp_path / "data"))
    assert main(["optimize", "--collection", "kb"]) == 0
    assert built == ["kb"] and "kb: indexed for search in" in capsys.readouterr().err
    with closing(Store.open_path(tmp_path / "data" / "qdrant")) as store:
        assert store.unindexed("kb") < pending and store.count("kb") == 12_000


async def test_the_server_never_builds_an_index_while_serving(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An index build holds the process (`citeflow.store.edge`): uploads and answers through
    the API write and search the embedded store without one."""
    from citeflow.settings import Settings
    from citeflow.testing.llm import ScriptedLLM
    from tests.conftest import open_kb
    from tests.server_helpers import asgi_client, chat_request, make_engine

    def refuse(engine: EdgeEngine, collection: str) -> bool:
        raise AssertionError("an index build on a request path")

    monkeypatch.setattr(EdgeEngine, "optimize", refuse)
    store_settings = {"data_dir": tmp_path / "data", "collection": "kb"}
    kb = open_kb(Settings(store=store_settings, retrieval={"grader": "none"}))
    engine = make_engine(kb, ScriptedLLM(["Ducks live near ponds [1]."]))
    async with asgi_client(engine) as client:
        files = [("file", ("ducks.txt", b"Ducks live near ponds and rivers.", "text/plain"))]
        uploaded = await client.post("/v1/collections/kb/documents", files=files)
        assert uploaded.status_code == 200, uploaded.text
        answer = await client.post("/v1/chat/completions", json=chat_request("Where?"))
        assert answer.status_code == 200 and answer.json()["sources"]
    kb.close()


@pytest.mark.parametrize("damage", ["segment state", "vector file"])
def test_a_damaged_segment_is_one_line_and_the_others_still_answer(
    tmp_path: Path, damage: str
) -> None:
    filled(tmp_path / "s", good=20, bad=500)
    [segment] = (tmp_path / "s" / "shards" / "bad" / "segments").iterdir()
    if damage == "segment state":
        (segment / "segment.json").write_text('{"version": ')
    else:
        (segment / "vector_storage-text-dense" / "vectors" / "chunk_0.mmap").write_bytes(b"")
    with closing(Store.open_path(tmp_path / "s")) as store:
        with pytest.raises(
            StoreUnreadableError, match=r"'bad' .* (cannot be opened|could not be read)"
        ):
            store.search("bad", dense=points(1)[0].dense, limit=3)
        assert store.count("good") == 20
        assert len(store.search("good", dense=points(1)[0].dense, limit=3).dense) == 3
