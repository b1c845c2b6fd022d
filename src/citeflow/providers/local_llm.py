"""In-process llama.cpp (`citeflow.providers.llamacpp_engine`) as a LlamaIndex LLM.

Requests go through the chat-completions path with messages, so the GGUF's own chat template
(Qwen, SmolLM, …) is applied. Sync methods block the calling thread; async methods and streams
generate in a worker thread and never block the event loop.

A ``response_format`` among a call's keyword arguments (OpenAI-style: ``{"type": "json_schema",
"json_schema": {"schema": ...}}``) constrains the reply to that JSON schema: llama.cpp turns it into
a grammar that sampling cannot leave (`citeflow.citations.structured`).

xllamacpp is the runtime because it installs as a prebuilt wheel in seconds, where
llama-cpp-python compiles for minutes and its default build crashed on CPUs with AMX. On a busy
machine, 2 threads on 2 cores can be many times slower than 1 (llama.cpp's threads wait for each
other); CITEFLOW_LOCAL_THREADS=1 is then the safer choice.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Callable, Generator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    ChatResponseAsyncGen,
    ChatResponseGen,
    CompletionResponse,
    CompletionResponseAsyncGen,
    CompletionResponseGen,
    LLMMetadata,
    MessageRole,
)
from llama_index.core.llms import CustomLLM
from llama_index.core.llms.callbacks import llm_chat_callback, llm_completion_callback
from pydantic import Field, PrivateAttr

from citeflow.errors import ModelError
from citeflow.providers.llamacpp_engine import (
    Endpoint,
    Generation,
    LlamaCppEngine,
    default_threads,
)
from citeflow.providers.models import check_gguf
from citeflow.providers.openai_stream_parsing import token_alternatives

if TYPE_CHECKING:
    from citeflow.settings import Settings

__all__ = ["LocalLlamaCppLLM"]

#: Request fields callers may pass through ``**kwargs`` (others but ``response_format`` ignored).
_PASSTHROUGH = (
    "stop",
    "seed",
    "top_k",
    "top_p",
    "min_p",
    "repeat_penalty",
    "presence_penalty",
    "frequency_penalty",
    "ignore_eos",
)
_R = TypeVar("_R", ChatResponse, CompletionResponse)
#: LlamaIndex roles llama.cpp's chat templates do not know.
_ROLES = {"developer": "system", "chatbot": "assistant", "model": "assistant", "function": "tool"}


def _checked_response_format(response_format: Any) -> dict[str, Any]:
    if not isinstance(response_format, dict) or not isinstance(response_format.get("type"), str):
        raise ModelError(
            "response_format must be an OpenAI-style object such as "
            '{"type": "json_schema", "json_schema": {"schema": ...}}'
        )
    return response_format


def _json_schema(response_format: Any) -> dict[str, Any] | None:
    """The JSON schema an OpenAI-style ``response_format`` asks for (any object for
    ``json_object`` without a schema), None for plain text."""
    kind = _checked_response_format(response_format)["type"]
    if kind == "json_schema":
        spec = response_format.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        return schema if isinstance(schema, dict) else {}
    if kind == "json_object":
        schema = response_format.get("schema")
        return schema if isinstance(schema, dict) else {"type": "object"}
    return None


def _assistant(text: str) -> ChatMessage:
    return ChatMessage(role=MessageRole.ASSISTANT, content=text)


def _chat_delta(text: str, delta: str) -> ChatResponse:
    return ChatResponse(message=_assistant(text), delta=delta)


def _completion_delta(text: str, delta: str) -> CompletionResponse:
    return CompletionResponse(text=text, delta=delta)


def _responses(
    pieces: Generator[tuple[str, str], None, None], make: Callable[[str, str], _R]
) -> Generator[_R, None, None]:
    """One response per (text so far, delta) piece; closing it stops the generation."""
    with contextlib.closing(pieces):
        for text, delta in pieces:
            yield make(text, delta)


async def _aresponses(
    pieces: AsyncGenerator[tuple[str, str] | Generation, None], make: Callable[[str, str], _R]
) -> AsyncGenerator[_R, None]:
    """`_responses` for the event loop."""
    async with contextlib.aclosing(pieces):
        async for piece in pieces:
            if not isinstance(piece, Generation):
                yield make(*piece)


class LocalLlamaCppLLM(CustomLLM):
    """A GGUF model run in-process by llama.cpp (``xllamacpp``), as a LlamaIndex chat LLM.

    The model loads in the constructor (use `from_settings` to check the file first). Stopping
    early — closing a stream, cancelling the awaiting task — stops the generation within about a
    second. Call `close` to free the model.
    """

    model_path: str = Field(description="The GGUF file.")
    context_window: int = Field(default=4096, ge=512, description="llama.cpp n_ctx.")
    max_tokens: int = Field(default=320, ge=1, description="Tokens to generate at most.")
    temperature: float = Field(default=0.0, ge=0.0, description="0: greedy.")
    threads: int = Field(default=0, ge=0, description="CPU threads; 0: one per core.")
    n_batch: int = Field(
        default=128, ge=32, description="Prompt tokens per batch (also the cancel granularity)."
    )
    model_name: str = Field(default="", description="Name for logs; empty: the file's stem.")

    _engine: LlamaCppEngine = PrivateAttr()

    def __init__(
        self,
        model_path: str | Path,
        *,
        context_window: int = 4096,
        max_tokens: int = 320,
        temperature: float = 0.0,
        threads: int = 0,
        n_batch: int = 128,
        model_name: str = "",
        **kwargs: Any,
    ) -> None:
        """Load ``model_path`` (a GGUF file) with llama.cpp.

        Raises:
            ModelError: xllamacpp is missing or llama.cpp cannot load the file.
        """
        super().__init__(
            model_path=str(model_path),
            context_window=context_window,
            max_tokens=max_tokens,
            temperature=temperature,
            threads=threads or default_threads(),
            n_batch=n_batch,
            model_name=model_name or Path(model_path).stem,
            **kwargs,
        )
        self._engine = LlamaCppEngine(
            Path(self.model_path),
            context_window=self.context_window,
            n_batch=self.n_batch,
            threads=self.threads,
            temperature=self.temperature,
            name=self.model_name,
        )

    @classmethod
    def from_settings(cls, settings: Settings) -> LocalLlamaCppLLM:
        """The local LLM the settings ask for; checks the GGUF file before loading it.

        Raises:
            ModelError: the file is missing, not a GGUF, fails its checksum, or cannot be loaded.
        """
        path = settings.local.gguf_path
        check_gguf(path, is_default=path == settings.local.default_model_path)
        return cls(
            path,
            context_window=settings.local.context_window,
            max_tokens=settings.llm.max_tokens,
            temperature=settings.llm.temperature,
            threads=settings.local.threads,
        )

    @property
    def last_stats(self) -> dict[str, Any]:
        """llama.cpp's timings of the last generation (``prompt_n``, ``prompt_ms``, ...)."""
        return dict(self._engine.last_stats)

    @classmethod
    def class_name(cls) -> str:
        """LlamaIndex's name for this class."""
        return "citeflow_local_llamacpp"

    @property
    def metadata(self) -> LLMMetadata:
        """Context window, output budget and name; a chat model without tool calling."""
        return LLMMetadata(
            context_window=self.context_window,
            num_output=self.max_tokens,
            is_chat_model=True,
            is_function_calling_model=False,
            model_name=self.model_name,
            system_role=MessageRole.SYSTEM,
        )

    def close(self) -> None:
        """Free the model; later calls fail with `ModelError`."""
        self._engine.close()

    # --- requests --------------------------------------------------------------------------

    def _request(self, kwargs: dict[str, Any], **body: Any) -> dict[str, Any]:
        request: dict[str, Any] = {
            **body,
            "stream": True,
            "return_progress": True,
            "stream_options": {"include_usage": True},
            "max_tokens": int(kwargs.get("max_tokens") or self.max_tokens),
            "temperature": float(kwargs.get("temperature", self.temperature)),
        }
        request.update({k: kwargs[k] for k in _PASSTHROUGH if kwargs.get(k) is not None})
        response_format = kwargs.get("response_format")
        if response_format is not None:
            if "messages" in body:
                request["response_format"] = _checked_response_format(response_format)
            elif (schema := _json_schema(response_format)) is not None:
                request["json_schema"] = schema  # llama.cpp's raw completion ignores the other
        return request

    def _chat_request(self, messages: Sequence[ChatMessage], kwargs: dict[str, Any]) -> Any:
        wire = [
            {"role": _ROLES.get(m.role.value, m.role.value), "content": m.content or ""}
            for m in messages
        ]
        return self._request(kwargs, messages=wire)

    def _completion_request(
        self, prompt: str, formatted: bool, kwargs: dict[str, Any]
    ) -> tuple[Endpoint, dict[str, Any]]:
        """A raw prompt goes through the chat template; a ``formatted`` one is sent as is."""
        if formatted:
            return "completion", self._request(kwargs, prompt=prompt)
        return "chat", self._request(kwargs, messages=[{"role": "user", "content": prompt}])

    # --- LlamaIndex API: sync --------------------------------------------------------------

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        """Answer ``prompt`` (as a user message, through the chat template, unless
        ``formatted``)."""
        endpoint, request = self._completion_request(prompt, formatted, kwargs)
        outcome = self._engine.generate(endpoint, request)
        return CompletionResponse(text=outcome.text, raw=outcome.raw)

    @llm_completion_callback()
    def stream_complete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponseGen:
        """Like `complete`, streaming; each response has the text so far and the new delta."""
        endpoint, request = self._completion_request(prompt, formatted, kwargs)
        return _responses(self._engine.stream(endpoint, request), _completion_delta)

    @llm_chat_callback()
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        """Answer the conversation, using the model's chat template."""
        outcome = self._engine.generate("chat", self._chat_request(messages, kwargs))
        return ChatResponse(message=_assistant(outcome.text), raw=outcome.raw)

    @llm_chat_callback()
    def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseGen:
        """Like `chat`, streaming; each response has the message so far and the new delta."""
        request = self._chat_request(messages, kwargs)
        return _responses(self._engine.stream("chat", request), _chat_delta)

    # --- LlamaIndex API: async -------------------------------------------------------------

    async def _agenerate(self, endpoint: Endpoint, request: dict[str, Any]) -> Generation:
        async with contextlib.aclosing(self._engine.astream(endpoint, request)) as pieces:
            async for piece in pieces:
                if isinstance(piece, Generation):
                    return piece
        raise ModelError("local LLM stopped without a result")  # not reached

    @llm_completion_callback()
    async def acomplete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponse:
        """`complete` without blocking the event loop; cancelling stops the generation."""
        endpoint, request = self._completion_request(prompt, formatted, kwargs)
        outcome = await self._agenerate(endpoint, request)
        return CompletionResponse(text=outcome.text, raw=outcome.raw)

    @llm_completion_callback()
    async def astream_complete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponseAsyncGen:
        """`stream_complete` without blocking the loop; closing the stream stops generation."""
        endpoint, request = self._completion_request(prompt, formatted, kwargs)
        return _aresponses(self._engine.astream(endpoint, request), _completion_delta)

    async def afirst_token_logprobs(
        self, messages: Sequence[ChatMessage], *, top: int = 10
    ) -> dict[str, float]:
        """The ``top`` likeliest first tokens of the reply to ``messages``, with their
        log-probabilities (one token is generated; a judge reads "Yes" against "No")."""
        request = self._chat_request(messages, {"max_tokens": 1, "temperature": 0.0})
        request.update(logprobs=True, top_logprobs=top)
        outcome = await self._agenerate("chat", request)
        if not outcome.logprobs:
            raise ModelError("local LLM returned no log-probabilities")
        return token_alternatives(outcome.logprobs[0])

    @llm_chat_callback()
    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        """`chat` without blocking the event loop; cancelling stops the generation."""
        outcome = await self._agenerate("chat", self._chat_request(messages, kwargs))
        return ChatResponse(message=_assistant(outcome.text), raw=outcome.raw)

    @llm_chat_callback()
    async def astream_chat(
        self, messages: Sequence[ChatMessage], **kwargs: Any
    ) -> ChatResponseAsyncGen:
        """`stream_chat` without blocking the loop; closing the stream stops generation."""
        request = self._chat_request(messages, kwargs)
        return _aresponses(self._engine.astream("chat", request), _chat_delta)
