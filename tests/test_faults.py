"""The fault matrix: what citeflow does when the LLM provider, a client, the disk or the
operating system fails it. Each fault is tested here or, where a test already existed, there.
Over 400 lines: the matrix is one concept, and its fakes (a filling disk, a hanging embedder,
a killed process) serve only it.

The LLM provider (the real OpenAI client, through aiohttp, against the fake OpenAI server):

* 401, its message naming the key: 502 in general terms, its words in the server log
  (`test_server_upstream.py::test_an_upstream_error_is_told_in_general_terms_and_logged`);
* 429: 429 with ``Retry-After``; a stream: error chunk, ``[DONE]``
  (`test_server_upstream.py::test_an_upstream_rate_limit_is_429_with_retry_after`);
* 500, a timeout, a stream cut midway: 502; a stream: its text so far, the error chunk,
  ``[DONE]`` (`test_a_provider_failure_is_502_or_an_error_chunk_then_done`; a failing LLM object:
  `test_server_live.py::test_llm_failure_mid_stream_ends_with_error_then_done`).

A client that disconnects mid-answer: the provider's request is closed at once
(`test_a_client_disconnect_cancels_the_provider_request`; the workflow run:
`test_server_live.py::test_client_disconnect_cancels_the_run`).

A full disk (`tests.fakes.full_disk`: the embedded store's free-space check sees room for so many
more chunks; a Qdrant server's client fails writes as a full disk does; an upload's ``.part``
file, made by `citeflow.api.uploads.create_part`, fails with ENOSPC):

* during ``citeflow ingest``: one line; what was stored stays listed and answers questions
  (`test_a_full_disk_during_ingest_is_one_line_and_loses_nothing`);
* during an upload's ingestion: HTTP 507 in general terms; the same
  (`test_a_full_disk_during_an_upload_is_507_and_loses_nothing`);
* while an upload arrives: 507, nothing of it left, an earlier upload of its name unharmed
  (`test_a_full_disk_while_an_upload_arrives_is_507_and_leaves_nothing`);
* the ways of saying "no space" told apart from other failures
  (`test_no_space_is_told_apart_from_other_failures`).

``kill -9`` of an ingestion midway (what ``citeflow ingest`` runs, in a forked child process
killed with SIGKILL), then the same ingestion: ``citeflow documents`` lists the document as
incomplete with its repair, it is kept out of answers; then it is whole, with no duplicate and
no chunk lost (`test_kill_9_during_ingest_then_ingest_again`).

Uploads, in `test_server_documents.py`: a corrupt file is refused (422), or reported failed and
not kept, and an earlier upload of its name stays
(`test_a_corrupt_upload_loses_nothing_already_stored`; more kinds: `test_bad_uploads`); an
oversize one is refused by its ``Content-Length`` before it is read, or as soon as it passes the
limit (`test_a_declared_content_length_over_the_limit_is_413_before_reading`,
`test_a_streamed_upload_stops_being_read_past_the_limit`); bad file names and malformed bodies get
400 and leave nothing (`test_bad_file_names_and_bodies_are_400_and_leave_nothing`), and no
hostile request at large gets a 5xx (`test_server_fuzz.py`).
"""

from __future__ import annotations

import errno
import os
import re
import sqlite3
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import httpx
import pytest
from llama_index.core.schema import Document
from qdrant_client.http.exceptions import UnexpectedResponse

from citeflow.api import uploads
from citeflow.api.engine import Engine
from citeflow.cli import main
from citeflow.disk import is_no_space
from citeflow.ingestion.pipeline import doc_id_for
from citeflow.knowledge_base import KnowledgeBase
from citeflow.settings import Settings
from citeflow.store import Store
from citeflow.store.client import ClientEngine
from citeflow.testing.embedding import HashEmbedding
from citeflow.testing.llm import ScriptedLLM
from citeflow.testing.openai_server import FakeOpenAIServer, Reply
from tests.conftest import FACTS, open_kb, stored_points
from tests.fakes.full_disk import FillingDisk, FullDiskClient, disk_full_error
from tests.fakes.killed import kill_9_after
from tests.server_helpers import (
    ANSWER,
    add_collection,
    asgi_client,
    chat_request,
    content_of,
    live_server,
    make_engine,
    parse_sse,
    upstream_engine,
    wait_until,
)

