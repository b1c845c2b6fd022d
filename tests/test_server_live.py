"""A live uvicorn server on 127.0.0.1: the official OpenAI SDK as client, incremental delivery,
disconnects cancelling the run, failures mid-stream."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from citeflow.citations.markers import cited_numbers
from citeflow.knowledge_base import KnowledgeBase
from tests.server_helpers import (
    ANSWER,
    CHAT,
    LONG_ANSWER,
    QUESTION,
    STREAM,
    PacedLLM,
    content_of,
    live_server,
    make_engine,
    parse_sse,
    wait_until,
)


@pytest.fixture
def server(kb: KnowledgeBase) -> Iterator[str]:
    """The base URL of a live server over the test knowledge base."""
    with live_server(make_engine(kb, PacedLLM([ANSWER]))) as url:
        yield url


def _sdk(server: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{server}/v1", api_key="unused", max_retries=0)


async def _ask(client: openai.AsyncOpenAI, model: str = "citeflow-kb", **options: Any) -> Any:
    """The SDK's chat completion of `QUESTION` by ``model``, with ``options`` (e.g. ``stream``)."""
    return await client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": QUESTION}], **options
    )


async def test_openai_sdk_non_streaming(server: str) -> None:
    async with _sdk(server) as client:
        models = await client.models.list()
        assert [m.id for m in models.data] == ["citeflow-kb"]
        completion = await _ask(client)
        content = completion.choices[0].message.content or ""
        assert cited_numbers(content) == [1, 2]
        assert completion.usage is not None and completion.usage.total_tokens > 0
        extra: dict[str, Any] = completion.model_extra or {}
        assert [s["metadata"][0]["source"] for s in extra["sources"]] == ["viaweb#1", "ducks#2"]
        with pytest.raises(openai.NotFoundError) as info:
            await _ask(client, model="citeflow-nope")
        assert info.value.code == "model_not_found"


async def test_openai_sdk_streaming(server: str) -> None:
    async with _sdk(server) as client:
        stream = await _ask(
            client,
            stream=True,
            stream_options={"include_usage": True},
            tools=[{"type": "function", "function": {"name": "web_search", "parameters": {}}}],
        )
        text, sources, usage = "", [], None
        async for chunk in stream:
            event = (chunk.model_extra or {}).get("event")
            if event and event["type"] == "source":
                sources.append(event["data"]["metadata"][0]["source"])
            if chunk.choices and chunk.choices[0].delta.content:
                text += chunk.choices[0].delta.content
            usage = chunk.usage or usage
        assert cited_numbers(text) == [1, 2]
        assert sources == ["viaweb#1", "ducks#2"]
        assert usage is not None and usage.completion_tokens > 0


async def test_answer_is_delivered_incrementally(kb: KnowledgeBase) -> None:
    llm = PacedLLM([LONG_ANSWER], delay=0.005)
    with live_server(make_engine(kb, llm)) as url:
        async with _sdk(url) as client:
            started = time.monotonic()
            stream = await _ask(client, stream=True)
            arrivals: list[float] = []
            async for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    arrivals.append(time.monotonic() - started)
    # ~210 words at 5 ms each: the first sentence arrives long before the last one
    assert len(arrivals) >= 20
    assert arrivals[0] < 0.5 * arrivals[-1]
    assert arrivals[-1] - arrivals[0] > 0.6


async def test_client_disconnect_cancels_the_run(kb: KnowledgeBase) -> None:
    llm = PacedLLM([LONG_ANSWER], delay=0.05)  # ~10 s if never cancelled
    with live_server(make_engine(kb, llm)) as url:
        async with (
            httpx.AsyncClient(base_url=url) as client,
            client.stream("POST", "/v1/chat/completions", json=STREAM) as response,
        ):
            async for line in response.aiter_lines():
                if '"content":"Yahoo' in line:
                    break
        # the response is closed: the server must stop iterating the LLM promptly
        await wait_until(llm.closed_early.is_set, within=1.0)
        pieces = llm.pieces
        await asyncio.sleep(0.3)
        assert llm.pieces == pieces  # no longer iterated
        assert not llm.finished.is_set()


async def test_non_streaming_disconnect_cancels_the_run(kb: KnowledgeBase) -> None:
    llm = PacedLLM([LONG_ANSWER], delay=0.05)
    with live_server(make_engine(kb, llm)) as url:
        async with httpx.AsyncClient(base_url=url) as client:
            with pytest.raises(httpx.ReadTimeout):
                await client.post("/v1/chat/completions", json=CHAT, timeout=0.5)
        await wait_until(llm.closed_early.is_set, within=1.0)
        assert not llm.finished.is_set()


async def test_llm_failure_mid_stream_ends_with_error_then_done(kb: KnowledgeBase) -> None:
    llm = PacedLLM([LONG_ANSWER], delay=0.01, fail_after=8)
    with live_server(make_engine(kb, llm)) as url:
        async with httpx.AsyncClient(base_url=url, timeout=5) as client:
            response = await client.post("/v1/chat/completions", json=STREAM)
        items = parse_sse(response.text)
        assert items[-1] == "[DONE]"
        assert items[-2]["error"]["type"] == "upstream_error"
        assert items[-2]["error"]["message"].startswith("the LLM provider failed")
        assert "upstream went away" not in response.text  # that is for the server log
        assert "Yahoo bought Viaweb" in content_of(items)  # what came before the failure
        # the SDK surfaces the error line as an exception
        async with _sdk(url) as client2:
            stream = await _ask(client2, stream=True)
            with pytest.raises(openai.APIError, match="the LLM provider failed"):
                async for _ in stream:
                    pass
