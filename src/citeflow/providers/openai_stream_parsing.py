"""Parse a streamed OpenAI chat completion with ``json``: its server-sent events, the answer's
text pieces (`text_deltas`) and llama-index ``ChatResponse`` objects (`chat_responses`); and an
OpenAI-style log-probabilities entry (`token_alternatives`).

The OpenAI SDK would build a typed ``ChatCompletionChunk`` per token (a recursive, reflective
model construction): at tens of tokens per answer and tens of answers at once, most of the
server's CPU. The ``ChatResponse`` objects built here are those of llama-index (role, text and
reasoning blocks, tool calls, token counts, ``thinking_delta``), except that ``raw`` is the
chunk's JSON object, not an SDK model. An ``{"error": ...}`` event raises `openai.APIError`, as
the SDK does.
"""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterator
from typing import Any

import httpx
from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    ChatResponseAsyncGen,
    ContentBlock,
    MessageRole,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
)
from llama_index.llms.openai.utils import update_tool_calls
from openai import APIError
from openai.types.chat.chat_completion_chunk import ChoiceDelta, ChoiceDeltaToolCall

__all__ = ["chat_responses", "server_sent_events", "text_deltas", "token_alternatives"]


async def server_sent_events(lines: AsyncIterator[str]) -> AsyncIterator[tuple[str | None, str]]:
    """``(event, data)`` of each server-sent event in ``lines`` (comments and ids skipped)."""
    event: str | None = None
    data: list[str] = []
    async for line in lines:
        if not line:
            if data:
                yield event, "\n".join(data)
            event, data = None, []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            data.append(value)
        elif name == "event":
            event = value
    if data:
        yield event, "\n".join(data)


def _stream_error(data: Any, request: httpx.Request) -> APIError | None:
    if not isinstance(data, dict) or not data.get("error"):
        return None
    error = data["error"]
    message = error.get("message") if isinstance(error, dict) else None
    if not isinstance(message, str) or not message:
        message = "An error occurred during streaming"
    return APIError(message=message, request=request, body=error)


def _reasoning(delta: dict[str, Any]) -> str:
    for key in ("reasoning_content", "reasoning"):
        value = delta.get(key)
        if isinstance(value, str):
            return value
    return ""


def _token_counts(chunk: dict[str, Any]) -> dict[str, Any]:
    usage = chunk.get("usage")
    if not isinstance(usage, dict):
        return {}
    keys = ("prompt_tokens", "completion_tokens", "total_tokens")
    return {key: usage.get(key, 0) for key in keys}


async def _chunks(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """The JSON objects of a streamed chat completion, up to ``[DONE]``; an error event raises."""
    async for _, text in server_sent_events(response.aiter_lines()):
        if text.startswith("[DONE]"):
            return
        chunk = json.loads(text)
        if (error := _stream_error(chunk, response.request)) is not None:
            raise error
        if isinstance(chunk, dict):
            yield chunk


def _delta(chunk: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
    """Whether the chunk has choices, and its first choice's delta."""
    choices = chunk.get("choices") or []
    return bool(choices), (choices[0].get("delta") or {}) if choices else {}


async def text_deltas(response: httpx.Response) -> AsyncIterator[str]:
    """The answer text of a streamed chat completion, piece by piece; closes it.

    What `chat_responses` yields as ``delta``, without building a ``ChatResponse`` per token: a
    caller that wants only the text (the citation synthesizer) saves that per-token work.
    """
    try:
        async for chunk in _chunks(response):
            text = _delta(chunk)[1].get("content")
            if text:
                yield text
    finally:
        await response.aclose()


async def chat_responses(response: httpx.Response) -> ChatResponseAsyncGen:
    """The ``ChatResponse``s of a streamed chat completion; closes it."""
    content = ""
    reasoning_content = ""
    tool_calls: list[ChoiceDeltaToolCall] = []
    first = True
    try:
        async for chunk in _chunks(response):
            has_choices, delta = _delta(chunk)
            if (
                first
                and has_choices
                and delta.get("content") is None
                and not delta.get("tool_calls")
            ):
                first = False  # the role-only opening chunk, skipped as llama-index does
                continue
            first = False
            content_delta = delta.get("content") or ""
            content += content_delta
            reasoning_delta = _reasoning(delta)
            reasoning_content += reasoning_delta
            blocks: list[ContentBlock] = []
            if reasoning_content:
                blocks.append(ThinkingBlock(content=reasoning_content))
            blocks.append(TextBlock(text=content))
            message_kwargs: dict[str, Any] = {}
            if delta.get("tool_calls") or tool_calls:
                tool_calls = update_tool_calls(
                    tool_calls, ChoiceDelta.model_validate(delta).tool_calls
                )
                if tool_calls:
                    message_kwargs["tool_calls"] = tool_calls
                for call in tool_calls:
                    if call.function:
                        blocks.append(
                            ToolCallBlock(
                                tool_call_id=call.id,
                                tool_kwargs=call.function.arguments or {},
                                tool_name=call.function.name or "",
                            )
                        )
            response_kwargs = _token_counts(chunk)
            if reasoning_delta:
                response_kwargs["thinking_delta"] = reasoning_delta
            yield ChatResponse(
                message=ChatMessage(
                    role=delta.get("role") or MessageRole.ASSISTANT,
                    blocks=blocks,
                    additional_kwargs=message_kwargs,
                ),
                delta=content_delta,
                raw=chunk,
                additional_kwargs=response_kwargs,
            )
    finally:
        await response.aclose()


def token_alternatives(entry: dict[str, Any]) -> dict[str, float]:
    """The alternatives of one generated token in OpenAI's ``logprobs.content`` (the token itself
    when there are none), each spelling with its highest log-probability."""
    out: dict[str, float] = {}
    for alternative in entry.get("top_logprobs") or [entry]:
        token, logprob = str(alternative.get("token", "")), alternative.get("logprob")
        if isinstance(logprob, int | float):
            out[token] = max(out.get(token, -math.inf), float(logprob))
    return out
