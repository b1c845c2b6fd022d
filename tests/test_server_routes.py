"""The HTTP routes through ASGI: models, answers with sources, every bad input, auth, tasks."""

from __future__ import annotations

import json
import logging
from typing import Any

import httpx
import pytest

from citeflow.api.engine import Engine
from citeflow.citations.markers import cited_numbers
from citeflow.knowledge_base import KnowledgeBase
from citeflow.store import Store
from citeflow.testing.llm import ScriptedLLM
from tests.server_helpers import (
    ANSWER,
    QUESTION,
    CountingEmbedding,
    add_collection,
    asgi_client,
    assert_error,
    assert_needs_key,
    content_of,
    events_of,
    make_engine,
    parse_sse,
    post_raw,
)


def _tools(count: int = 36) -> list[dict[str, Any]]:
    """``count`` function tools, as Open WebUI sends its built-in ones."""
    parameters = {"type": "object", "properties": {"q": {"type": "string"}}}
    function = {"description": "An Open WebUI built-in tool.", "parameters": parameters}
    return [
        {"type": "function", "function": {"name": f"tool_{i}", **function}} for i in range(count)
    ]


def _chat(content: str = QUESTION, **extra: Any) -> dict[str, Any]:
    return {"model": "citeflow-kb", "messages": [{"role": "user", "content": content}], **extra}


@pytest.fixture
async def llm() -> ScriptedLLM:
    return ScriptedLLM([ANSWER])


@pytest.fixture
def engine(kb: KnowledgeBase, llm: ScriptedLLM) -> Engine:
    return make_engine(kb, llm)


# --- models and health ---------------------------------------------------------------------------
async def test_models_list_one_model_per_collection(
    kb: KnowledgeBase, client: httpx.AsyncClient
) -> None:
    add_collection(kb, "notes", {"n1": "A note."})
    response = await client.get("/v1/models")
    assert response.status_code == 200
    body = response.json()
    assert body["object"] == "list"
    assert [m["id"] for m in body["data"]] == ["citeflow-kb", "citeflow-notes"]
    assert body["data"][0]["object"] == "model" and body["data"][0]["owned_by"] == "citeflow"
    assert (await client.get("/v1/models/citeflow-kb")).json()["id"] == "citeflow-kb"
    assert_error(await client.get("/v1/models/citeflow-nope"), 404, "not_found_error", "nope")


async def test_health_needs_no_key(kb: KnowledgeBase, llm: ScriptedLLM) -> None:
    async with asgi_client(make_engine(kb, llm, keys=["k1"])) as c:
        assert (await c.get("/health")).json() == {"status": "ok"}
        ready = await c.get("/health/ready")
        # open to anyone: its status only (no store path, no provider names or versions)
        assert ready.status_code == 200 and ready.json() == {"status": "ready"}
        assert_error(await c.get("/v1/models"), 401, "authentication_error", "Bearer")


async def test_unready_health_says_only_so(kb: KnowledgeBase, llm: ScriptedLLM) -> None:
    class UnreachableStore(Store):
        def collections(self) -> list[str]:
            raise OSError("/srv/secret/qdrant: input/output error")

    engine = make_engine(kb, llm)
    engine.store = UnreachableStore(kb.store.engine)
    async with asgi_client(engine) as c:
        ready = await c.get("/health/ready")
    assert ready.status_code == 503 and ready.json() == {"status": "unavailable"}


# --- answers -------------------------------------------------------------------------------------
async def test_non_streaming_answer_with_sources_and_usage(client: httpx.AsyncClient) -> None:
    response = await client.post("/v1/chat/completions", json=_chat())
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["object"] == "chat.completion" and body["model"] == "citeflow-kb"
    content = body["choices"][0]["message"]["content"]
    assert cited_numbers(content) == [1, 2]
    assert body["choices"][0]["finish_reason"] == "stop"
    sources = body["sources"]
    assert "Yahoo bought Viaweb" in sources[0]["document"][0]
    assert "ponds" in sources[1]["document"][0]
    assert [s["metadata"][0]["name"] for s in sources] == ["viaweb.txt", "ducks.txt"]
    assert [s["metadata"][0]["source"] for s in sources] == ["viaweb#1", "ducks#2"]
    assert sources[0]["source"]["url"] == "http://testserver/v1/documents/kb/viaweb/file"
    usage = body["usage"]
    assert usage["prompt_tokens"] > 10 and usage["completion_tokens"] > 5
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert "**Sources**" not in content  # the Markdown list is off by default


