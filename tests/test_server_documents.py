"""Documents over HTTP: upload through the server's store, list, delete, original files."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from starlette.requests import Request

from citeflow.api.documents import shown_paths
from citeflow.api.engine import Engine
from citeflow.api.errors import BadRequestError
from citeflow.api.uploads import receive_files
from citeflow.citations.markers import cited_numbers
from citeflow.knowledge_base import KnowledgeBase
from citeflow.store import DocumentRecord
from citeflow.testing.llm import ScriptedLLM
from tests.server_helpers import (
    asgi_client,
    assert_error,
    assert_needs_key,
    chat_request,
    live_server,
    make_engine,
)

OWLS = b"Owls hunt at night. Barn owls eat mice and voles. An owl can turn its head far around."
#: the upload route of the collection the tests upload to
ANIMALS = "/v1/collections/animals/documents"
BEES = b"Bees make honey from nectar. A hive has one queen bee and many worker bees."


@pytest.fixture
def engine(kb: KnowledgeBase) -> Engine:
    return make_engine(
        kb, ScriptedLLM(["Barn owls eat mice and voles [1]."]), max_upload_bytes=1000
    )


def _files(*items: tuple[str, bytes]) -> list[tuple[str, tuple[str, bytes, str]]]:
    return [("file", (name, data, "text/plain")) for name, data in items]


def _empty(folder: Path) -> bool:
    return not folder.exists() or not any(folder.iterdir())


async def test_upload_list_ask_and_fetch_the_original(
    client: httpx.AsyncClient, engine: Engine
) -> None:
    response = await client.post(ANIMALS, files=_files(("owls.txt", OWLS), ("bees.md", BEES)))
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["collection"] == "animals" and body["added"] == 2 and body["chunks"] >= 2
    assert sorted(d["file_name"] for d in body["data"]) == ["bees.md", "owls.txt"]
    assert (engine.upload_dir("animals") / "owls.txt").read_bytes() == OWLS

    # the same file again is unchanged
    again = await client.post(ANIMALS, files=_files(("owls.txt", OWLS)))
    assert again.json()["unchanged"] == 1 and again.json()["chunks"] == 0

    listed = (await client.get(ANIMALS)).json()
    assert [d["file_name"] for d in listed["data"]] == ["bees.md", "owls.txt"]
    assert all(d["complete"] for d in listed["data"])
    models = (await client.get("/v1/models")).json()
    assert "citeflow-animals" in [m["id"] for m in models["data"]]

    chat = chat_request("What do barn owls eat?", model="citeflow-animals")
    answer = (await client.post("/v1/chat/completions", json=chat)).json()
    assert cited_numbers(answer["choices"][0]["message"]["content"]) == [1]
    (source,) = answer["sources"]
    owls = next(d for d in listed["data"] if d["file_name"] == "owls.txt")
    assert source["source"]["id"] == owls["doc_id"]
    url = source["source"]["url"]
    assert url == f"http://testserver/v1/documents/animals/{owls['doc_id']}/file"
    original = await client.get(url)
    assert original.status_code == 200 and original.content == OWLS


async def test_delete_removes_chunks_and_the_upload(
    client: httpx.AsyncClient, engine: Engine
) -> None:
    body = (await client.post(ANIMALS, files=_files(("owls.txt", OWLS)))).json()
    doc_id = body["data"][0]["doc_id"]
    deleted = await client.delete(f"/v1/collections/animals/documents/{doc_id}")
    assert deleted.json() == {"id": doc_id, "object": "document", "deleted": True}
    assert not (engine.upload_dir("animals") / "owls.txt").exists()
    assert (await client.get(ANIMALS)).json()["data"] == []
    missing = await client.delete(f"/v1/collections/animals/documents/{doc_id}")
    assert_error(missing, 404, "not_found_error")
    # the collection is now empty: a clear error, not an empty answer
    chat = chat_request("Owls?", model="citeflow-animals")
    empty = await client.post("/v1/chat/completions", json=chat)
    assert_error(empty, 400, "invalid_request_error", "no documents")


async def test_documents_of_an_existing_collection_and_their_files(
    client: httpx.AsyncClient,
) -> None:
    listed = (await client.get("/v1/collections/kb/documents")).json()
    assert {d["doc_id"] for d in listed["data"]} == {"viaweb", "stories", "ducks"}
    # documents ingested from memory have no file to serve
    response = await client.get("/v1/documents/kb/ducks/file")
    assert_error(response, 404, "not_found_error", "not available")


@pytest.mark.parametrize(
    ("url", "files", "status", "words"),
    [
        (ANIMALS, [("owls.exe", OWLS)], 400, ["unsupported"]),
        (ANIMALS, [("empty.txt", b"   ")], 422, ["empty file"]),
        (ANIMALS, [("big.txt", b"x" * 1001)], 413, ["1000 bytes"]),
        ("/v1/collections/bad%20name/documents", [("owls.txt", OWLS)], 400, ["collection name"]),
        ("/v1/collections/.../documents", [("owls.txt", OWLS)], 400, ["'...' is not valid"]),
        ("/v1/collections/_x/documents", [("owls.txt", OWLS)], 400, ["1-64 letters"]),
        (f"/v1/collections/{'a' * 65}/documents", [("owls.txt", OWLS)], 400, ["1-64 letters"]),
        (ANIMALS, [("..", OWLS)], 400, ["not usable"]),
    ],
)
async def test_bad_uploads(
    client: httpx.AsyncClient,
    engine: Engine,
    url: str,
    files: list[tuple[str, bytes]],
    status: int,
    words: list[str],
) -> None:
    response = await client.post(url, files=_files(*files))
    assert_error(response, status, "invalid_request_error", *words)
    assert _empty(engine.upload_dir("animals"))  # nothing left behind


async def test_a_corrupt_upload_loses_nothing_already_stored(
    client: httpx.AsyncClient, engine: Engine
) -> None:
    """A corrupt file in place of an uploaded one is refused and the original stays (its
    document's source links still open it); a corrupt file among good ones is reported and not
    kept."""
    first = await client.post(ANIMALS, files=_files(("owls.txt", OWLS)))
    [doc] = first.json()["data"]
    folder = engine.upload_dir("animals")

    corrupt = await client.post(ANIMALS, files=_files(("owls.txt", b"  \n ")))
    assert_error(corrupt, 422, "invalid_request_error", message="owls.txt: empty file")
    assert sorted(p.name for p in folder.iterdir()) == ["owls.txt"]
    original = await client.get(f"/v1/documents/animals/{doc['doc_id']}/file")
    assert original.status_code == 200 and original.content == OWLS

    response = await client.post(
        ANIMALS, files=_files(("bees.md", BEES), ("broken.pdf", b"%PDF-1.4 not really a pdf"))
    )
    assert response.status_code == 200, response.text
    assert [f["file"] for f in response.json()["failed"]] == ["broken.pdf"]
    assert sorted(p.name for p in folder.iterdir()) == ["bees.md", "owls.txt"]
    listed = (await client.get(ANIMALS)).json()["data"]
    assert [(d["file_name"], d["complete"]) for d in listed] == [
        ("bees.md", True),
        ("owls.txt", True),
    ]


@pytest.mark.parametrize(
    ("method", "url"),
    [
        ("GET", "/v1/collections/.../documents"),
        ("DELETE", "/v1/collections/.../documents/abc"),
        ("GET", "/v1/documents/.../abc/file"),
        ("GET", "/v1/collections/a.b/documents"),
    ],
)
async def test_collection_names_are_checked_on_every_route(
    client: httpx.AsyncClient, method: str, url: str
) -> None:
    response = await client.request(method, url)
    words = "is not valid: use 1-64 letters, digits, '-' or '_'"
    assert_error(response, 400, "invalid_request_error", words, param="name")
    assert response.json()["error"]["code"] == "invalid_collection_name"


async def test_missing_file_part_and_unknown_collection(client: httpx.AsyncClient) -> None:
    response = await client.post(ANIMALS, data={"x": "1"})
    assert_error(response, 400, "invalid_request_error", param="file")
    response = await client.get("/v1/collections/nothing/documents")
    assert_error(response, 404, "not_found_error")


async def test_documents_need_the_key(kb: KnowledgeBase) -> None:
    async with asgi_client(make_engine(kb, keys=["k"])) as c:
        await assert_needs_key(c, "GET", "/v1/collections/kb/documents", "k")
        upload = await c.post(ANIMALS, files=_files(("o.txt", OWLS)))
        assert upload.status_code == 401


async def test_no_response_names_a_server_path(
    client: httpx.AsyncClient, engine: Engine, tmp_path: Path
) -> None:
    handbook = tmp_path / "home" / "alice" / "handbook"
    (handbook / "guides").mkdir(parents=True)
    (handbook / "intro.md").write_bytes(BEES)
    (handbook / "guides" / "owls.txt").write_bytes(OWLS)
    await engine.ingest_files("animals", [handbook / "intro.md", handbook / "guides" / "owls.txt"])
    upload = await client.post(ANIMALS, files=_files(("b.md", BEES)))
    assert [d["file_path"] for d in upload.json()["data"]] == ["b.md"]
    listed = await client.get(ANIMALS)
    paths = {d["file_name"]: d["file_path"] for d in listed.json()["data"]}
    # relative to what was ingested (the handbook folder), an upload by its name
    assert paths == {"intro.md": "intro.md", "owls.txt": "guides/owls.txt", "b.md": "b.md"}
    for response in (upload, listed):
        assert str(tmp_path) not in response.text and "/home/" not in response.text


def test_shown_paths_of_single_files_and_documents_without_one(tmp_path: Path) -> None:
    def record(doc_id: str, path: str) -> DocumentRecord:
        return DocumentRecord(doc_id, "h", path, Path(path).name, doc_id, 1)

    uploads = tmp_path / "uploads" / "kb"
    records = [
        record("one", str(tmp_path / "notes" / "a.txt")),
        record("memory", ""),
        record("up", str(uploads / "b.pdf")),
    ]
    assert shown_paths(records, uploads) == {"one": "a.txt", "memory": "", "up": "b.pdf"}


# --- uploads stream to disk within their limits -------------------------------------------------
BOUNDARY = "citeflowtestboundary"


def _part(name: str, data: bytes = b"", *, field: str = "file") -> bytes:
    head = (
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="{field}"; '
        f'filename="{name}"\r\nContent-Type: text/plain\r\n\r\n'
    )
    return head.encode() + data + b"\r\n"


END = f"--{BOUNDARY}--\r\n".encode()
MULTIPART = {"content-type": f"multipart/form-data; boundary={BOUNDARY}"}


class Body:
    """A request body sent in pieces, counting how many pieces the server asked for."""

    def __init__(self, *pieces: bytes, then: bytes = b"", times: int = 0) -> None:
        self.pieces = [*pieces, *([then] * times)]
        self.read = 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for piece in self.pieces:
            self.read += 1
            yield piece


@pytest.fixture
def temp_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The process's temporary directory, for this test: nothing may be spooled there."""
    folder = tmp_path / "system-tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def _nothing_left(engine: Engine, temp_dir: Path) -> None:
    assert _empty(engine.upload_dir("animals")), list(engine.upload_dir("animals").iterdir())
    assert _empty(temp_dir), list(temp_dir.iterdir())


async def test_a_declared_content_length_over_the_limit_is_413_before_reading(
    client: httpx.AsyncClient, engine: Engine, temp_dir: Path
) -> None:
    body = Body(_part("big.txt"), then=b"x" * 65536, times=100)
    response = await client.post(
        ANIMALS, content=body, headers={**MULTIPART, "content-length": str(10**9)}
    )
    assert_error(response, 413, "invalid_request_error", "over the limit of 1000 bytes")
    assert response.headers["connection"] == "close"
    assert body.read == 0  # not one byte of the body was read
    _nothing_left(engine, temp_dir)


async def test_a_streamed_upload_stops_being_read_past_the_limit(
    client: httpx.AsyncClient, engine: Engine, temp_dir: Path
) -> None:
    # chunked (no Content-Length): one file past its limit
    body = Body(_part("big.txt")[:-2], then=b"x" * 600, times=10_000)
    response = await client.post(ANIMALS, content=body, headers=MULTIPART)
    words = "big.txt is over the upload limit of 1000 bytes"
    assert_error(response, 413, "invalid_request_error", words)
    assert body.read <= 3
    _nothing_left(engine, temp_dir)
    # many small files past the limit of the whole body
    body = Body(*[_part(f"f{i}.txt", b"y" * 999) for i in range(80)], END)
    response = await client.post(ANIMALS, content=body, headers=MULTIPART)
    assert_error(response, 413, "invalid_request_error", "files of one request together")
    assert body.read < 80
    _nothing_left(engine, temp_dir)


async def test_a_streamed_upload_within_the_limit_is_kept(
    client: httpx.AsyncClient, engine: Engine, temp_dir: Path
) -> None:
    half = len(OWLS) // 2
    body = Body(_part("owls.txt")[:-2], OWLS[:half], OWLS[half:] + b"\r\n", _part("e.md"), END)
    response = await client.post(ANIMALS, content=body, headers=MULTIPART)
    assert response.status_code == 200, response.text
    assert response.json()["added"] == 1  # the empty file is reported as failed, and not kept
    assert [f["file"] for f in response.json()["failed"]] == ["e.md"]
    assert (engine.upload_dir("animals") / "owls.txt").read_bytes() == OWLS
    assert sorted(p.name for p in engine.upload_dir("animals").iterdir()) == ["owls.txt"]
    assert _empty(temp_dir)


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (_part("a" * 252 + ".txt", OWLS) + END, ["256 bytes long", "limit of 255"]),
        (_part("é" * 127 + ".txt", OWLS) + END, ["258 bytes long", "rename the file"]),
        (_part("tab\there.txt", OWLS) + END, ["control characters"]),
        (_part("owls.txt", OWLS) + _part("owls.txt", BEES) + END, ["uploaded twice"]),
        (_part("owls.txt", OWLS), ["ends before its closing boundary"]),
        (_part("owls.txt", OWLS, field="other") + END, ["no 'file' part"]),
        (
            _part("owls.txt", OWLS).replace(b"owls.txt", b"\xffowls.txt") + END,
            ["not valid UTF-8"],
        ),
    ],
    ids=["long", "long-utf8", "control", "twice", "cut-short", "no-file", "not-utf8"],
)
async def test_bad_file_names_and_bodies_are_400_and_leave_nothing(
    client: httpx.AsyncClient, engine: Engine, temp_dir: Path, body: bytes, words: list[str]
) -> None:
    response = await client.post(ANIMALS, content=body, headers=MULTIPART)
    assert_error(response, 400, "invalid_request_error", *words, param="file")
    assert len(response.json()["error"]["message"]) < 300
    _nothing_left(engine, temp_dir)


