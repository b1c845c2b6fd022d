"""Cited sources as OpenAI ``url_citation`` annotations (Open WebUI Direct Connections and other
OpenAI clients), and CORS for browsers calling the API."""

from __future__ import annotations

import re
from typing import Any

import pytest

from citeflow.knowledge_base import KnowledgeBase
from citeflow.testing.llm import ScriptedLLM
from tests.server_helpers import (
    ANSWER,
    CHAT,
    STREAM,
    asgi_client,
    content_of,
    events_of,
    make_engine,
    parse_sse,
)

BROWSER = {"Origin": "https://chat.example.com"}


def annotations_of(items: list[Any]) -> list[dict[str, Any]]:
    found = []
    for item in items:
        if isinstance(item, dict) and item.get("choices"):
            found += item["choices"][0].get("delta", {}).get("annotations", [])
    return found


def open_webui_sources(annotations: list[dict[str, Any]]) -> list[str]:
    """What Open WebUI 0.12.4 makes of them (utils/middleware.py): a source per annotation,
    keyed by its URL; ``[n]`` is the n-th distinct key in arrival order. Returns the titles."""
    keys: dict[str, str] = {}
    for annotation in annotations:
        citation = annotation["url_citation"]
        keys.setdefault(citation["url"], citation.get("title", citation["url"]))
    return list(keys.values())


async def test_a_browser_stream_carries_one_annotation_per_cited_source(
    kb: KnowledgeBase,
) -> None:
    async with asgi_client(make_engine(kb, ScriptedLLM([ANSWER])), **BROWSER) as client:
        response = await client.post("/v1/chat/completions", json=STREAM)
    assert "access-control-allow-origin" not in response.headers  # no CORS by default
    items = parse_sse(response.text)
    annotations = annotations_of(items)
    content = content_of(items)
    assert len(annotations) == 2 == len(events_of(items, "source"))  # the events stay too
    titles = open_webui_sources(annotations)
    for number, annotation in enumerate(annotations, start=1):
        citation = annotation["url_citation"]
        assert citation["url"].endswith(f"#source-{number}")
        assert citation["url"].startswith("http://testserver/v1/documents/kb/")
        assert content[citation["start_index"] : citation["end_index"]] == f"[{number}]"
    # each [n] of the answer names, through Open WebUI's numbering, the file it quotes
    cited = [(int(n), sentence) for sentence, n in re.findall(r"([^.]*?)\s*\[(\d)\]", content)]
    assert len(cited) == 2
    for number, sentence in cited:
        assert titles[number - 1] == ("viaweb.txt" if "Viaweb" in sentence else "ducks.txt")


async def test_server_side_requests_get_no_annotations_unless_asked(kb: KnowledgeBase) -> None:
    engine = make_engine(kb, ScriptedLLM([ANSWER]))
    async with asgi_client(engine) as client:
        stream = await client.post("/v1/chat/completions", json=STREAM)
        plain = await client.post("/v1/chat/completions", json=CHAT)
    assert not annotations_of(parse_sse(stream.text))
    assert "annotations" not in plain.json()["choices"][0]["message"]
    on = make_engine(kb, ScriptedLLM([ANSWER]), annotations="on")
    async with asgi_client(on) as client:
        plain = await client.post("/v1/chat/completions", json=CHAT)
    message = plain.json()["choices"][0]["message"]
    assert [a["url_citation"]["title"] for a in message["annotations"]] == [
        s["metadata"][0]["name"] for s in plain.json()["sources"]
    ]
    off = make_engine(kb, ScriptedLLM([ANSWER]), annotations="off")
    async with asgi_client(off, **BROWSER) as client:
        stream = await client.post("/v1/chat/completions", json=STREAM)
    assert not annotations_of(parse_sse(stream.text))


@pytest.mark.parametrize("allowed", [True, False])
async def test_cors_admits_only_the_configured_origins(kb: KnowledgeBase, allowed: bool) -> None:
    engine = make_engine(kb, ScriptedLLM([ANSWER]), cors_origins=["https://chat.example.com"])
    origin = "https://chat.example.com" if allowed else "https://evil.example.net"
    preflight_headers = {
        "Origin": origin,
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type",
    }
    async with asgi_client(engine) as client:
        preflight = await client.options("/v1/chat/completions", headers=preflight_headers)
        answer = await client.post("/v1/chat/completions", json=CHAT, headers={"Origin": origin})
    if allowed:
        assert preflight.status_code == 200
        assert preflight.headers["access-control-allow-origin"] == origin
        assert "authorization" in preflight.headers["access-control-allow-headers"].lower()
        assert answer.headers["access-control-allow-origin"] == origin
    else:
        assert preflight.status_code == 400
        assert "access-control-allow-origin" not in answer.headers
