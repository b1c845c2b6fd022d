"""Server test helpers: a paced LLM fake, an engine over fakes, SSE parsing, a live server."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncGenerator, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.events import BaseEvent
from llama_index.core.llms import ChatMessage, ChatResponse
from llama_index.core.schema import Document
from pydantic import Field, SecretStr

from citeflow.api.engine import Engine
from citeflow.knowledge_base import KnowledgeBase
from citeflow.server import create_app
from citeflow.testing.embedding import HashEmbedding
from citeflow.testing.llm import ScriptedLLM
from citeflow.testing.openai_server import FakeOpenAIServer
from citeflow.testing.serving import serve_in_thread

#: a question two of the test knowledge base's documents answer, and an answer citing both
QUESTION = "Who bought Viaweb, and where do ducks live?"
ANSWER = "Yahoo bought Viaweb in 1998 [1]. Ducks live near ponds [2]."
#: many sentences, so that a paced stream lasts a while (each its own: a model repeating itself
#: is cut off)
LONG_ANSWER = "Yahoo bought Viaweb in 1998 [1]. " + " ".join(
    f"Ducks live near ponds and rivers ({i}) [2]. Yahoo bought Viaweb ({i}) [1]."
    for i in range(1, 16)
)


class PacedLLM(ScriptedLLM):
    """A `ScriptedLLM` whose async chat stream waits ``delay`` seconds per piece (and raises
    ConnectionError after ``fail_after`` pieces of a stream; 0: never).

    Records whether a stream was abandoned before its end (``closed_early``) or ran to it
    (``finished``), and how many pieces were streamed over all calls (``pieces``), so tests can
    see a cancelled run stop iterating the LLM.
    """

    pieces: int = 0
    fail_after: int = 0
    closed_early: threading.Event = Field(default_factory=threading.Event, exclude=True)
    finished: threading.Event = Field(default_factory=threading.Event, exclude=True)

    async def astream_chat(  # type: ignore[override]
        self, messages: Sequence[ChatMessage], **kwargs: Any
    ) -> AsyncGenerator[ChatResponse, None]:
        prompt = self.messages_to_prompt(messages)
        stream = await self.astream_complete(prompt, formatted=True)

        async def gen() -> AsyncGenerator[ChatResponse, None]:
            done = False
            streamed = 0
            try:
                async for piece in stream:
                    self.pieces += 1
                    yield ChatResponse(
                        message=ChatMessage(role="assistant", content=piece.text),
                        delta=piece.delta,
                    )
                    streamed += 1
                    if streamed == self.fail_after:
                        raise ConnectionError("upstream went away")
                done = True
                self.finished.set()
            finally:
                if not done:
                    self.closed_early.set()

        return gen()


class CountingEmbedding(HashEmbedding):
    """A `HashEmbedding` that counts query embeddings (retrievals)."""

    queries: int = 0

    def _get_query_embedding(self, query: str) -> list[float]:
        self.queries += 1
        return super()._get_query_embedding(query)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        self.queries += 1
        return await super()._aget_query_embedding(query)


def chat_request(
    content: str = "Who bought Viaweb?", *, model: str = "citeflow-kb", stream: bool = False
) -> dict[str, Any]:
    """An OpenAI chat completion request body for ``model`` (the test knowledge base), one user
    message."""
    return {
        "model": model,
        "messages": [{"role": "user", "content": content}],
        "stream": stream,
    }


#: `QUESTION` as a chat completion request, plain and streamed
CHAT = chat_request(QUESTION)
STREAM = chat_request(QUESTION, stream=True)


def assert_error(
    response: httpx.Response, status: int, kind: str, *words: str, **fields: str | None
) -> None:
    """``response`` is an OpenAI error body of ``status`` and ``kind`` whose message holds every
    one of ``words`` (and whose other fields, e.g. ``param`` or ``code``, are ``fields``)."""
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["type"] == kind
    for word in words:
        assert word in body["error"]["message"], body["error"]["message"]
    for name, value in fields.items():  # None: not checked
        assert value is None or body["error"][name] == value, body["error"]


async def post_raw(client: httpx.AsyncClient, path: str, body: bytes | str) -> httpx.Response:
    """POST ``body`` as it is, as JSON (bodies ``json=`` would not send)."""
    return await client.post(path, content=body, headers={"content-type": "application/json"})


async def assert_needs_key(
    client: httpx.AsyncClient, method: str, path: str, key: str, **request: Any
) -> httpx.Response:
    """``method path`` (with ``request``, e.g. ``json=``) is refused without a key and with a
    wrong one (401s that say why), and answered (200) with ``key``: that answer."""
    missing = await client.request(method, path, **request)
    assert_error(missing, 401, "authentication_error", "Authorization: Bearer")
    assert missing.headers["www-authenticate"] == "Bearer"
    wrong = await client.request(method, path, headers={"Authorization": "Bearer nope"}, **request)
    assert_error(wrong, 401, "authentication_error", "invalid API key", code="invalid_api_key")
    right = await client.request(
        method, path, headers={"Authorization": f"Bearer {key}"}, **request
    )
    assert right.status_code == 200, right.text
    return right


def asgi_client(
    app: Engine | FastAPI, *, address: str = "127.0.0.1", raise_errors: bool = True, **headers: str
) -> httpx.AsyncClient:
    """An HTTP client calling ``app`` (or the app over an engine) in-process (no socket), as a
    client at ``address``; with ``raise_errors=False`` an exception the app lets through is a
    500 response, as a real server sends, not raised in the test."""
    transport = httpx.ASGITransport(
        app=create_app(app) if isinstance(app, Engine) else app,
        client=(address, 40000),
        raise_app_exceptions=raise_errors,
    )
    return httpx.AsyncClient(transport=transport, base_url="http://testserver", headers=headers)


def make_engine(
    kb: KnowledgeBase,
    llm: ScriptedLLM | None = None,
    *,
    embed_model: BaseEmbedding | None = None,
    keys: Sequence[str] = (),
    retrieval: dict[str, Any] | None = None,
    store: dict[str, Any] | None = None,
    **server: Any,
) -> Engine:
    """An engine over the test knowledge base (collection ``kb``) with a fake LLM (by default one
    that answers "OK"); ``keys``: the API keys it takes (none: an open server); ``retrieval``,
    ``store`` and ``server``: fields of `RetrievalSettings`, `StoreSettings` and `ServerSettings`
    changed."""
    if keys:
        server["api_keys"] = [SecretStr(key) for key in keys]
    return Engine(
        kb.settings.updated(server=server, retrieval=retrieval or {}, store=store or {}),
        store=kb.store,
        embed_model=embed_model or kb.embed_model,
        llm=llm or ScriptedLLM(),
    )


def add_collection(kb: KnowledgeBase, name: str, docs: dict[str, str]) -> KnowledgeBase:
    """The knowledge base ``name`` next to ``kb``, with ``docs`` (text by id) added, each from
    the file ``<id>.txt``."""
    other = KnowledgeBase(kb.settings, store=kb.store, embed_model=kb.embed_model, collection=name)
    other.add_documents(
        [
            Document(id_=doc_id, text=text, metadata={"file_name": f"{doc_id}.txt"})
            for doc_id, text in docs.items()
        ]
    )
    return other


def upstream_engine(
    kb: KnowledgeBase, upstream: FakeOpenAIServer, **groups: dict[str, Any]
) -> Engine:
    """An engine over the test knowledge base whose LLM is the real OpenAI client, sent through
    aiohttp as ``citeflow serve`` builds it, against the fake OpenAI server (no retries, no LLM
    grading); ``groups`` change the knowledge base's settings (e.g. ``llm={"timeout": 1}``)."""
    from citeflow.providers.llm import build_llm

    changes: dict[str, dict[str, Any]] = {
        "llm": {"provider": "openai", "model": "chat-model"},
        "openai": {"base_url": upstream.openai_base_url, "api_key": SecretStr("k")},
        "retrieval": {"grader": "none"},
    }
    for name, values in groups.items():
        changes[name] = {**changes.get(name, {}), **values}
    updated = kb.settings.updated(**changes)
    llm = build_llm(updated, max_retries=0, aiohttp=True)
    return Engine(updated, store=kb.store, embed_model=kb.embed_model, llm=llm)


