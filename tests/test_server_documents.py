"""Documents over HTTP: upload through the server's store, list, delete, original files."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from pydantic import SecretStr

from citeflow.api.engine import Engine
from citeflow.citations.markers import cited_numbers
from citeflow.knowledge_base import KnowledgeBase
from citeflow.server import create_app
from tests.fakes.llm import ScriptedLLM
from tests.server_helpers import make_engine

OWLS = b"Owls hunt at night. Barn owls eat mice and voles. An owl can turn its head far around."
BEES = b"Bees make honey from nectar. A hive has one queen bee and many worker bees."


@pytest.fixture
def engine(kb: KnowledgeBase) -> Engine:
    return make_engine(
        kb, ScriptedLLM(["Barn owls eat mice and voles [1]."]), max_upload_bytes=1000
    )


@pytest.fixture
async def client(engine: Engine) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=create_app(engine))
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:
        yield c


def _files(*items: tuple[str, bytes]) -> list[tuple[str, tuple[str, bytes, str]]]:
    return [("file", (name, data, "text/plain")) for name, data in items]


async def test_upload_list_ask_and_fetch_the_original(
    client: httpx.AsyncClient, engine: Engine
) -> None:
    response = await client.post(
        "/v1/collections/animals/documents", files=_files(("owls.txt", OWLS), ("bees.md", BEES))
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["collection"] == "animals" and body["added"] == 2 and body["chunks"] >= 2
    assert sorted(d["file_name"] for d in body["data"]) == ["bees.md", "owls.txt"]
    assert (engine.upload_dir("animals") / "owls.txt").read_bytes() == OWLS

    # the same file again is unchanged
    again = await client.post("/v1/collections/animals/documents", files=_files(("owls.txt", OWLS)))
    assert again.json()["unchanged"] == 1 and again.json()["chunks"] == 0

    listed = (await client.get("/v1/collections/animals/documents")).json()
    assert [d["file_name"] for d in listed["data"]] == ["bees.md", "owls.txt"]
    assert all(d["complete"] for d in listed["data"])
    models = (await client.get("/v1/models")).json()
    assert "citeflow-animals" in [m["id"] for m in models["data"]]

    chat = {
        "model": "citeflow-animals",
        "messages": [{"role": "user", "content": "What do barn owls eat?"}],
    }
    answer = (await client.post("/v1/chat/completions", json=chat)).json()
    assert cited_numbers(answer["choices"][0]["message"]["content"]) == [1]
    (source,) = answer["sources"]
    owls = next(d for d in listed["data"] if d["file_name"] == "owls.txt")
    assert source["source"]["id"] == owls["doc_id"]
    assert (
        source["source"]["url"] == f"http://testserver/v1/documents/animals/{owls['doc_id']}/file"
    )
    original = await client.get(source["source"]["url"])
    assert original.status_code == 200 and original.content == OWLS


async def test_delete_removes_chunks_and_the_upload(
    client: httpx.AsyncClient, engine: Engine
) -> None:
    body = (
        await client.post("/v1/collections/animals/documents", files=_files(("owls.txt", OWLS)))
    ).json()
    doc_id = body["data"][0]["doc_id"]
    deleted = await client.delete(f"/v1/collections/animals/documents/{doc_id}")
    assert deleted.json() == {"id": doc_id, "object": "document", "deleted": True}
    assert not (engine.upload_dir("animals") / "owls.txt").exists()
    assert (await client.get("/v1/collections/animals/documents")).json()["data"] == []
    missing = await client.delete(f"/v1/collections/animals/documents/{doc_id}")
    assert missing.status_code == 404 and missing.json()["error"]["type"] == "not_found_error"
    # the collection is now empty: a clear error, not an empty answer
    chat = {"model": "citeflow-animals", "messages": [{"role": "user", "content": "Owls?"}]}
    empty = await client.post("/v1/chat/completions", json=chat)
    assert empty.status_code == 400 and "no documents" in empty.json()["error"]["message"]


async def test_documents_of_an_existing_collection_and_their_files(
    client: httpx.AsyncClient, kb: KnowledgeBase
) -> None:
    listed = (await client.get("/v1/collections/kb/documents")).json()
    assert {d["doc_id"] for d in listed["data"]} == {"viaweb", "stories", "ducks"}
    # documents ingested from memory have no file to serve
    response = await client.get("/v1/documents/kb/ducks/file")
    assert response.status_code == 404 and "not available" in response.json()["error"]["message"]


@pytest.mark.parametrize(
    ("url", "files", "status", "words"),
    [
        ("/v1/collections/animals/documents", [("owls.exe", OWLS)], 400, ["unsupported"]),
        ("/v1/collections/animals/documents", [("empty.txt", b"   ")], 422, ["empty file"]),
        ("/v1/collections/animals/documents", [("big.txt", b"x" * 1001)], 413, ["1000 bytes"]),
        ("/v1/collections/bad%20name/documents", [("owls.txt", OWLS)], 400, ["collection name"]),
        ("/v1/collections/.../documents", [("owls.txt", OWLS)], 400, ["'...' is not valid"]),
        ("/v1/collections/_x/documents", [("owls.txt", OWLS)], 400, ["1-64 letters"]),
        (f"/v1/collections/{'a' * 65}/documents", [("owls.txt", OWLS)], 400, ["1-64 letters"]),
        ("/v1/collections/animals/documents", [("..", OWLS)], 400, ["not usable"]),
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
    assert response.status_code == status, response.text
    for word in words:
        assert word in response.json()["error"]["message"]
    folder = engine.upload_dir("animals")
    assert not folder.exists() or not any(folder.iterdir())  # nothing left behind


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
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == "name"
    assert error["code"] == "invalid_collection_name"
    assert "is not valid: use 1-64 letters, digits, '-' or '_'" in error["message"]


async def test_missing_file_part_and_unknown_collection(client: httpx.AsyncClient) -> None:
    response = await client.post("/v1/collections/animals/documents", data={"x": "1"})
    assert response.status_code == 400 and response.json()["error"]["param"] == "file"
    response = await client.get("/v1/collections/nothing/documents")
    assert response.status_code == 404 and response.json()["error"]["type"] == "not_found_error"


async def test_documents_need_the_key(engine: Engine, tmp_path: Path) -> None:
    engine.settings.api_keys = [SecretStr("k")]
    transport = httpx.ASGITransport(app=create_app(engine))
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:
        assert (await c.get("/v1/collections/kb/documents")).status_code == 401
        upload = await c.post("/v1/collections/animals/documents", files=_files(("o.txt", OWLS)))
        assert upload.status_code == 401
        ok = await c.get("/v1/collections/kb/documents", headers={"Authorization": "Bearer k"})
        assert ok.status_code == 200
