"""Faults of the disk: what citeflow does when there is no space left.

The disk fills up in `tests.fakes.full_disk`: the store's client fails writes as SQLite does on
a full disk, and an upload's ``.part`` file (made by `citeflow.api.uploads.create_part`) fails
with ENOSPC:

* during ``citeflow ingest``: one line; what was stored stays listed and answers questions
  (`test_a_full_disk_during_ingest_is_one_line_and_loses_nothing`);
* during an upload's ingestion: HTTP 507 in general terms; the same
  (`test_a_full_disk_during_an_upload_is_507_and_loses_nothing`);
* while an upload arrives: 507, nothing of it left, an earlier upload of its name unharmed
  (`test_a_full_disk_while_an_upload_arrives_is_507_and_leaves_nothing`).
"""

from __future__ import annotations

import errno
import functools
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import httpx
import pytest
from llama_index.core.schema import Document
from qdrant_client.http.exceptions import UnexpectedResponse

from citeflow.api import uploads
from citeflow.cli import main
from citeflow.disk import is_no_space
from citeflow.ingestion.pipeline import doc_id_for
from citeflow.knowledge_base import KnowledgeBase
from citeflow.server import create_app
from citeflow.settings import Settings
from citeflow.store import Store
from tests.conftest import FACTS
from tests.fakes.embedding import HashEmbedding
from tests.fakes.full_disk import FullDiskClient, disk_full_error
from tests.fakes.llm import ScriptedLLM
from tests.fakes.openai_server import FakeOpenAIServer
from tests.server_helpers import make_engine

#: a document of many chunks (at the test settings' chunk size of 128 tokens)
GEESE = " ".join(
    f"Note {i}: the greylag geese flew over the northern lake at dawn, calling loudly."
    for i in range(240)
)
FULL_DISK = (
    "the server's disk is full: the request could not be completed, and nothing stored before "
    "was lost; retry once the server's operator has freed space"
)


def _chat(stream: bool, question: str) -> dict[str, Any]:
    return {
        "model": "citeflow-kb",
        "messages": [{"role": "user", "content": question}],
        "stream": stream,
    }


# --- the disk: the store -------------------------------------------------------------------------
@pytest.fixture
def cli_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAIServer]:
    """`citeflow` against the fake OpenAI server (LLM and embeddings), store in ``tmp_path``."""
    monkeypatch.chdir(tmp_path)
    with FakeOpenAIServer(embedding_dim=64) as server:
        for key, value in {
            "CITEFLOW_DATA_DIR": str(tmp_path / "data"),
            "CITEFLOW_LLM_PROVIDER": "openai",
            "CITEFLOW_EMBED_PROVIDER": "openai",
            "CITEFLOW_OPENAI_BASE_URL": server.openai_base_url,
            "CITEFLOW_GRADER": "none",
            "CITEFLOW_CHUNK_SIZE": "128",
            "CITEFLOW_CHUNK_OVERLAP": "16",
            "CITEFLOW_EMBED_BATCH_SIZE": "4",
        }.items():
            monkeypatch.setenv(key, value)
        yield server


def kb_chunks(text: str, chunk_size: int = 128, chunk_overlap: int = 16) -> list[Any]:
    """The chunks ingestion makes of ``text``."""
    from citeflow.ingestion.pipeline import Ingestor

    ingestor = Ingestor(
        Store.open_path(":memory:"), HashEmbedding(), collection="c", chunk_size=chunk_size,
        chunk_overlap=chunk_overlap, progress=False,
    )  # fmt: skip
    return ingestor.chunk_documents([Document(id_="d", text=text)])


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("error", ["sqlite", "oserror"])
def test_a_full_disk_during_ingest_is_one_line_and_loses_nothing(
    cli_env: FakeOpenAIServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    error: str,
) -> None:
    ducks, geese = tmp_path / "ducks.txt", tmp_path / "geese.txt"
    ducks.write_text(FACTS["ducks"])
    geese.write_text(GEESE)
    assert _run(capsys, "ingest", "-q", str(ducks))[0] == 0

    chunks = len(kb_chunks(GEESE))
    assert chunks > 20
    # the disk has room for 10 more chunks
    monkeypatch.setattr(
        "citeflow.store.QdrantClient", functools.partial(FullDiskClient, room=10, error=error)
    )
    code, out, err = _run(capsys, "ingest", "-q", str(geese))
    assert code == 1 and "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("citeflow:")]
    assert lines == [
        "citeflow: error: ingestion stopped: no space left on the disk holding the store "
        f"({tmp_path / 'data' / 'qdrant'}); nothing already stored was lost (a document cut "
        "short is marked incomplete and kept out of answers); free some space, then ingest the "
        "same files again"
    ]

    # the store works on the full disk: listing, and answers from what was stored before
    code, out, _ = _run(capsys, "documents")
    assert code == 0
    assert out.splitlines() == [
        f"    1 chunks  {ducks}",
        f"   10 chunks  {geese}  INCOMPLETE (10 of {chunks} chunks stored, kept out of answers): "
        f"run `citeflow ingest {geese}` again",
    ]
    cli_env.script("Ducks live near ponds and rivers [1].")
    code, out, _ = _run(capsys, "ask", "-q", "Where do ducks live?")
    assert code == 0 and "ducks.txt" in out.partition("Sources:")[2]

    # space freed: the same command writes the document whole, once
    monkeypatch.setattr("citeflow.store.QdrantClient", FullDiskClient)
    code, out, _ = _run(capsys, "ingest", "-q", str(geese))
    assert code == 0 and "0 added, 1 replaced" in out
    code, out, _ = _run(capsys, "documents")
    assert "INCOMPLETE" not in out and str(geese) in out
    store = Store.open_path(tmp_path / "data" / "qdrant")
    record = store.documents("default")[doc_id_for(geese)]
    assert record.complete and record.chunks == record.expected_chunks
    assert store.count("default") == 1 + record.chunks
    store.close()


