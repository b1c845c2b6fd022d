"""A lean streaming chat for the OpenAI and Azure OpenAI LLMs: SSE lines parsed with ``json``.

llama-index's ``astream_chat`` lets the OpenAI SDK turn every streamed token into a typed
``ChatCompletionChunk`` (a recursive, reflective model construction) before it builds its own
``ChatResponse``; at tens of tokens per answer and tens of answers at once, that is most of the
server's CPU. `LeanStreamingMixin` sends the same request through the same SDK client (auth,
headers, Azure deployments, retries of the request and the mapping of HTTP errors are unchanged),
takes the raw response, and parses each ``data:`` line with ``json.loads``. The ``ChatResponse``
objects it yields are those of llama-index (role, text and reasoning blocks, tool calls, token
counts, ``thinking_delta``), except that ``raw`` is the chunk's JSON object, not an SDK model.
An ``{"error": ...}`` event raises `openai.APIError`, as the SDK does.

LlamaIndex's ``astream_chat`` also builds and dispatches an ``LLMChatInProgressEvent`` (a pydantic
model) for every token, which nothing reads unless an instrumentation handler is attached: 5.6% of
the server's CPU at 64 streams (``bench/load_streams.py --profile``). When no event handler, legacy
callback handler or rate limiter is set (`observed`), `LeanStreamingMixin.astream_chat` streams
as above; with one, LlamaIndex's own ``astream_chat`` runs, and every event is sent as before.

Only public APIs: the OpenAI SDK client is the LLM class's own (`LeanStreamingMixin.sdk_client`),
the request body is built from the LLM's public settings as llama-index builds it.
"""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterator, Sequence
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
from llama_index.core.instrumentation.event_handlers import NullEventHandler
from llama_index.core.llms.callbacks import dispatcher as llm_dispatcher
from llama_index.llms.openai import OpenAI
from llama_index.llms.openai.base import llm_retry_decorator
from llama_index.llms.openai.utils import O1_MODELS, to_openai_message_dicts, update_tool_calls
from openai import APIError, AsyncOpenAI, AsyncStream, RequestOptions
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.chat.chat_completion_chunk import ChoiceDelta, ChoiceDeltaToolCall

#: the SDK's per-request options among ``create``'s arguments, and their names in ``post``'s
_REQUEST_OPTIONS = {
    "extra_headers": "headers",
    "extra_query": "params",
    "extra_body": "extra_json",
    "timeout": "timeout",
}

__all__ = [
    "LeanStreamingMixin",
    "chat_responses",
    "observed",
    "server_sent_events",
    "stream_text",
    "supports_response_format",
    "text_deltas",
]


def observed(llm: Any) -> bool:
    """Whether anything listens to LlamaIndex's LLM events for ``llm``: an instrumentation event
    handler (other than the root's null handler), a legacy callback handler, or a rate limiter
    (which LlamaIndex's wrapper applies)."""
    dispatcher: Any = llm_dispatcher
    while dispatcher is not None:
        if any(not isinstance(h, NullEventHandler) for h in dispatcher.event_handlers):
            return True
        dispatcher = dispatcher.parent if dispatcher.propagate else None
    callbacks = getattr(llm, "callback_manager", None)
    if callbacks is not None and getattr(callbacks, "handlers", None):
        return True
    return getattr(llm, "rate_limiter", None) is not None


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
    return {
        "prompt_tokens": usage.get("prompt_tokens", 0),
        "completion_tokens": usage.get("completion_tokens", 0),
        "total_tokens": usage.get("total_tokens", 0),
    }


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
    """The ``ChatResponse``s of a streamed chat completion (see the module doc); closes it."""
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


