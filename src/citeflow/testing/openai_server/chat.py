"""The fake OpenAI server's chat completions: a scripted `Reply` as a JSON body or SSE stream."""

from __future__ import annotations

import asyncio
import functools
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from starlette.responses import Response, StreamingResponse

from citeflow.testing.openai_replies import (
    RecordedRequest,
    Reply,
    count_tokens,
    message_text,
    split_tokens,
)
from citeflow.testing.openai_server.errors import error_response

__all__ = ["DropConnection", "StreamCount", "chat_response"]

_dumps = functools.partial(json.dumps, separators=(",", ":"))


@dataclass
class StreamCount:
    """Streaming responses in progress now, and the most at once so far."""

    active: int = 0
    peak: int = 0


class DropConnection(Exception):
    """Raised inside a response body to make uvicorn cut the connection."""


async def chat_response(
    request: RecordedRequest,
    reply: Reply,
    *,
    completion_id: int,
    default_ttft: float,
    default_tokens_per_second: float | None,
    always_stream_usage: bool,
    streams: StreamCount,
) -> Response:
    """``POST /v1/chat/completions``: `reply` as one JSON body or (``stream``) SSE events, at its
    pace (the server's defaults where the reply sets none)."""
    if reply.status != 200:
        return error_response(reply.status, reply.error_message, retry_after=reply.retry_after)
    body = request.json
    tokens = split_tokens(reply.text)
    finish_reason = reply.finish_reason or "stop"
    limit = body.get("max_completion_tokens") or body.get("max_tokens")
    if isinstance(limit, int) and 0 < limit < len(tokens):
        tokens = tokens[:limit]
        finish_reason = reply.finish_reason or "length"
    messages = body.get("messages")
    if not isinstance(messages, list):
        messages = []
    prompt_tokens = sum(count_tokens(message_text(m)) for m in messages)
    usage = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": len(tokens),
        "total_tokens": prompt_tokens + len(tokens),
    }
    ttft = default_ttft if reply.ttft is None else reply.ttft
    rate = default_tokens_per_second if reply.tokens_per_second is None else reply.tokens_per_second
    interval = 1.0 / rate if rate else 0.0
    head = {
        "id": f"chatcmpl-fake-{completion_id}",
        "created": int(time.time()),
        "model": request.model or request.deployment or "fake-model",
        "system_fingerprint": "fp_fake",
    }
    options = body.get("stream_options")
    include_usage = always_stream_usage or (
        isinstance(options, dict) and bool(options.get("include_usage"))
    )

    async def sse() -> AsyncIterator[bytes]:
        """The SSE events, each token at its time; cut where the reply says."""

        def event(choices: list[dict[str, Any]], **extra: Any) -> bytes:
            chunk = {**head, "object": "chat.completion.chunk", "choices": choices, **extra}
            return f"data: {_dumps(chunk)}\n\n".encode()

        def delta(content: dict[str, Any], finish: str | None = None) -> list[dict[str, Any]]:
            return [{"index": 0, "delta": content, "logprobs": None, "finish_reason": finish}]

        streams.active += 1
        streams.peak = max(streams.peak, streams.active)
        try:
            loop = asyncio.get_running_loop()
            start = loop.time() + ttft
            if ttft > 0:
                await asyncio.sleep(ttft)
            if not tokens:
                yield event(delta({"role": "assistant", "content": ""}))
            for i, token in enumerate(tokens):
                if reply.drop_after is not None and i >= reply.drop_after:
                    raise DropConnection
                if interval and i:
                    wait = start + i * interval - loop.time()
                    if wait > 0:
                        await asyncio.sleep(wait)
                content = {"role": "assistant", "content": token} if i == 0 else {"content": token}
                yield event(delta(content))
            if reply.drop_after is not None:
                raise DropConnection
            yield event(delta({}, finish_reason))
            if include_usage:
                yield event([], usage=usage)
            yield b"data: [DONE]\n\n"
        finally:
            streams.active -= 1

    if request.stream:
        return StreamingResponse(
            sse(),
            media_type="text/event-stream",
            headers={"cache-control": "no-cache", "x-accel-buffering": "no"},
        )

    await asyncio.sleep(ttft + interval * max(0, len(tokens) - 1))
    payload = _dumps(
        {
            **head,
            "object": "chat.completion",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "".join(tokens)},
                    "logprobs": _logprobs(reply, body),
                    "finish_reason": finish_reason,
                }
            ],
            "usage": usage,
        }
    ).encode("utf-8")
    if reply.drop_after is not None:
        return StreamingResponse(
            _cut(payload),
            media_type="application/json",
            headers={"content-length": str(len(payload))},
        )
    return Response(payload, media_type="application/json")


def _logprobs(reply: Reply, body: dict[str, Any]) -> dict[str, Any] | None:
    """A chat completion's ``logprobs`` for the reply's first token, as OpenAI sends them."""
    if not reply.top_logprobs or not body.get("logprobs"):
        return None
    ranked = [
        {"token": token, "logprob": logprob, "bytes": list(token.encode())}
        for token, logprob in sorted(reply.top_logprobs.items(), key=lambda kv: -kv[1])
    ]
    top = ranked[: int(body.get("top_logprobs") or 0)]
    return {"content": [{**ranked[0], "top_logprobs": top}], "refusal": None}


async def _cut(payload: bytes) -> AsyncIterator[bytes]:
    """Send half of `payload`, then cut the connection."""
    yield payload[: len(payload) // 2]
    raise DropConnection