LONG_ANSWER = " ".join([ANSWER] * 10)
#: a document of many chunks (at the test settings' chunk size of 128 tokens)
GEESE = " ".join(
    f"Note {i}: the greylag geese flew over the northern lake at dawn, calling loudly."
    for i in range(240)
)
GEESE_QUESTION = "Which geese flew over the northern lake at dawn?"
FULL_DISK = (
    "the server's disk is full: the request could not be completed, and nothing stored before "
    "was lost; retry once the server's operator has freed space"
)


# --- the LLM provider ----------------------------------------------------------------------------
@pytest.fixture
async def engine(kb: KnowledgeBase, upstream: FakeOpenAIServer) -> AsyncIterator[Engine]:
    engine = upstream_engine(kb, upstream, llm={"timeout": 0.5}, citations={"judge": "off"})
    yield engine
    await engine.aclose()


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        (Reply.error(500, "shard db-7 is down"), "the LLM provider failed; retry later"),
        (Reply(text=ANSWER, ttft=3.0), "the LLM provider timed out; retry later"),
        (Reply.drop(after_tokens=12, text=LONG_ANSWER), "the LLM provider failed; retry later"),
    ],
    ids=["500", "timeout", "cut-mid-stream"],
)
async def test_a_provider_failure_is_502_or_an_error_chunk_then_done(
    client: httpx.AsyncClient, upstream: FakeOpenAIServer, reply: Reply, message: str
) -> None:
    upstream.script([reply, reply])
    plain = await client.post("/v1/chat/completions", json=chat_request())
    assert plain.status_code == 502, plain.text
    error = plain.json()["error"]
    assert error["type"] == "upstream_error" and error["message"].startswith(message)
    started = time.monotonic()
    streamed = await client.post("/v1/chat/completions", json=chat_request(stream=True))
    assert time.monotonic() - started < 2.5  # a timeout is the client's, not the provider's 3 s
    assert streamed.status_code == 200  # the stream had begun: the error is its last chunk
    items = parse_sse(streamed.text)
    assert items[-1] == "[DONE]" and items[-2] == {"error": error}
    assert "db-7" not in plain.text + streamed.text  # the provider's words stay in the log
    if reply.drop_after is not None:  # the sentences checked before the cut went out
        assert content_of(items).startswith("Yahoo bought Viaweb in 1998")


async def test_a_client_disconnect_cancels_the_provider_request(
    kb: KnowledgeBase, upstream: FakeOpenAIServer
) -> None:
    """The client goes away while the provider streams (20 tokens a second, ~6 s in all): the
    provider's stream is closed at once, not read to its end."""
    upstream.script(Reply(text=LONG_ANSWER, tokens_per_second=20))
    engine = upstream_engine(kb, upstream, citations={"judge": "off"})
    with live_server(engine) as url:
        async with (
            httpx.AsyncClient(base_url=url, timeout=5) as http,
            http.stream("POST", "/v1/chat/completions", json=chat_request(stream=True)) as response,
        ):
            async for line in response.aiter_lines():
                if '"content":"Yahoo' in line:
                    assert upstream.active_streams == 1
                    break
        await wait_until(lambda: upstream.active_streams == 0, within=1.0)
    assert upstream.peak_streams == 1 and len(upstream.requests_of("chat")) == 1