async def test_a_file_name_of_255_bytes_is_fine(client: httpx.AsyncClient, engine: Engine) -> None:
    name = "o" * 251 + ".txt"
    response = await client.post(ANIMALS, files=_files((name, OWLS)))
    assert response.status_code == 200, response.text
    assert (engine.upload_dir("animals") / name).read_bytes() == OWLS


async def test_not_multipart_is_400(client: httpx.AsyncClient) -> None:
    response = await client.post(ANIMALS, json={"file": "x"})
    assert_error(response, 400, "invalid_request_error", "multipart/form-data")


async def test_a_client_gone_mid_upload_leaves_nothing(tmp_path: Path) -> None:
    messages = [
        {"type": "http.request", "body": _part("owls.txt")[:-2] + OWLS[:10], "more_body": True},
        {"type": "http.disconnect"},
    ]

    async def receive() -> dict[str, Any]:
        return messages.pop(0)

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/",
        "headers": [(b"content-type", MULTIPART["content-type"].encode())],
    }
    folder = tmp_path / "uploads"
    with pytest.raises(BadRequestError, match="went away"):
        await receive_files(Request(scope, receive), folder, max_file_bytes=1000, check_name=str)
    assert folder.is_dir() and not any(folder.iterdir())


async def test_uvicorn_answers_413_to_the_headers_alone(engine: Engine, temp_dir: Path) -> None:
    """Against a real server: the 413 comes back while the client has sent no body at all,
    and the connection is closed (the body will not be read)."""
    with live_server(engine) as url:
        reader, writer = await asyncio.open_connection("127.0.0.1", urlsplit(url).port)
        writer.write(
            b"POST /v1/collections/animals/documents HTTP/1.1\r\nHost: x\r\n"
            + f"Content-Type: {MULTIPART['content-type']}\r\n".encode()
            + b"Content-Length: 1000000000\r\n\r\n"
        )
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(), timeout=5)  # until the server closes
        writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413"), answer
    assert b"connection: close" in head.lower()
    assert b"over the limit of 1000 bytes" in body
    _nothing_left(engine, temp_dir)