class LeanStreamingMixin:
    """Lean streaming (and `afirst_token_logprobs`) for llama-index's `OpenAI` and `AzureOpenAI`.

    Put it first among the bases: ``class CompatOpenAI(LeanStreamingMixin, OpenAI)``. The class
    provides `sdk_client`: the OpenAI SDK client it also hands llama-index
    (``async_openai_client``), so both paths share one connection pool, auth and retry policy.
    Whatever the lean path does not cover (a listener attached, legacy completions, audio) goes
    to llama-index unchanged.
    """

    @property
    def sdk_client(self) -> AsyncOpenAI:
        """The SDK client the lean requests go through."""
        raise NotImplementedError

    async def aclose(self) -> None:
        """Close `sdk_client` (and the HTTP client it was given)."""
        await self.sdk_client.close()

    def _lean(self, kwargs: dict[str, Any]) -> bool:
        """Whether a call with ``kwargs`` takes the lean path: nobody listens (`observed`), a chat
        model (or ``use_chat_completions``), no audio."""
        llm: OpenAI = self  # type: ignore[assignment]
        if observed(llm) or (llm.modalities and "audio" in llm.modalities):
            return False
        return bool(kwargs.get("use_chat_completions", llm.metadata.is_chat_model))

    async def astream_chat(
        self, messages: Sequence[ChatMessage], **kwargs: Any
    ) -> ChatResponseAsyncGen:
        """LlamaIndex's ``astream_chat``; without its per-token events when nobody listens."""
        if not self._lean(kwargs):
            parent: Any = super()
            stream: ChatResponseAsyncGen = await parent.astream_chat(messages, **kwargs)
            return stream
        lean: ChatResponseAsyncGen = await self._lean_stream_chat(messages, **kwargs)
        return lean

    async def astream_text(
        self, messages: Sequence[ChatMessage], **kwargs: Any
    ) -> AsyncIterator[str]:
        """The reply's text, piece by piece (`text_deltas`); through `astream_chat` (and its
        events) when something listens. ``kwargs`` go into the request as in `astream_chat`
        (``response_format``, ``temperature``, ...)."""
        if not self._lean(kwargs):
            return _chat_text(await self.astream_chat(messages, **kwargs))
        lean: AsyncIterator[str] = await self._lean_stream_text(messages, **kwargs)
        return lean

    @llm_retry_decorator
    async def _lean_stream_text(
        self, messages: Sequence[ChatMessage], **kwargs: Any
    ) -> AsyncIterator[str]:
        return text_deltas(await self._post_streaming(messages, kwargs))

    @llm_retry_decorator
    async def _lean_stream_chat(
        self, messages: Sequence[ChatMessage], **kwargs: Any
    ) -> ChatResponseAsyncGen:
        return chat_responses(await self._post_streaming(messages, kwargs))

    def _chat_body(
        self, messages: Sequence[ChatMessage], kwargs: dict[str, Any]
    ) -> tuple[dict[str, Any], RequestOptions]:
        """A chat completion's JSON body as llama-index's OpenAI LLM sends it (its public model
        settings, then ``kwargs``, then ``additional_kwargs``), and the SDK's per-request options
        taken out of it (headers, query, timeout)."""
        llm: OpenAI = self  # type: ignore[assignment]
        body: dict[str, Any] = {
            "messages": to_openai_message_dicts(messages, model=llm.model),
            # an Azure deployment's name is its `engine`; the SDK puts it in the URL
            "model": getattr(llm, "engine", None) or llm.model,
            "temperature": llm.temperature,
            **kwargs,
        }
        if llm.max_tokens is not None:
            body["max_tokens"] = llm.max_tokens
        if llm.logprobs:
            body.update(logprobs=True, top_logprobs=llm.top_logprobs)
        body.update(llm.additional_kwargs)
        if "stream" not in body:
            body.pop("stream_options", None)
        if llm.model in O1_MODELS:  # reasoning models: max_completion_tokens, reasoning_effort
            if body.get("max_tokens") is not None:
                body.setdefault("max_completion_tokens", body["max_tokens"])
                body.pop("max_tokens")
            if llm.reasoning_effort is not None:
                body["reasoning_effort"] = llm.reasoning_effort
        if llm.modalities is not None:
            body["modalities"] = llm.modalities
        if llm.audio_config is not None:
            body["audio"] = llm.audio_config
        options: dict[str, Any] = {}
        for name, option in _REQUEST_OPTIONS.items():
            if name in body:
                options[option] = body.pop(name)
        return body, RequestOptions(**options)  # type: ignore[typeddict-item]

    async def afirst_token_logprobs(
        self, messages: Sequence[ChatMessage], *, top: int = 10
    ) -> dict[str, float]:
        """The ``top`` likeliest first tokens of the reply to ``messages``, with their
        log-probabilities: one chat completion of one token, ``logprobs`` on (what the citation
        judge reads "Yes" against "No" from). Empty when the server sends none."""
        body, options = self._chat_body(messages, {})
        body.update(temperature=0.0, logprobs=True, top_logprobs=min(max(top, 0), 20))
        body.pop("stream_options", None)
        if "max_completion_tokens" in body:
            body["max_completion_tokens"] = 1
        else:
            body["max_tokens"] = 1
        completion: ChatCompletion = await self.sdk_client.post(
            "/chat/completions", body=body, options=options, cast_to=ChatCompletion
        )
        choice = completion.choices[0] if completion.choices else None
        content = choice.logprobs.content if choice and choice.logprobs else None
        if not content:
            return {}
        first = content[0]
        alternatives = [(a.token, a.logprob) for a in first.top_logprobs] or [
            (first.token, first.logprob)
        ]
        out: dict[str, float] = {}
        for token, logprob in alternatives:
            out[token] = max(out.get(token, -math.inf), logprob)
        return out

    async def _post_streaming(
        self, messages: Sequence[ChatMessage], kwargs: dict[str, Any]
    ) -> httpx.Response:
        """Send the streaming request; the response with its body not yet read.

        Through the SDK client's ``post`` (auth, Azure deployment paths, headers, retries and
        the mapping of HTTP errors are the SDK's) rather than ``chat.completions.create``, which
        first walks the whole request through its type-driven transform: ~0.3 ms of event-loop
        time per request that changes nothing in a chat request's plain JSON.
        """
        body, options = self._chat_body(messages, {"stream": True, **kwargs})
        stream = await self.sdk_client.post(
            "/chat/completions",
            body=body,
            options=options,
            cast_to=ChatCompletion,
            stream=True,
            stream_cls=AsyncStream[ChatCompletionChunk],
        )
        response: httpx.Response = stream.response  # its own parsing never starts
        return response