# --- the disk: the store -------------------------------------------------------------------------
def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_a_full_disk_during_ingest_is_one_line_and_loses_nothing(
    cli_env: FakeOpenAIServer,
    kb: KnowledgeBase,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("CITEFLOW_EMBED_BATCH_SIZE", "4")
    ducks, geese = tmp_path / "ducks.txt", tmp_path / "geese.txt"
    ducks.write_text(FACTS["ducks"])
    geese.write_text(GEESE)
    assert _run(capsys, "ingest", "-q", str(ducks))[0] == 0

    chunks = len(kb.ingestor(progress=False).chunk_documents([Document(id_="g", text=GEESE)]))
    assert chunks > 20
    disk = FillingDisk(monkeypatch, room=10)  # the disk has room for 10 more chunks
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
    [stored] = re.findall(r"(\d+) chunks  " + re.escape(str(geese)), out)
    assert 0 < int(stored) <= 10
    assert out.splitlines() == [
        f"    1 chunks  {ducks}",
        f"{int(stored):5d} chunks  {geese}  INCOMPLETE ({stored} of {chunks} chunks stored, "
        f"kept out of answers): run `citeflow ingest {geese}` again",
    ]
    cli_env.script("Ducks live near ponds and rivers [1].")
    code, out, _ = _run(capsys, "ask", "-q", "Where do ducks live?")
    assert code == 0 and "ducks.txt" in out.partition("Sources:")[2]

    # space freed: the same command writes the document whole, once
    disk.free()
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
    store = Store(ClientEngine(disk, location=":memory:"))
    base = KnowledgeBase(settings, store=store, embed_model=HashEmbedding())
    add_collection(base, base.collection, FACTS)
    yield base, disk
    base.close()


async def test_a_full_disk_during_an_upload_is_507_and_loses_nothing(
    full_disk_kb: tuple[KnowledgeBase, FullDiskClient],
) -> None:
    kb, disk = full_disk_kb
    engine = make_engine(kb, ScriptedLLM(["Ducks live near ponds [1]."] * 2))
    async with asgi_client(engine) as client:
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
        chat = chat_request("Where do ducks live?")
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
    async with asgi_client(engine) as client:
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


# --- kill -9 during ingestion --------------------------------------------------------------------
class _HangingEmbedding(HashEmbedding):
    """Writes a byte to ``notify_fd`` for each batch it embeds; on batch ``hang_on`` it hangs
    (until killed) instead of returning."""

    notify_fd: int = -1
    hang_on: int = 0
    calls: int = 0

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        self.calls += 1
        os.write(self.notify_fd, b".")
        if self.calls == self.hang_on:
            time.sleep(60)
        return super()._get_text_embeddings(texts)


def _ingest_until_killed(settings: Settings, path: Path, notify_fd: int) -> None:
    """The child process: the ingestion of one file (`KnowledgeBase.ingest`, as ``citeflow
    ingest`` runs it), two chunks per batch, hanging in the eighth batch (seven batches, 14
    chunks, are stored by then)."""
    embed = _HangingEmbedding(dim=64, embed_batch_size=2, notify_fd=notify_fd, hang_on=8)
    kb = KnowledgeBase(settings, store=Store.open(settings.store), embed_model=embed)
    kb.ingest([path], progress=False)
    os._exit(3)  # not reached: killed while hanging


async def test_kill_9_during_ingest_then_ingest_again(
    settings: Settings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    geese = tmp_path / "geese.txt"
    geese.write_text(GEESE)
    kb = open_kb(settings)
    kb.add_documents([Document(id_="ducks", text=FACTS["ducks"])])
    chunks = len(kb.ingestor(progress=False).chunk_documents([Document(id_="g", text=GEESE)]))
    assert chunks > 20
    kb.close()  # the child process opens the embedded store

    # in a real child process, killed in its eighth batch
    kill_9_after(8, _ingest_until_killed, settings, geese, what="ingesting", within=20)

    # listed as incomplete, with the fix
    monkeypatch.setenv("CITEFLOW_DATA_DIR", str(settings.store.data_dir))
    code, out, _ = _run(capsys, "documents", "-c", "kb")
    assert code == 0
    [line] = [line for line in out.splitlines() if str(geese) in line]
    assert line == (
        f"   14 chunks  {geese}  INCOMPLETE (14 of {chunks} chunks stored, kept out of answers): "
        f"run `citeflow ingest {geese} --collection kb` again"
    )

    # kept out of answers
    kb = open_kb(settings)
    try:
        assert kb.count() == 1 + 14
        found = await kb.retriever(top_k=10).aretrieve(GEESE_QUESTION)
        assert {n.node.metadata["doc_id"] for n in found} == {"ducks"}

        # ingested again: whole, once
        report = kb.ingest([geese], progress=False)
        assert (report.replaced, report.chunks) == (1, chunks)
        record = kb.store.documents("kb")[doc_id_for(geese)]
        assert record.complete and record.chunks == record.expected_chunks == chunks
        assert kb.count() == 1 + chunks  # no duplicate
        points = stored_points(kb.store, "kb")
        indexes = sorted(
            p.payload["chunk_index"] for p in points if p.payload.get("doc_id") == record.doc_id
        )
        assert indexes == list(range(chunks))  # no chunk lost
        found = await kb.retriever(top_k=10).aretrieve(GEESE_QUESTION)
        assert record.doc_id in {n.node.metadata["doc_id"] for n in found}
    finally:
        kb.close()


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
