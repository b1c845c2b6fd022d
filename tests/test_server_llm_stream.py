"""The lean streaming chat of the OpenAI/Azure LLMs: what llama-index yields, for less CPU."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import openai
import pytest
from llama_index.core.base.llms.types import ThinkingBlock
from llama_index.core.instrumentation.events.llm import LLMChatInProgressEvent
from llama_index.core.llms import ChatMessage, ChatResponse

from citeflow.errors import UpstreamError
from citeflow.providers.llm import CompatAzureOpenAI, CompatOpenAI, build_llm
from citeflow.providers.openai_stream import observed, stream_text
from citeflow.providers.openai_stream_parsing import chat_responses, server_sent_events, text_deltas
from citeflow.providers.upstream_errors import as_upstream_error
from citeflow.testing.llm import ScriptedLLM
from citeflow.testing.openai_server import FakeOpenAIServer, Reply
from tests.server_helpers import listening
from tests.settings_helpers import llm_settings

USER = [ChatMessage(role="user", content="What did the author work on before college?")]
ANSWER = "Before college the author wrote short stories [1]. He also programmed an IBM 1401 [2]."
USAGE = {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12}


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(always_stream_usage=True) as fake:
        yield fake


def _view(response: ChatResponse) -> tuple[Any, ...]:
    message = response.message
    return (
        response.delta,
        message.role,
        message.content,
        [type(b).__name__ for b in message.blocks],
        message.additional_kwargs,
        response.additional_kwargs,
    )


async def _collect(stream: AsyncIterator[ChatResponse]) -> list[ChatResponse]:
    return [chunk async for chunk in stream]


@pytest.mark.parametrize("aiohttp", [False, True], ids=["httpx", "aiohttp"])
@pytest.mark.parametrize("provider", ["openai", "azure"])
async def test_same_responses_as_llama_index(
    server: FakeOpenAIServer, provider: str, aiohttp: bool
) -> None:
    server.script([ANSWER, ANSWER])
    llm = build_llm(llm_settings(server, provider), max_retries=0, aiohttp=aiohttp)
    assert isinstance(llm, CompatOpenAI | CompatAzureOpenAI)
    ours = await _collect(await llm.astream_chat(USER))
    with listening() as recorder:  # a listener: llama-index's own astream_chat
        theirs = await _collect(await llm.astream_chat(USER))
    assert "LLMChatInProgressEvent" in recorder.seen
    assert not isinstance(theirs[0].raw, dict)  # the SDK's parsing, not the lean one
    assert [_view(r) for r in ours] == [_view(r) for r in theirs]
    assert "".join(r.delta or "" for r in ours) == ANSWER
    assert ours[-1].message.content == ANSWER
    assert ours[-1].additional_kwargs["completion_tokens"] > 0  # the usage chunk
    assert isinstance(ours[0].raw, dict) and ours[0].raw["object"] == "chat.completion.chunk"
    request = server.last_request
    assert request.stream and request.json["messages"][-1]["content"] == USER[0].content
    await llm.aclose()


@pytest.mark.parametrize("aiohttp", [False, True], ids=["httpx", "aiohttp"])
async def test_http_errors_and_dropped_streams_are_upstream_errors(
    server: FakeOpenAIServer, aiohttp: bool
) -> None:
    llm = build_llm(llm_settings(server), max_retries=0, aiohttp=aiohttp)
    server.script([Reply.error(500), Reply.drop(after_tokens=3, text=ANSWER)])
    with pytest.raises(openai.InternalServerError) as caught:
        await _collect(await llm.astream_chat(USER))
    assert isinstance(as_upstream_error(caught.value), UpstreamError)
    with pytest.raises(Exception) as dropped:
        await _collect(await llm.astream_chat(USER))
    assert isinstance(as_upstream_error(dropped.value), UpstreamError)
    assert "timed out" not in as_upstream_error(dropped.value).message
    await llm.aclose()


def _response(*events: str) -> httpx.Response:
    body = "".join(events).encode()
    return httpx.Response(
        200,
        content=body,
        headers={"content-type": "text/event-stream"},
        request=httpx.Request("POST", "http://upstream/v1/chat/completions"),
    )


def _chunk(delta: dict[str, Any] | None = None, **extra: Any) -> str:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": None}]
    return (
        f"data: {json.dumps({'object': 'chat.completion.chunk', 'choices': choices, **extra})}\n\n"
    )


async def test_an_error_event_mid_stream_raises_api_error() -> None:
    response = _response(
        _chunk({"role": "assistant", "content": ""}),
        _chunk({"content": "Hello"}),
        'data: {"error": {"message": "overloaded", "type": "server_error"}}\n\n',
        _chunk({"content": " never"}),
    )
    seen: list[str] = []
    with pytest.raises(openai.APIError, match="overloaded") as caught:
        async for chunk in chat_responses(response):
            seen.append(chunk.delta or "")
    assert seen == ["", "Hello"]
    assert caught.value.body == {"message": "overloaded", "type": "server_error"}
    assert isinstance(as_upstream_error(caught.value), UpstreamError)
    assert response.is_closed


async def test_reasoning_tool_calls_and_usage() -> None:
    call = {"index": 0, "id": "call_1", "type": "function"}
    response = _response(
        _chunk({"role": "assistant", "content": None}),  # skipped, as llama-index does
        _chunk({"content": None, "reasoning_content": "Think."}),
        _chunk({"content": "Let me look."}),
        _chunk({"tool_calls": [{**call, "function": {"name": "search", "arguments": '{"q":'}}]}),
        _chunk({"tool_calls": [{"index": 0, "function": {"arguments": ' "owls"}'}}]}),
        _chunk(None, usage=USAGE),
        "data: [DONE]\n\n",
        _chunk({"content": "after done: ignored"}),
    )
    chunks = await _collect(chat_responses(response))
    first = chunks[0]
    assert first.additional_kwargs["thinking_delta"] == "Think."
    assert isinstance(first.message.blocks[0], ThinkingBlock)
    last = chunks[-1]
    assert last.message.content == "Let me look."
    (tool_call,) = last.message.additional_kwargs["tool_calls"]
    assert tool_call.function.name == "search" and tool_call.function.arguments == '{"q": "owls"}'
    assert last.additional_kwargs == USAGE


async def test_server_sent_events_framing() -> None:
    async def lines(*items: str) -> AsyncIterator[str]:
        for item in items:
            yield item

    events = [
        e
        async for e in server_sent_events(
            lines(": keep-alive", "", "event: message", "data: a", "data:b", "", "id: 7", "data: c")
        )
    ]
    assert events == [("message", "a\nb"), (None, "c")]


async def test_llm_events_reach_an_attached_handler_and_are_skipped_without_one(
    server: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.script([ANSWER, ANSWER])
    llm = build_llm(llm_settings(server), max_retries=0)
    built: list[str] = []
    original = LLMChatInProgressEvent.__init__

    def counting_init(self: Any, **data: Any) -> None:
        built.append("in-progress")
        original(self, **data)

    monkeypatch.setattr(LLMChatInProgressEvent, "__init__", counting_init)
    assert not observed(llm)
    quiet = await _collect(await llm.astream_chat(USER))
    assert "".join(r.delta or "" for r in quiet) == ANSWER
    assert built == [], "no per-token event is built when nothing listens"

    with listening() as recorder:
        assert observed(llm)
        heard = await _collect(await llm.astream_chat(USER))
    assert "".join(r.delta or "" for r in heard) == ANSWER
    assert recorder.seen[0] == "LLMChatStartEvent" and recorder.seen[-1] == "LLMChatEndEvent"
    assert recorder.seen.count("LLMChatInProgressEvent") == len(heard) == len(built)
    assert not observed(llm)
    await llm.aclose()


async def test_text_deltas_are_the_content_of_the_chat_responses_and_raise_the_same_error() -> None:
    events = (
        _chunk({"role": "assistant", "content": ""}),
        _chunk({"content": None, "reasoning_content": "Think."}),
        _chunk({"content": "Hello"}),
        _chunk({"content": " world."}),
        _chunk(None, usage=USAGE),
        "data: [DONE]\n\n",
        _chunk({"content": "after done: ignored"}),
    )
    texts = [t async for t in text_deltas(_response(*events))]
    responses = await _collect(chat_responses(_response(*events)))
    assert texts == [r.delta for r in responses if r.delta] == ["Hello", " world."]

    failing = _response(
        _chunk({"content": "Hello"}),
        'data: {"error": {"message": "overloaded", "type": "server_error"}}\n\n',
    )
    seen: list[str] = []
    with pytest.raises(openai.APIError, match="overloaded"):
        async for text in text_deltas(failing):
            seen.append(text)
    assert seen == ["Hello"] and failing.is_closed


@pytest.mark.parametrize("provider", ["openai", "azure"])
async def test_stream_text_over_http_and_through_llama_index_when_observed(
    server: FakeOpenAIServer, provider: str
) -> None:
    """`stream_text`: the lean text path for the OpenAI/Azure LLMs (no LLM events), LlamaIndex's
    ``astream_chat`` (with its events) when a handler listens, and for any other LLM."""
    server.script([ANSWER, ANSWER])
    llm = build_llm(llm_settings(server, provider), max_retries=0)
    assert "".join([t async for t in await stream_text(llm, USER)]) == ANSWER

    with listening() as recorder:
        heard = "".join([t async for t in await stream_text(llm, USER)])
    assert heard == ANSWER
    assert "LLMChatInProgressEvent" in recorder.seen and recorder.seen[-1] == "LLMChatEndEvent"
    await llm.aclose()

    scripted = ScriptedLLM(replies=[ANSWER])
    assert "".join([t async for t in await stream_text(scripted, USER)]) == ANSWER


async def test_sdk_request_options_go_to_the_request_not_into_its_body(
    server: FakeOpenAIServer,
) -> None:
    """``extra_headers``/``extra_query``/``extra_body`` among the LLM's kwargs mean to the SDK
    what they mean to ``create``: headers, query parameters, fields merged into the body."""
    server.script([ANSWER])
    llm = CompatOpenAI(
        model="chat-model",
        api_key="k",
        api_base=server.openai_base_url,
        additional_kwargs={
            "extra_headers": {"X-Team": "platform"},
            "extra_query": {"trace": "on"},
            "extra_body": {"top_k": 5},
            "seed": 7,
        },
    )
    assert "".join([t async for t in await llm.astream_text(USER)]) == ANSWER
    request = server.last_request
    assert request.headers["x-team"] == "platform" and request.query["trace"] == "on"
    body = request.json
    assert body["top_k"] == 5 and body["seed"] == 7 and body["stream"] is True
    assert not {"extra_headers", "extra_query", "extra_body"} & set(body)
    assert body["messages"] == [{"role": "user", "content": USER[0].content}]
    await llm.aclose()
