"""Signed source links: a browser opens a cited document without the bearer key."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from citeflow.api.engine import Engine
from citeflow.api.links import DocumentLinks
from citeflow.knowledge_base import KnowledgeBase
from citeflow.server import create_app
from citeflow.settings import Settings
from citeflow.testing.llm import ScriptedLLM
from tests.server_helpers import asgi_client, assert_error, chat_request, make_engine

OWLS = b"Owls hunt at night. Barn owls eat mice and voles. An owl can turn its head far around."
KEY = {"Authorization": "Bearer k1"}
CHAT = chat_request("What do barn owls eat?", model="citeflow-animals")


@pytest.fixture
def engine(kb: KnowledgeBase) -> Engine:
    return make_engine(kb, ScriptedLLM(["Barn owls eat mice and voles [1]."]), keys=["k1", "k2"])


async def _source_url(client: httpx.AsyncClient) -> str:
    """Upload the owls and ask about them: the cited source's URL."""
    files = [("file", ("owls.txt", OWLS, "text/plain"))]
    upload = await client.post("/v1/collections/animals/documents", files=files, headers=KEY)
    assert upload.status_code == 200, upload.text
    answer = await client.post("/v1/chat/completions", json=CHAT, headers=KEY)
    assert answer.status_code == 200, answer.text
    (source,) = answer.json()["sources"]
    return str(source["source"]["url"])


async def test_signed_link_opens_the_file_without_the_key(client: httpx.AsyncClient) -> None:
    url = await _source_url(client)
    parts = urlsplit(url)
    assert parts.path.startswith("/v1/documents/animals/") and parts.path.endswith("/file")
    query = parse_qs(parts.query)
    assert set(query) == {"expires", "sig"}
    response = await client.get(url)  # no Authorization header, as a browser clicking the link
    assert response.status_code == 200 and response.content == OWLS
    assert response.headers["content-security-policy"] == "sandbox"
    assert response.headers["referrer-policy"] == "no-referrer"
    # the bearer key still works, with or without the signature
    assert (await client.get(parts.path, headers=KEY)).content == OWLS
    assert (await client.get(url, headers=KEY)).content == OWLS


async def test_unsigned_tampered_and_foreign_links_are_refused(client: httpx.AsyncClient) -> None:
    url = await _source_url(client)
    parts = urlsplit(url)
    query = {k: v[0] for k, v in parse_qs(parts.query).items()}

    for unsigned in ({}, {"sig": query["sig"]}):
        assert_error(await client.get(parts.path, params=unsigned), 401, "authentication_error")
    tampered = {**query, "sig": query["sig"][:-2] + ("AA" if query["sig"][-2:] != "AA" else "BB")}
    response = await client.get(parts.path, params=tampered)
    assert_error(response, 403, "permission_error", code="invalid_signature")
    later = str(int(query["expires"]) + 3600)  # a longer life: refused
    for expires in (later, "soon"):
        response = await client.get(parts.path, params={**query, "expires": expires})
        assert_error(response, 403, "permission_error")
    # the signature of one document opens no other
    other = parts.path.replace("/animals/", "/kb/")
    assert_error(await client.get(other, params=query), 403, "permission_error")
    # a wrong bearer key is not rescued by a valid signature
    bad_key = {"Authorization": "Bearer nope"}
    assert_error(await client.get(url, headers=bad_key), 401, "authentication_error")


async def test_expired_link_is_refused(engine: Engine) -> None:
    app = create_app(engine)
    async with asgi_client(app) as client:
        url = await _source_url(client)
        links: DocumentLinks = app.state.links
        expires = int(parse_qs(urlsplit(url).query)["expires"][0])
        assert expires - links.clock() == pytest.approx(engine.settings.server.link_ttl, abs=5)
        links.clock = lambda: expires + 1.0
        response = await client.get(url)
        assert_error(response, 403, "permission_error", code="link_expired")
        links.clock = lambda: expires - 1.0
        assert (await client.get(url)).status_code == 200


async def test_public_url_and_open_servers(kb: KnowledgeBase) -> None:
    engine = make_engine(kb, ScriptedLLM(["Barn owls eat mice and voles [1]."]))
    engine.settings.server.public_url = "https://docs.example.com/citeflow/"
    async with asgi_client(engine) as client:
        url = await _source_url(client)  # no keys: an open server, plain links
        assert url.startswith("https://docs.example.com/citeflow/v1/documents/animals/")
        assert "?" not in url
        path = urlsplit(url).path.removeprefix("/citeflow")
        assert (await client.get(path)).content == OWLS


def test_links_from_settings() -> None:
    def key_of(**server: Any) -> bytes | None:
        return DocumentLinks.from_settings(Settings(_env_file=None, server=server).server).key

    assert key_of() is None  # an open server: links are not signed
    key = key_of(api_keys=["a", "b"])
    assert key is not None and key not in (b"a", b"b")  # derived, not a raw API key
    assert key_of(api_keys=["b", "a"]) == key  # stable across restarts
    assert key_of(api_keys=["a"]) != key  # rotating keys revokes links
    assert key_of(api_keys=["a"], link_secret="s") == b"s"


def test_links_that_never_expire() -> None:
    forever = DocumentLinks(b"secret", ttl=0, clock=lambda: 1e12)
    query = parse_qs(urlsplit(forever.url("http://h", "c", "d")).query)
    assert query["expires"] == ["0"]
    forever.check("c", "d", "0", query["sig"][0])
    # once a TTL is configured, links made without one stop working
    limited = DocumentLinks(b"secret", ttl=60, clock=lambda: 1e12)
    with pytest.raises(Exception, match="expired"):
        limited.check("c", "d", "0", query["sig"][0])