def parse_sse(text: str) -> list[Any]:
    """SSE text → a list of data payloads (dicts, or the string ``"[DONE]"``) and comments."""
    out: list[Any] = []
    for block in text.split("\n\n"):
        if not block.strip():
            continue
        assert block.count("\n") == 0, f"one line per event expected: {block!r}"
        if block.startswith(":"):
            out.append(block)
        else:
            assert block.startswith("data: "), block
            data = block[len("data: ") :]
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


def content_of(items: Sequence[Any]) -> str:
    """The answer text of parsed SSE items."""
    return "".join(
        item["choices"][0]["delta"].get("content") or ""
        for item in items
        if isinstance(item, dict) and item.get("choices")
    )


def events_of(items: Sequence[Any], kind: str) -> list[dict[str, Any]]:
    """The ``event.data`` of the Open WebUI events of one type."""
    return [
        item["event"]["data"]
        for item in items
        if isinstance(item, dict) and item.get("event", {}).get("type") == kind
    ]


@contextmanager
def live_server(app: Engine | FastAPI) -> Iterator[str]:
    """``app`` (or the app over an engine) served by uvicorn on 127.0.0.1 (a free port) in a
    background thread for the ``with`` block: its base URL."""
    app = create_app(app) if isinstance(app, Engine) else app
    served = serve_in_thread(uvicorn.Config(app, log_level="warning", lifespan="off"))
    try:
        yield f"http://127.0.0.1:{served.port}"
    finally:
        served.stop(timeout=10)


async def wait_until(predicate: Any, within: float = 2.0) -> float:
    """Seconds until ``predicate()`` is true (AssertionError after ``within`` seconds)."""
    started = time.monotonic()
    while not predicate():
        if time.monotonic() - started > within:
            raise AssertionError(f"not true within {within} s")
        await asyncio.sleep(0.01)
    return time.monotonic() - started


class EventRecorder(BaseEventHandler):
    """An instrumentation event handler that keeps the names of the events it sees."""

    seen: list[str] = Field(default_factory=list)

    @classmethod
    def class_name(cls) -> str:
        return "Recorder"

    def handle(self, event: BaseEvent, **kwargs: Any) -> None:
        self.seen.append(event.class_name())


@contextmanager
def listening() -> Iterator[EventRecorder]:
    """An `EventRecorder` attached to LlamaIndex's root dispatcher for the ``with`` block."""
    recorder = EventRecorder(seen=[])
    get_dispatcher().add_event_handler(recorder)
    try:
        yield recorder
    finally:
        get_dispatcher().event_handlers.remove(recorder)
