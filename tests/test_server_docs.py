"""The API docs (/docs, /redoc, /openapi.json): behind CITEFLOW_API_DOCS and the key."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest

from citeflow.api.exposure import docs_enabled
from citeflow.knowledge_base import KnowledgeBase
from citeflow.settings import Settings
from tests.server_helpers import asgi_client, assert_error, assert_needs_key, make_engine

DOCS = ("/openapi.json", "/docs", "/redoc")
KEY = {"Authorization": "Bearer k1"}


@pytest.mark.parametrize(
    ("host", "setting", "enabled"),
    [
        ("127.0.0.1", "auto", True),
        ("localhost", "auto", True),
        ("0.0.0.0", "auto", False),
        ("10.0.0.5", "auto", False),
        ("0.0.0.0", "on", True),
        ("127.0.0.1", "off", False),
    ],
)
def test_docs_are_on_by_default_only_on_loopback(host: str, setting: str, enabled: bool) -> None:
    settings = Settings(_env_file=None, server={"host": host, "api_docs": setting})
    assert docs_enabled(settings.server) is enabled


@pytest.mark.parametrize(
    ("server", "headers"),
    [({"host": "0.0.0.0", "keys": ["k1"]}, KEY), ({"api_docs": "off"}, {})],
    ids=["network-address-by-default", "off"],
)
async def test_docs_are_off(
    kb: KnowledgeBase, server: dict[str, Any], headers: dict[str, str]
) -> None:
    async with asgi_client(make_engine(kb, **server)) as c:
        for path in DOCS:
            assert_error(await c.get(path, headers=headers), 404, "not_found_error")


async def test_docs_on_with_keys_need_the_key(kb: KnowledgeBase) -> None:
    engine = make_engine(kb, keys=["k1"], host="0.0.0.0", api_docs="on")
    async with asgi_client(engine) as c:
        for path in DOCS:
            await assert_needs_key(c, "GET", path, "k1")


async def test_docs_on_loopback_without_keys_declare_the_bearer_scheme_and_the_chat_request(
    client: httpx.AsyncClient,
) -> None:
    schema = (await client.get("/openapi.json")).json()
    for path in ("/docs", "/redoc"):
        page = await client.get(path)
        assert page.status_code == 200 and "/openapi.json" in page.text
    schemes = schema["components"]["securitySchemes"]
    (name,) = schemes
    assert (schemes[name]["type"], schemes[name]["scheme"]) == ("http", "bearer")
    paths = schema["paths"]
    for path, method in (
        ("/v1/models", "get"),
        ("/v1/chat/completions", "post"),
        ("/v1/collections/{name}/documents", "post"),
        ("/v1/collections/{name}/documents/{doc_id}", "delete"),
        ("/v1/documents/{name}/{doc_id}/file", "get"),
        ("/v1/skills/embeddings", "post"),
    ):
        assert paths[path][method]["security"] == [{name: []}], path
    assert "security" not in paths["/health"]["get"]
    assert "security" not in paths["/health/ready"]["get"]

    body = paths["/v1/chat/completions"]["post"]["requestBody"]
    assert body["required"] is True
    ref = body["content"]["application/json"]["schema"]["$ref"]
    request = schema["components"]["schemas"][ref.rsplit("/", 1)[-1]]
    fields = {"model", "messages", "stream", "stream_options", "citeflow"}
    assert fields <= set(request["properties"])
    assert set(request["required"]) == {"model", "messages"}
    # every reference resolves in the document
    for target in re.findall(r'"\$ref": "([^"]*)"', json.dumps(schema)):
        assert target.startswith("#/components/schemas/"), target
        assert target.rsplit("/", 1)[-1] in schema["components"]["schemas"], target