async def _chat_text(stream: ChatResponseAsyncGen) -> AsyncIterator[str]:
    async for chunk in stream:
        if chunk.delta:
            yield chunk.delta


async def stream_text(
    llm: Any, messages: Sequence[ChatMessage], **kwargs: Any
) -> AsyncIterator[str]:
    """The text of ``llm``'s streamed reply to ``messages``, piece by piece: through its
    ``astream_text`` when it has one (`LeanStreamingMixin`), else from ``astream_chat``.

    ``kwargs`` are passed to that call: request options such as ``response_format`` (only for an
    LLM that `supports_response_format`; others may ignore it or fail).
    """
    lean = getattr(llm, "astream_text", None)
    if lean is not None:
        stream: AsyncIterator[str] = await lean(messages, **kwargs)
        return stream
    return _chat_text(await llm.astream_chat(messages, **kwargs))


#: The first Azure OpenAI API version with structured outputs (``response_format`` of type
#: ``json_schema``); versions are dates, so they compare as strings.
AZURE_STRUCTURED_OUTPUTS_VERSION = "2024-08-01"


def supports_response_format(llm: Any) -> bool:
    """Whether ``llm`` can constrain its reply to a JSON schema with an OpenAI-style
    ``response_format`` (``{"type": "json_schema", "json_schema": {...}}``) passed to its chat
    calls (`stream_text`, ``achat``): the in-process llama.cpp LLM (a grammar), and the lean
    OpenAI / Azure OpenAI chat LLMs (structured outputs; for Azure, from API version
    2024-08-01). Any other LLM (LlamaIndex's, the test fakes) would ignore it."""
    if isinstance(llm, LeanStreamingMixin):
        if not getattr(getattr(llm, "metadata", None), "is_chat_model", False):
            return False  # legacy completions: no response_format
        from llama_index.llms.azure_openai import AzureOpenAI  # loaded with the LLM's class

        if isinstance(llm, AzureOpenAI):
            return str(llm.api_version or "")[:10] >= AZURE_STRUCTURED_OUTPUTS_VERSION
        return True
    from citeflow.providers.local_llm import LocalLlamaCppLLM

    return isinstance(llm, LocalLlamaCppLLM)