async def test_streaming_answer(client: httpx.AsyncClient) -> None:
    response = await client.post("/v1/chat/completions", json=_chat(stream=True))
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    items = parse_sse(response.text)
    assert items[-1] == "[DONE]"
    statuses = events_of(items, "status")
    assert statuses[0]["description"].startswith("Searching")
    assert statuses[-1] == {"description": "Done", "done": True}
    assert not any(s["done"] for s in statuses[:-1])
    content = content_of(items)
    assert cited_numbers(content) == [1, 2]
    sources = events_of(items, "source")
    assert [s["metadata"][0]["source"] for s in sources] == ["viaweb#1", "ducks#2"]
    # each source arrives before the first text citing it
    kinds = [
        "source" if "event" in i and i["event"]["type"] == "source" else content_of([i])
        for i in items[:-1]
    ]
    assert kinds.index("source") < next(i for i, k in enumerate(kinds) if "[1]" in k)
    assert items[-2]["choices"][0]["finish_reason"] == "stop" and items[-2]["usage"]


async def test_tools_and_sampling_parameters_are_accepted(client: httpx.AsyncClient) -> None:
    request = _chat(
        stream=True,
        tools=_tools(),
        tool_choice="auto",
        temperature=0.3,
        top_p=0.9,
        max_tokens=200,
        stream_options={"include_usage": True},
        user="someone",
    )
    response = await client.post("/v1/chat/completions", json=request)
    assert response.status_code == 200, response.text
    items = parse_sse(response.text)
    assert cited_numbers(content_of(items)) == [1, 2]
    assert items[-2]["choices"] == [] and items[-2]["usage"]["total_tokens"] > 0


async def test_multi_turn_history_reaches_the_workflow(kb: KnowledgeBase) -> None:
    llm = ScriptedLLM(["Who bought Viaweb", "Yahoo bought Viaweb in 1998 [1]."])
    async with asgi_client(make_engine(kb, llm)) as c:
        messages = [
            {"role": "system", "content": "You are helpful."},
            {"role": "user", "content": "Tell me about Viaweb."},
            {"role": "assistant", "content": "Viaweb made online store software [1]."},
            {"role": "user", "content": [{"type": "text", "text": "Who bought it?"}]},
        ]
        response = await c.post(
            "/v1/chat/completions", json={"model": "citeflow-kb", "messages": messages}
        )
    assert response.status_code == 200, response.text
    condense_prompt = llm.prompts[0]
    assert "Tell me about Viaweb." in condense_prompt
    assert "Viaweb made online store software." in condense_prompt  # markers stripped
    assert "Who bought it?" in condense_prompt
    assert "You are helpful" not in condense_prompt
    assert "[1]" in response.json()["choices"][0]["message"]["content"]


async def test_markdown_source_list_per_request(client: httpx.AsyncClient) -> None:
    asked = await client.post("/v1/chat/completions", json=_chat(citeflow={"source_list": True}))
    content = asked.json()["choices"][0]["message"]["content"]
    assert "\n\n**Sources**\n\n1. viaweb.txt: “Yahoo bought Viaweb in 1998" in content
    response = await client.post(
        "/v1/chat/completions",
        json=_chat(stream=True),
        headers={"X-Citeflow-Source-List": "true"},
    )
    assert "**Sources**" in content_of(parse_sse(response.text))


async def test_open_webui_task_is_answered_without_retrieval(kb: KnowledgeBase) -> None:
    llm = ScriptedLLM(['Here you go: {"title": "🦆 Ducks and Viaweb"} Enjoy!'])
    embed = CountingEmbedding()
    async with asgi_client(make_engine(kb, llm, embed_model=embed)) as c:
        task = (
            "### Task:\nGenerate a concise title for the chat.\n"
            '### Output:\nJSON format: { "title": ... }'
        )
        response = await c.post("/v1/chat/completions", json=_chat(task, tools=_tools(3)))
        streamed = await c.post("/v1/chat/completions", json=_chat(task, stream=True))
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["choices"][0]["message"]["content"] == '{"title": "🦆 Ducks and Viaweb"}'
    assert "sources" not in body
    assert json.loads(content_of(parse_sse(streamed.text))) == {"title": "🦆 Ducks and Viaweb"}
    assert embed.queries == 0  # no retrieval
    assert len(llm.prompts) == 2 and "Generate a concise title" in llm.prompts[0]