async def test_a_document_cut_short_is_listed_incomplete_with_its_repair(
    client: httpx.AsyncClient, engine: Engine
) -> None:
    """A document whose ingestion was cut short (here: its embedder died midway) is listed as
    incomplete, with how many chunks it has of how many, and what to do about it."""
    from llama_index.core.schema import Document

    from citeflow.ingestion.pipeline import Ingestor
    from citeflow.testing.embedding import RecordingEmbedding

    dying = RecordingEmbedding(dim=256, embed_batch_size=2, fail_on_batch=2)
    ingestor = Ingestor(
        engine.store, dying, collection="kb", chunk_size=64, window=2, pool=2, progress=False
    )
    document = Document(id_="geese", text="Geese fly south in V shapes. " * 60)
    with pytest.raises(RuntimeError, match="embedder died"):
        ingestor.ingest_documents([document])
    data = (await client.get("/v1/collections/kb/documents")).json()["data"]
    listed = {d["doc_id"]: d for d in data}
    geese = listed.pop("geese")
    assert geese["complete"] is False and geese["chunks"] == 4 and geese["expected_chunks"] > 4
    assert geese["problem"] == (
        f"incomplete: its ingestion was cut short (4 of {geese['expected_chunks']} chunks stored, "
        "kept out of answers); upload the file again, or ingest it again"
    )
    assert all(d["complete"] and d["problem"] is None for d in listed.values())
