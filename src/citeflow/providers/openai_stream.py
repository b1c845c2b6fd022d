"""Lean streaming chats for the OpenAI and Azure OpenAI LLMs (`LeanStreamingMixin`), and the
helpers that stream any LLM's reply as text (`stream_text`) or ask whether it can follow a JSON
schema (`supports_response_format`).

`LeanStreamingMixin` sends llama-index's request through the LLM's own OpenAI SDK client (auth,
headers, Azure deployments, retries and the mapping of HTTP errors are the SDK's), takes the raw
response and parses it with `citeflow.providers.openai_stream_parsing`, much cheaper per token
than the SDK's typed chunks. LlamaIndex's ``astream_chat`` also builds and dispatches an
``LLMChatInProgressEvent`` per token, which nothing reads unless a listener is attached; so when
no event handler, legacy callback handler or rate limiter is set (`observed`), the lean path
runs, and otherwise llama-index's own ``astream_chat`` does and every event is sent.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import httpx
from llama_index.core.base.llms.types import ChatMessage, ChatResponseAsyncGen
from llama_index.core.instrumentation.event_handlers import NullEventHandler
from llama_index.core.llms.callbacks import dispatcher as llm_dispatcher
from llama_index.llms.openai import OpenAI
from llama_index.llms.openai.base import llm_retry_decorator
from llama_index.llms.openai.utils import O1_MODELS, to_openai_message_dicts
from openai import AsyncOpenAI, AsyncStream, RequestOptions
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from citeflow.providers.openai_stream_parsing import (
    chat_responses,
    text_deltas,
    token_alternatives,
)

#: the SDK's per-request options among ``create``'s arguments, and their names in ``post``'s
_REQUEST_OPTIONS = {
    "extra_headers": "headers",
    "extra_query": "params",
    "extra_body": "extra_json",
    "timeout": "timeout",
}

__all__ = ["LeanStreamingMixin", "observed", "stream_text", "supports_response_format"]


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


class LeanStreamingMixin:
    """Lean streaming (and `afirst_token_logprobs`) for llama-index's `OpenAI` and `AzureOpenAI`.

    Put it first among the bases: ``class CompatOpenAI(LeanStreamingMixin, OpenAI)``. The class
    sets ``_sdk_client`` (a pydantic private attribute) to the OpenAI SDK client it also hands
    llama-index (``async_openai_client``), so both paths share one connection pool, auth and
    retry policy.
    Whatever the lean path does not cover (a listener attached, legacy completions, audio) goes
    to llama-index unchanged.
    """

    _sdk_client: AsyncOpenAI

    async def aclose(self) -> None:
        """Close the SDK client (and the HTTP client it was given)."""
        await self._sdk_client.close()

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
                body.setdefault("max_completion_tokens", body.pop("max_tokens"))
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
        completion: ChatCompletion = await self._sdk_client.post(
            "/chat/completions", body=body, options=options, cast_to=ChatCompletion
        )
        choice = completion.choices[0] if completion.choices else None
        content = choice.logprobs.content if choice and choice.logprobs else None
        if not content:
            return {}
        return token_alternatives(content[0].model_dump())

    async def _post_streaming(
        self, messages: Sequence[ChatMessage], kwargs: dict[str, Any]
    ) -> httpx.Response:
        """Send the streaming request; the response with its body not yet read.

        Through the SDK client's ``post`` (auth, Azure deployment paths, headers, retries and
        the mapping of HTTP errors are the SDK's) rather than ``chat.completions.create``, whose
        type-driven transform of the request costs event-loop time and changes nothing in a
        chat request's plain JSON.
        """
        body, options = self._chat_body(messages, {"stream": True, **kwargs})
        stream = await self._sdk_client.post(
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
    """Whether ``llm`` follows an OpenAI-style ``response_format`` JSON schema passed to its chat
    calls (`stream_text`, ``achat``): the in-process llama.cpp LLM (a grammar) and the lean
    OpenAI / Azure OpenAI chat LLMs (structured outputs); any other LLM would ignore it."""
    if isinstance(llm, LeanStreamingMixin):
        if not getattr(getattr(llm, "metadata", None), "is_chat_model", False):
            return False  # legacy completions: no response_format
        from llama_index.llms.azure_openai import AzureOpenAI  # loaded with the LLM's class

        if isinstance(llm, AzureOpenAI):
            return str(llm.api_version or "")[:10] >= AZURE_STRUCTURED_OUTPUTS_VERSION
        return True
    from citeflow.providers.local_llm import LocalLlamaCppLLM

    return isinstance(llm, LocalLlamaCppLLM)
