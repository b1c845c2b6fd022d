"""`AiohttpTransport`: the OpenAI SDK over aiohttp, with httpx's errors, timeouts and loops."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import openai
import pytest
from llama_index.core.llms import ChatMessage

from citeflow.providers.aiohttp_transport import AiohttpTransport, aiohttp_client
from citeflow.providers.llm import build_llm
from citeflow.providers.upstream_errors import as_upstream_error
from citeflow.testing.openai_server import FakeOpenAIServer, Reply
from tests.settings_helpers import llm_settings

USER = [ChatMessage(role="user", content="What did the author work on?")]


async def test_plain_requests_keep_status_headers_and_body(upstream: FakeOpenAIServer) -> None:
    upstream.script(["Hello there."])
    async with aiohttp_client(10.0) as client:
        response = await client.post(
            f"{upstream.openai_base_url}/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
            headers={"Authorization": "Bearer k"},
        )
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    assert response.json()["choices"][0]["message"]["content"] == "Hello there."
    assert upstream.last_request.bearer_token == "k"


@contextlib.asynccontextmanager
async def _llm(server: FakeOpenAIServer, **variables: Any) -> AsyncIterator[Any]:
    """The OpenAI LLM through aiohttp, as ``citeflow serve`` builds it, on ``server``."""
    llm = build_llm(llm_settings(server, **variables), max_retries=0, aiohttp=True)
    try:
        yield llm
    finally:
        await llm._get_aclient().close()


async def _collect_text(llm: Any) -> str:
    return "".join([r.delta or "" async for r in await llm.astream_chat(USER)])


async def test_the_llm_uses_the_transport_and_streams(upstream: FakeOpenAIServer) -> None:
    upstream.script(["One two three."])
    async with _llm(upstream) as llm:
        assert isinstance(llm._get_aclient()._client._transport, AiohttpTransport)
        assert await _collect_text(llm) == "One two three."


async def test_unreachable_upstream_is_a_connection_error() -> None:
    with FakeOpenAIServer() as gone:  # stopped at once: nothing listens on its port any more
        pass
    async with _llm(gone) as llm:
        with pytest.raises(openai.APIConnectionError) as caught:
            await llm.achat(USER)
    assert not isinstance(caught.value, openai.APITimeoutError)
    assert "cannot reach" in as_upstream_error(caught.value).message


async def test_a_slow_upstream_is_a_timeout(upstream: FakeOpenAIServer) -> None:
    upstream.script([Reply(text="late", ttft=2.0)])
    async with _llm(upstream, llm_timeout=0.3) as llm:
        with pytest.raises((openai.APITimeoutError, httpx.TimeoutException)) as caught:
            await _collect_text(llm)
    assert "timed out" in as_upstream_error(caught.value).message


def test_each_event_loop_gets_its_own_session(upstream: FakeOpenAIServer) -> None:
    """``asyncio.run`` per call: a session made in another (closed) loop is not reused."""
    upstream.script(["Second."])
    transport = AiohttpTransport()

    async def session() -> object:
        return transport._current_session()

    first = asyncio.run(session())  # a session left open in a loop that is now closed

    async def ask() -> str:
        async with httpx.AsyncClient(transport=transport) as client:
            assert transport._current_session() is not first
            response = await client.post(
                f"{upstream.openai_base_url}/chat/completions",
                json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
            )
        return str(response.json()["choices"][0]["message"]["content"])

    assert asyncio.run(ask()) == "Second."
    asyncio.run(first.close())  # type: ignore[attr-defined]
