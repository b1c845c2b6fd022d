"""POST /search through ASGI: both request forms, collections, dedup, k, grading and retry, the
budget, auth, and every bad input as an OpenAI error body. Over 400 lines: one route with two
request forms and its full bad-input table."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from typing import Any

import httpx
import pytest
from llama_index.core.llms import ChatMessage, ChatResponse
from llama_index.core.schema import Document

from citeflow.errors import UpstreamError
from citeflow.knowledge_base import KnowledgeBase
from citeflow.testing.llm import ScriptedLLM
from tests.conftest import FACTS
from tests.server_helpers import (
    CountingEmbedding,
    add_collection,
    asgi_client,
    assert_error,
    assert_needs_key,
    make_engine,
    post_raw,
)

#: every key a result's metadata may have: what a chat completion's sources show, plus the
#: collection and the chunk index
METADATA_KEYS = {
    "source",
    "name",
    "doc_id",
    "file_name",
    "collection",
    "page",
    "chunk_index",
    "url",
}

VIAWEB = "Yahoo bought Viaweb in 1998"
DUCKS = "They live near ponds"
#: a chat whose last question needs no rewrite to find Viaweb (one is made: the rewrite's LLM)
HISTORY = [
    {"role": "user", "content": "Tell me about ducks."},
    {"role": "assistant", "content": "Ducks are birds."},
    {"role": "user", "content": "Who bought Viaweb?"},
]


class SlowLLM(ScriptedLLM):
    """A `ScriptedLLM` whose chat calls wait ``pause`` seconds first (cancellable), counting
    the calls begun, finished or not (``calls``)."""

    pause: float = 5.0
    calls: int = 0

    async def achat(  # type: ignore[override]
        self, messages: Sequence[ChatMessage], **kwargs: Any
    ) -> ChatResponse:
        self.calls += 1
        await asyncio.sleep(self.pause)
        return await super().achat(messages, **kwargs)


def _results(response: httpx.Response, queries: int) -> dict[str, Any]:
    """The body of a 200 answer to ``queries`` queries, checked: one list per query in each of
    the three, parallel; distances in [0, 1], best first."""
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    assert set(body) == {"documents", "metadatas", "distances"}
    assert len(body["documents"]) == len(body["metadatas"]) == len(body["distances"]) == queries
    for documents, metadatas, distances in zip(
        body["documents"], body["metadatas"], body["distances"], strict=True
    ):
        assert len(documents) == len(metadatas) == len(distances)
        assert all(isinstance(d, str) and d for d in documents)
        assert all(0.0 <= d <= 1.0 for d in distances), distances
        assert distances == sorted(distances, reverse=True), distances
        for meta in metadatas:
            assert set(meta) <= METADATA_KEYS, set(meta) - METADATA_KEYS
    return body


# --- the two forms -------------------------------------------------------------------------------
async def test_queries_form_gives_one_graded_list_per_query(
    kb: KnowledgeBase, client: httpx.AsyncClient
) -> None:
    response = await client.post(
        "/search", json={"queries": ["Who bought Viaweb?", "Where do ducks live?"]}
    )
    body = _results(response, 2)
    viaweb, ducks = body["documents"]
    assert VIAWEB in viaweb[0] and DUCKS in ducks[0]
    # graded: the other facts were retrieved too (three chunks in all) and dropped
    assert len(await kb.retriever(top_k=5).aretrieve("Who bought Viaweb?")) == 3
    assert len(viaweb) == 1 and len(ducks) == 1
    meta = body["metadatas"][0][0]
    assert meta == {
        "source": "viaweb",
        "name": "viaweb.txt",
        "doc_id": "viaweb",
        "file_name": "viaweb.txt",
        "collection": "kb",
        "chunk_index": 0,
        "url": "http://testserver/v1/documents/kb/viaweb/file",
    }
    assert body["distances"][0][0] > 0.25


async def test_v1_search_is_the_same_route(client: httpx.AsyncClient) -> None:
    body = {"queries": ["Who bought Viaweb?"]}
    plain = await client.post("/search", json=body)
    prefixed = await client.post("/v1/search", json=body)
    assert prefixed.status_code == 200 and prefixed.json() == plain.json()


async def test_messages_form_makes_the_query_with_the_chat_rewrite(kb: KnowledgeBase) -> None:
    llm = ScriptedLLM(["Who bought Viaweb in 1998"])
    messages = [
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": "Tell me about the online store company."},
        {"role": "assistant", "content": "It made software for online stores [1]."},
        {"role": "user", "content": "Who acquired it?"},
    ]
    async with asgi_client(make_engine(kb, llm)) as c:
        # queries are ignored when messages are given (the Open WebUI fork sends both)
        response = await c.post("/search", json={"messages": messages, "queries": ["ducks"]})
    body = _results(response, 1)
    # the rewritten query finds Viaweb, and only it; "Who acquired it?" alone finds nothing
    # relevant, and would get the three best chunks as a fallback
    assert len(body["documents"][0]) == 1 and VIAWEB in body["documents"][0][0]
    assert len(llm.prompts) == 1
    prompt = llm.prompts[0]
    assert "Tell me about the online store company." in prompt and "Who acquired it?" in prompt
    assert "It made software for online stores." in prompt  # markers stripped, as in chats
    assert "You are helpful" not in prompt


async def test_a_single_message_needs_no_llm(kb: KnowledgeBase) -> None:
    llm = ScriptedLLM([RuntimeError("no LLM call expected")])
    async with asgi_client(make_engine(kb, llm)) as c:
        response = await c.post(
            "/search", json={"messages": [{"role": "user", "content": "Where do  ducks live?"}]}
        )
    assert DUCKS in _results(response, 1)["documents"][0][0]
    assert llm.prompts == []


# --- collections and dedup -----------------------------------------------------------------------
async def test_several_collections_merged_and_deduplicated(
    kb: KnowledgeBase, client: httpx.AsyncClient
) -> None:
    geese = "Geese are waterfowl birds too. Geese live near lakes and ponds."
    # ducks-copy: the same chunk text as in "kb"
    add_collection(kb, "birds", {"ducks-copy": FACTS["ducks"], "geese": geese})
    query = {"queries": ["Which waterfowl birds live near ponds?"]}
    both = await client.post("/search", json={**query, "collection_names": ["kb", "birds"]})
    body = _results(both, 1)
    texts = body["documents"][0]
    assert len(texts) == len(set(texts)) == 2
    assert sum(FACTS["ducks"] in t for t in texts) == 1
    assert any("Geese" in t for t in texts)
    collections = {m["collection"] for m in body["metadatas"][0]}
    assert "birds" in collections  # geese
    # model ids name knowledge bases too, and a knowledge base named twice is searched once
    again = await client.post(
        "/search", json={**query, "collection_names": ["citeflow-kb", "kb", "citeflow-birds"]}
    )
    assert again.json()["documents"] == body["documents"]
    # only the default knowledge base ("kb"): no geese
    default = (await client.post("/search", json=query)).json()
    assert not any("Geese" in t for t in default["documents"][0])
    assert {m["collection"] for m in default["metadatas"][0]} == {"kb"}


async def test_a_query_is_embedded_once_for_all_collections(kb: KnowledgeBase) -> None:
    add_collection(kb, "birds", {"geese": "Geese live near lakes."})
    embed = CountingEmbedding()
    async with asgi_client(make_engine(kb, embed_model=embed)) as c:
        response = await c.post(
            "/search",
            json={"queries": ["ducks", "geese lakes"], "collection_names": ["kb", "birds"]},
        )
    assert response.status_code == 200, response.text
    assert embed.queries == 2


async def test_the_same_text_from_two_rounds_counts_once(kb: KnowledgeBase) -> None:
    # round 1 finds nothing relevant; round 2 searches again: the fallback over both rounds
    # holds each chunk text once
    llm = ScriptedLLM(["zebra quagga okapi"])
    engine = make_engine(kb, llm, retrieval={"max_rounds": 2})
    async with asgi_client(engine) as c:
        response = await c.post("/search", json={"queries": ["xylophone marimba"], "k": 10})
    texts = _results(response, 1)["documents"][0]
    assert len(llm.prompts) == 1  # the retry happened
    assert len(texts) == len(set(texts)) == 3  # three chunks in all, each once


async def test_an_empty_knowledge_base_gives_no_results_not_an_error(
    kb: KnowledgeBase, client: httpx.AsyncClient
) -> None:
    empty = add_collection(kb, "empty", {"gone": "Something to delete."})
    kb.store.delete_document("empty", "gone")
    assert empty.count() == 0
    response = await client.post(
        "/search", json={"queries": ["Who bought Viaweb?"], "collection_names": ["empty"]}
    )
    assert _results(response, 1) == {"documents": [[]], "metadatas": [[]], "distances": [[]]}


# --- k -------------------------------------------------------------------------------------------
async def test_k_bounds_each_list(kb: KnowledgeBase, client: httpx.AsyncClient) -> None:
    pond = "Pond {0} has ducks, frogs and reeds; pond {0} is number {0}."
    add_collection(kb, "ponds", {f"pond-{i}": pond.format(i) for i in range(8)})
    query = {"queries": ["ducks frogs reeds pond", "pond ducks"], "collection_names": ["ponds"]}
    for k, expected in ((1, 1), (3, 3), (None, 5), (50, 8)):
        body = {**query, **({"k": k} if k is not None else {})}
        response = await client.post("/search", json=body)
        found = _results(response, 2)
        assert [len(d) for d in found["documents"]] == [expected, expected], k


async def test_metadata_has_the_page_and_nothing_private(
    kb: KnowledgeBase, client: httpx.AsyncClient
) -> None:
    text = "The owl manual: barn owls hunt mice at night."
    metadata = {"file_name": "owls.pdf", "file_path": "/srv/secret/owls.pdf", "page_label": "3"}
    kb.add_documents([Document(id_="manual", text=text, metadata=metadata)])
    response = await client.post("/search", json={"queries": ["barn owls hunt mice"]})
    body = response.json()
    meta = body["metadatas"][0][0]
    assert meta["name"] == "owls.pdf, page 3" and meta["page"] == 2  # 0-based, as in chats
    assert meta["file_name"] == "owls.pdf" and meta["doc_id"] == "manual"
    assert "/srv/secret" not in response.text
    assert "content_hash" not in response.text and "chunk_count" not in response.text


# --- grading and retry ---------------------------------------------------------------------------
async def test_nothing_relevant_falls_back_or_refuses(kb: KnowledgeBase) -> None:
    query = {"queries": ["xylophone marimba"]}
    llm = ScriptedLLM([RuntimeError("no LLM call expected")])
    async with asgi_client(make_engine(kb, llm)) as c:
        best = _results(await c.post("/search", json=query), 1)
    assert len(best["documents"][0]) == 3  # the workflow's fallback: its 3 best hits
    async with asgi_client(make_engine(kb, llm, retrieval={"on_no_relevant": "refuse"})) as c:
        refused = (await c.post("/search", json=query)).json()
    assert refused == {"documents": [[]], "metadatas": [[]], "distances": [[]]}


async def test_a_retry_reformulates_when_nothing_is_relevant(kb: KnowledgeBase) -> None:
    # the LLM takes a while, well within the budget: nothing is cut
    llm = SlowLLM(["ducks ponds rivers lakes"], pause=0.05)
    engine = make_engine(kb, llm, search_timeout=5.0, retrieval={"max_rounds": 2})
    async with asgi_client(engine) as c:
        response = await c.post("/search", json={"queries": ["xylophone marimba"]})
    texts = _results(response, 1)["documents"][0]
    assert len(texts) == 1 and DUCKS in texts[0]  # round 2's relevant chunk, not a fallback
    assert len(llm.prompts) == 1 and "xylophone marimba" in llm.prompts[0]


async def test_an_llm_failure_is_a_502_not_a_500(kb: KnowledgeBase) -> None:
    for failure in (UpstreamError("HTTP 500: overloaded"), RuntimeError("connection reset")):
        async with asgi_client(make_engine(kb, ScriptedLLM([failure]))) as c:
            response = await c.post("/search", json={"messages": HISTORY})
        assert_error(response, 502, "upstream_error", "provider failed")
        assert "overloaded" not in response.text and "reset" not in response.text


# --- the budget ----------------------------------------------------------------------------------
async def test_out_of_time_the_retry_is_cut_short(kb: KnowledgeBase) -> None:
    llm = SlowLLM(["ducks ponds rivers lakes"], pause=5.0)
    engine = make_engine(kb, llm, search_timeout=0.3, retrieval={"max_rounds": 2})
    async with asgi_client(engine) as c:
        started = time.monotonic()
        response = await c.post("/search", json={"queries": ["xylophone marimba"]})
        elapsed = time.monotonic() - started
    body = _results(response, 1)
    assert llm.calls == 1  # the reformulation began, and was given up
    assert 0.25 < elapsed < 2.0, elapsed
    assert len(body["documents"][0]) == 3  # what round 1 found: the fallback's best hits


async def test_out_of_time_the_rewrite_leaves_the_last_message(kb: KnowledgeBase) -> None:
    llm = SlowLLM(["Who bought Viaweb in 1998"], pause=5.0)
    async with asgi_client(make_engine(kb, llm, search_timeout=0.3)) as c:
        started = time.monotonic()
        response = await c.post("/search", json={"messages": HISTORY})
        elapsed = time.monotonic() - started
    texts = _results(response, 1)["documents"][0]
    assert llm.calls == 1 and elapsed < 2.0, elapsed
    assert len(texts) == 1 and VIAWEB in texts[0]  # searched with the last message as it is


# --- auth ----------------------------------------------------------------------------------------
async def test_bearer_key_required(kb: KnowledgeBase) -> None:
    body = {"queries": ["Who bought Viaweb?"]}
    async with asgi_client(make_engine(kb, keys=["the-key"])) as c:
        for path in ("/search", "/v1/search"):
            ok = await assert_needs_key(c, "POST", path, "the-key", json=body)
            # with keys, links are signed, as in chat completions' sources
            assert "sig=" in ok.json()["metadatas"][0][0]["url"]


# --- bad input -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("body", "status", "words", "param"),
    [
        (b'{"queries": [', 400, ["not valid JSON"], None),
        (b"hello", 400, ["not valid JSON"], None),
        (b'["ducks"]', 400, ["JSON object"], None),
        (b"{}", 400, ["'queries'", "'messages'"], None),
        (b'{"k": 3, "collection_names": ["kb"]}', 400, ["'queries'", "'messages'"], None),
        (b'{"queries": []}', 400, ["'queries' is empty"], "queries"),
        (b'{"queries": ["ducks", "  "]}', 400, ["queries[1] is empty"], "queries[1]"),
        (b'{"queries": "ducks"}', 400, ["queries", "list"], "queries"),
        (b'{"queries": [42]}', 400, ["queries[0]", "string"], "queries[0]"),
        (b'{"queries": ["d"], "k": 0}', 400, ["k:", "greater than or equal to 1"], "k"),
        (b'{"queries": ["d"], "k": -3}', 400, ["greater than or equal to 1"], "k"),
        (b'{"queries": ["d"], "k": 51}', 400, ["k:", "less than or equal to 50"], "k"),
        (b'{"queries": ["d"], "k": 1000000000}', 400, ["less than or equal to 50"], "k"),
        (b'{"queries": ["d"], "k": "5"}', 400, ["k:", "integer"], "k"),
        (b'{"queries": ["d"], "k": 2.5}', 400, ["k:", "integer"], "k"),
        (b'{"queries": ["d"], "k": true}', 400, ["k:", "integer"], "k"),
        (b'{"queries": ["d"], "k": null}', 400, ["k:", "integer"], "k"),
        (
            b'{"queries": ["d"], "collection_names": "kb"}',
            400,
            ["collection_names", "list"],
            "collection_names",
        ),
        (
            b'{"queries": ["d"], "collection_names": []}',
            400,
            ["'collection_names' is empty", "'kb'"],
            "collection_names",
        ),
        (
            b'{"queries": ["d"], "collection_names": ["kb", "nope"]}',
            404,
            ["'nope'", "GET /v1/models"],
            "collection_names[1]",
        ),
        (
            b'{"queries": ["d"], "collection_names": ["../../etc"]}',
            404,
            ["'../../etc'", "GET /v1/models"],
            "collection_names[0]",
        ),
        (b'{"messages": []}', 400, ["'messages' is empty"], "messages"),
        (b'{"messages": "hi"}', 400, ["messages"], "messages"),
        (
            b'{"messages": [{"role": "user", "content": "hi"},'
            b' {"role": "assistant", "content": "hello"}]}',
            400,
            ["last message must come from the user"],
            "messages[1].role",
        ),
        (
            b'{"messages": [{"role": "wizard", "content": "hi"}]}',
            400,
            ["'wizard'"],
            "messages[0].role",
        ),
        (b'{"messages": [{"role": "user", "content": " "}]}', 400, ["empty"], None),
    ],
)
async def test_bad_input_is_a_clear_4xx(
    client: httpx.AsyncClient, body: bytes, status: int, words: list[str], param: str | None
) -> None:
    response = await post_raw(client, "/search", body)
    kind = "not_found_error" if status == 404 else "invalid_request_error"
    assert_error(response, status, kind, *words, param=param)


async def test_too_many_queries_and_collections(client: httpx.AsyncClient) -> None:
    many = await client.post("/search", json={"queries": ["ducks"] * 21})
    assert_error(many, 400, "invalid_request_error", "at most 20", param="queries")
    named = await client.post(
        "/search", json={"queries": ["ducks"], "collection_names": ["kb"] * 21}
    )
    assert_error(named, 400, "invalid_request_error", "at most 20", param="collection_names")


async def test_sizes_over_the_limits_are_413(kb: KnowledgeBase) -> None:
    async with asgi_client(make_engine(kb, max_message_chars=100, max_body_bytes=5000)) as c:
        long = await c.post("/search", json={"queries": ["ducks", "x" * 101]})
        assert_error(long, 413, "invalid_request_error", "101 characters", param="queries[1]")
        said = await c.post("/search", json={"messages": [{"role": "user", "content": "y" * 101}]})
        assert_error(said, 413, "invalid_request_error", "101 characters")
        big = await c.post("/search", json={"queries": ["ducks"], "pad": "z" * 6000})
        assert_error(big, 413, "invalid_request_error", "5000 bytes")


async def test_a_missing_default_knowledge_base_is_404(kb: KnowledgeBase) -> None:
    async with asgi_client(make_engine(kb, store={"collection": "handbook"})) as c:
        response = await c.post("/search", json={"queries": ["ducks"]})
    assert_error(
        response, 404, "not_found_error", "'handbook'", "collection_names", "GET /v1/models"
    )


async def test_unknown_fields_are_ignored_and_get_is_405(client: httpx.AsyncClient) -> None:
    response = await client.post(
        "/search",
        json={
            "queries": ["Who bought Viaweb?"],
            "retrieval_query_generation_prompt_template": "### Task: ...",
        },
    )
    assert response.status_code == 200, response.text
    wrong = await client.get("/search")
    assert_error(wrong, 405, "invalid_request_error")
    assert wrong.headers["allow"] == "POST"


async def test_the_schema_documents_the_route(kb: KnowledgeBase) -> None:
    from citeflow.server import create_app

    schema = create_app(make_engine(kb)).openapi()
    operation = schema["paths"]["/search"]["post"]
    ref = operation["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    assert ref.endswith("/SearchRequest")
    assert "/v1/search" not in schema["paths"]  # the alias is not listed twice
    assert json.dumps(schema["components"]["schemas"]["SearchRequest"]).count("collection_names")