# --- failures ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("body", "words"),
    [
        (b'{"model": "citeflow-kb", "messages": [', ["not valid JSON"]),
        (b"[1, 2]", ["JSON object"]),
        (b'{"model": "citeflow-kb"}', ["messages", "required"]),
        (b'{"model": "citeflow-kb", "messages": []}', ["'messages' is empty"]),
        (b'{"model": "citeflow-kb", "messages": "hi"}', ["messages"]),
        (b'{"messages": [{"role": "user", "content": "hi"}]}', ["model"]),
        (
            b'{"model": "citeflow-kb", "messages": [{"role": "wizard", "content": "hi"}]}',
            ["messages[0].role", "'wizard'"],
        ),
        (
            b'{"model": "citeflow-kb", "messages": [{"role": "user", "content": "hi"},'
            b' {"role": "assistant", "content": "hello"}]}',
            ["last message must come from the user"],
        ),
        (
            b'{"model": "citeflow-kb", "messages": [{"role": "user", "content": "  "}]}',
            ["empty"],
        ),
        (
            b'{"model": "citeflow-kb", "messages": [{"role": "user", "content": "hi"}],'
            b' "citeflow": {"nonsense": 1}}',
            ["citeflow.nonsense"],
        ),
    ],
)
async def test_bad_requests_are_openai_errors(
    client: httpx.AsyncClient, body: bytes, words: list[str]
) -> None:
    response = await post_raw(client, "/v1/chat/completions", body)
    assert_error(response, 400, "invalid_request_error", *words)


async def test_param_names_the_offending_field(client: httpx.AsyncClient) -> None:
    bad_role = {"model": "citeflow-kb", "messages": [{"role": "robot", "content": "x"}]}
    response = await client.post("/v1/chat/completions", json=bad_role)
    assert response.json()["error"]["param"] == "messages[0].role"
    response = await client.post("/v1/chat/completions", content=b"{")
    assert response.json()["error"]["code"] == "invalid_json"


async def test_huge_message_is_413(kb: KnowledgeBase, llm: ScriptedLLM) -> None:
    async with asgi_client(make_engine(kb, llm, max_message_chars=1000)) as c:
        response = await c.post("/v1/chat/completions", json=_chat("x" * 1001))
        assert_error(response, 413, "invalid_request_error", "1001 characters", "1000")
        assert response.json()["error"]["param"] == "messages[0].content"
    async with asgi_client(make_engine(kb, llm, max_body_bytes=2000)) as c:
        response = await c.post("/v1/chat/completions", json=_chat("x" * 3000))
        assert_error(response, 413, "invalid_request_error", "2000 bytes")


async def test_unknown_model_is_404(client: httpx.AsyncClient) -> None:
    response = await client.post("/v1/chat/completions", json={**_chat(), "model": "gpt-4o"})
    assert_error(response, 404, "not_found_error", "'gpt-4o'", "citeflow-kb")
    assert response.json()["error"]["code"] == "model_not_found"


async def test_empty_collection_is_a_clear_error(
    kb: KnowledgeBase, client: httpx.AsyncClient
) -> None:
    for doc in kb.documents():
        kb.store.delete_document("kb", doc.doc_id)
    response = await client.post("/v1/chat/completions", json=_chat(stream=True))
    assert_error(response, 400, "invalid_request_error", "no documents", "citeflow ingest")


async def test_bearer_keys(kb: KnowledgeBase, llm: ScriptedLLM) -> None:
    async with asgi_client(make_engine(kb, llm, keys=["first-key", "second-key"])) as c:
        await assert_needs_key(c, "GET", "/v1/models", "first-key")
        await assert_needs_key(c, "POST", "/v1/chat/completions", "second-key", json=_chat())
        basic = await c.get("/v1/models", headers={"Authorization": "Basic Zmlyc3Qta2V5"})
        assert basic.status_code == 401


async def test_an_unknown_route_is_an_openai_error(client: httpx.AsyncClient) -> None:
    assert_error(await client.get("/v1/nothing"), 404, "not_found_error")


# --- malformed JSON that json.loads accepts ------------------------------------------------------
def _raw(content_json: str, **extra: str) -> bytes:
    """A chat request whose user content is ``content_json`` (a JSON string literal, as sent)."""
    head = '{"model": "citeflow-kb", "messages": [{"role": "user", "content": '
    fields = "".join(f', "{k}": {v}' for k, v in extra.items())
    # a surrogate in the text: its raw (invalid) UTF-8 bytes
    return (head + content_json + "}]" + fields + "}").encode("utf-8", "surrogatepass")


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize(
    ("body", "param"),
    [
        (_raw('"Who bought Viaweb? \\ud800"'), "messages[0].content"),
        (_raw('"tail \\udfff"'), "messages[0].content"),
        (_raw('"x"', tools='[{"name": "\\ud800"}]'), "tools[0].name"),
        (_raw('"x"', user='{"\\udc00": 1}'), "user"),
        (_raw('"raw UTF-8 bytes of a surrogate: \ud800"'), "messages[0].content"),
    ],
    ids=["high", "low", "nested", "key", "raw-bytes"],
)
async def test_a_lone_surrogate_is_400_before_any_work(
    kb: KnowledgeBase, body: bytes, param: str, stream: bool
) -> None:
    llm = ScriptedLLM([ANSWER])
    embed = CountingEmbedding()
    if stream:
        body = body[:-1] + b', "stream": true}'
    async with asgi_client(make_engine(kb, llm, embed_model=embed)) as c:
        response = await post_raw(c, "/v1/chat/completions", body)
    assert_error(response, 400, "invalid_request_error", "lone UTF-16 surrogate", "\\ud", param)
    assert response.json()["error"]["param"] == param
    assert response.json()["error"]["code"] == "invalid_unicode"
    assert embed.queries == 0 and llm.prompts == []  # refused before any work