@pytest.fixture
def full_disk_kb(settings: Settings) -> Iterator[tuple[KnowledgeBase, FullDiskClient]]:
    """The test knowledge base, on an in-memory store whose disk can fill up."""
    disk = FullDiskClient(location=":memory:")
    base = KnowledgeBase(
        settings, store=Store(disk, location=":memory:"), embed_model=HashEmbedding()
    )
    base.add_documents(
        [Document(id_=k, text=v, metadata={"file_name": f"{k}.txt"}) for k, v in FACTS.items()]
    )
    yield base, disk
    base.close()


async def test_a_full_disk_during_an_upload_is_507_and_loses_nothing(
    full_disk_kb: tuple[KnowledgeBase, FullDiskClient],
) -> None:
    kb, disk = full_disk_kb
    engine = make_engine(kb, ScriptedLLM(["Ducks live near ponds [1]."] * 2))
    transport = httpx.ASGITransport(app=create_app(engine))
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
        disk.free(room=5)
        files = [("file", ("geese.txt", GEESE.encode(), "text/plain"))]
        response = await client.post("/v1/collections/kb/documents", files=files)
        assert response.status_code == 507, response.text
        assert response.json() == {
            "error": {
                "message": FULL_DISK,
                "type": "server_error",
                "param": None,
                "code": "insufficient_storage",
            }
        }
        assert disk.failures == 1
        listed = (await client.get("/v1/collections/kb/documents")).json()["data"]
        states = {d["file_name"]: (d["complete"], d["chunks"]) for d in listed}
        assert states == {
            "viaweb.txt": (True, 1),
            "stories.txt": (True, 1),
            "ducks.txt": (True, 1),
            "geese.txt": (False, 5),
        }
        chat = _chat(stream=False, question="Where do ducks live?")
        answer = (await client.post("/v1/chat/completions", json=chat)).json()
        assert [s["source"]["name"] for s in answer["sources"]] == ["ducks.txt"]
        assert not any(engine.upload_dir("kb").iterdir())  # the upload was not kept

        disk.free()
        again = await client.post("/v1/collections/kb/documents", files=files)
        assert again.status_code == 200, again.text
        [geese] = again.json()["data"]
        assert geese["complete"] and geese["chunks"] == geese["expected_chunks"] > 5
        assert kb.count() == 3 + geese["chunks"]


# --- the disk: an upload -------------------------------------------------------------------------
class _FillingFile:
    """An upload's ``.part`` file on a disk with ``room`` bytes left: past it, writes (and the
    flush on closing) fail with ENOSPC."""

    def __init__(self, out: BinaryIO, room: int) -> None:
        self.out = out
        self.room = room
        self.full = False

    def write(self, data: bytes) -> int:
        if len(data) > self.room:
            self.full = True
            raise disk_full_error("oserror")
        self.room -= len(data)
        return self.out.write(data)

    def close(self) -> None:
        self.out.close()
        if self.full:
            raise disk_full_error("oserror")


async def test_a_full_disk_while_an_upload_arrives_is_507_and_leaves_nothing(
    kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = make_engine(kb, ScriptedLLM(["Barn owls eat mice [1]."]))
    owls = b"Owls hunt at night. Barn owls eat mice and voles."
    transport = httpx.ASGITransport(app=create_app(engine))
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
        first = await client.post(
            "/v1/collections/kb/documents", files=[("file", ("owls.txt", owls, "text/plain"))]
        )
        assert first.status_code == 200

        def create_part(folder: Path) -> tuple[Path, Any]:
            temp, out = real_create_part(folder)
            return temp, _FillingFile(out, room=100)

        real_create_part = uploads.create_part
        monkeypatch.setattr(uploads, "create_part", create_part)
        bigger = owls + b" They nest in old barns and hollow trees." * 20
        response = await client.post(
            "/v1/collections/kb/documents", files=[("file", ("owls.txt", bigger, "text/plain"))]
        )
        assert response.status_code == 507, response.text
        assert response.json()["error"]["message"] == FULL_DISK
        folder = engine.upload_dir("kb")
        assert [p.name for p in folder.iterdir()] == ["owls.txt"]  # no .part file left
        assert (folder / "owls.txt").read_bytes() == owls  # the earlier upload, unharmed
        listed = (await client.get("/v1/collections/kb/documents")).json()["data"]
        assert [d["complete"] for d in listed if d["file_name"] == "owls.txt"] == [True]


def test_no_space_is_told_apart_from_other_failures() -> None:
    """`citeflow.disk.is_no_space`: the operating system's, SQLite's and a Qdrant server's way of
    saying the disk is full, and nothing else."""

    def qdrant(message: str) -> UnexpectedResponse:
        body = f'{{"status": {{"error": "Service internal error: {message}"}}}}'.encode()
        return UnexpectedResponse(500, "Internal Server Error", body, httpx.Headers())

    full = [
        disk_full_error("sqlite"),
        disk_full_error("oserror"),
        OSError(errno.EDQUOT, "Disk quota exceeded"),
        sqlite3.OperationalError("database or disk is full"),  # without its error code
        qdrant("No space left on device (os error 28)"),
    ]
    other = [
        OSError(errno.EACCES, "Permission denied"),
        sqlite3.OperationalError("database is locked"),
        qdrant("Wrong input: collection not found"),
        RuntimeError("disk is full"),
    ]
    assert [is_no_space(e) for e in full] == [True] * len(full)
    assert [is_no_space(e) for e in other] == [False] * len(other)