async def test_a_surrogate_pair_is_fine(client: httpx.AsyncClient) -> None:
    body = _raw('"Where do ducks \\ud83e\\udd86 live?"', stream="true")
    response = await post_raw(client, "/v1/chat/completions", body)
    assert response.status_code == 200, response.text
    assert parse_sse(response.text)[-1] == "[DONE]"


@pytest.mark.parametrize("depth", [65, 1000, 100_000])
async def test_deeply_nested_json_is_400(client: httpx.AsyncClient, depth: int) -> None:
    nested = "[" * depth + "]" * depth
    response = await post_raw(client, "/v1/chat/completions", _raw('"hi"', tools=nested))
    assert_error(response, 400, "invalid_request_error", "more than 64 levels deep")


async def test_reasonable_nesting_and_big_bodies_are_fine(client: httpx.AsyncClient) -> None:
    nested: Any = "leaf"
    for _ in range(27):  # 54 levels, + 5 for the tools list: 59
        nested = {"type": "object", "properties": {"q": nested}}
    request = _chat(tools=[*_tools(), {"type": "function", "function": {"parameters": nested}}])
    response = await client.post("/v1/chat/completions", json=request)
    assert response.status_code == 200, response.text
    # a body past PARSE_INLINE_BYTES is parsed in a worker thread, and checked the same way
    big = _chat(padding="x" * 300_000)
    assert (await client.post("/v1/chat/completions", json=big)).status_code == 200
    big["messages"][0]["content"] = "\ud800"
    response = await post_raw(client, "/v1/chat/completions", json.dumps(big).encode())
    assert_error(response, 400, "invalid_request_error", "surrogate")


# --- 405 and 500 ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("GET", "/v1/chat/completions", "POST"),
        ("PUT", "/v1/collections/kb/documents", "GET, POST"),
        ("POST", "/v1/models", "GET"),
        ("PATCH", "/v1/collections/kb/documents/abc", "DELETE"),
        ("DELETE", "/health", "GET"),
        ("HEAD", "/v1/models", "GET"),
    ],
)
async def test_405_names_the_allowed_methods(
    client: httpx.AsyncClient, method: str, path: str, allow: str
) -> None:
    response = await client.request(method, path)
    if method == "HEAD":  # no body
        assert response.status_code == 405
    else:
        assert_error(response, 405, "invalid_request_error")
    assert response.headers["allow"] == allow


async def test_an_unexpected_error_is_a_generic_500_in_the_access_log(
    kb: KnowledgeBase, llm: ScriptedLLM, caplog: pytest.LogCaptureFixture
) -> None:
    engine = make_engine(kb, llm)

    async def broken() -> list[str]:
        raise RuntimeError("internal detail /srv/secret")

    engine.collections = broken  # type: ignore[method-assign]
    with caplog.at_level(logging.INFO, logger="citeflow.server"):
        async with asgi_client(engine, raise_errors=False) as c:
            response = await c.get("/v1/models")
    assert_error(response, 500, "server_error", "internal server error")
    assert "secret" not in response.text
    access = [r for r in caplog.records if r.getMessage() == "GET /v1/models 500"]
    assert len(access) == 1 and access[0].__dict__["status"] == 500
    assert any(r.exc_info and "secret" in str(r.exc_info[1]) for r in caplog.records)


async def test_a_lone_surrogate_from_the_provider_reaches_the_client_escaped(
    kb: KnowledgeBase,
) -> None:
    """A provider's answer may hold half a surrogate pair (split across two streamed chunks):
    the answer still goes out, as valid UTF-8 with the JSON escape of that code unit."""
    llm = ScriptedLLM(["Ducks \ud83e live near \udd86 ponds [1]."])
    async with asgi_client(make_engine(kb, llm)) as c:
        plain = await c.post("/v1/chat/completions", json=_chat("Where do ducks live?"))
        streamed = await c.post(
            "/v1/chat/completions", json=_chat("Where do ducks live?", stream=True)
        )
    assert plain.status_code == 200, plain.text
    plain.content.decode("utf-8")  # strict: valid UTF-8
    content = plain.json()["choices"][0]["message"]["content"]
    assert content == "Ducks \ud83e live near \udd86 ponds [1]."
    assert "\\ud83e" in plain.text
    streamed.content.decode("utf-8")
    items = parse_sse(streamed.text)
    assert items[-1] == "[DONE]" and items[-2]["choices"][0]["finish_reason"] == "stop"
    assert content_of(items) == content
