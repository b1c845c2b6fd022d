"""In-process llama.cpp (through ``xllamacpp``) as a LlamaIndex LLM.

``xllamacpp.Server`` runs llama.cpp's server engine inside this process: the model loads once,
and ``handle_chat_completions`` takes an OpenAI-style request and calls a Python callback with
each streamed chunk; returning True from the callback stops the generation (llama.cpp cancels
the task and frees the slot). Requests go through the chat-completions path with messages, so the
GGUF's own chat template (Qwen, SmolLM, …) is applied.

Generation always streams internally, with ``return_progress`` so the callback also fires during
prompt processing (once per ``n_batch`` tokens): a consumer that goes away — a closed stream, a
cancelled task — stops the work within about a second, even during a long prefill. One lock
serializes generations: a second call waits for the first.

A ``response_format`` among a call's keyword arguments (OpenAI-style: ``{"type": "json_schema",
"json_schema": {"schema": ...}}``) constrains the reply to that JSON schema: llama.cpp turns it into
a grammar that sampling cannot leave (`citeflow.citations.structured`).

Note: llama.cpp's server engine also opens an HTTP listener on a random 127.0.0.1 port; it is
given a random API key, so nothing else can use it, and its web UI is off.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import queue
import secrets
import threading
import time
from collections.abc import AsyncGenerator, Callable, Generator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

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
from citeflow.providers.models import check_gguf

if TYPE_CHECKING:
    from citeflow.settings import Settings

__all__ = ["LocalLlamaCppLLM"]

log = logging.getLogger("citeflow.llm")

Endpoint = Literal["chat", "completion"]

#: Request fields callers may pass through ``**kwargs`` (others are ignored). ``response_format``
#: (OpenAI-style, e.g. ``{"type": "json_schema", "json_schema": {"schema": ...}}``) is passed
#: too: llama.cpp turns the schema into a grammar the generation cannot leave.
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
#: LlamaIndex roles llama.cpp's chat templates do not know.
_ROLES = {"developer": "system", "chatbot": "assistant", "model": "assistant", "function": "tool"}
_LOCK_POLL = 0.05


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


def _default_threads() -> int:
    """One thread per usable core."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


@dataclass
class _Outcome:
    """What one generation produced."""

    text: str = ""
    finish_reason: str | None = None
    raw: dict[str, Any] = field(default_factory=dict)
    cancelled: bool = False
    logprobs: list[dict[str, Any]] = field(default_factory=list)
    """per generated token, its log-probability and its top alternatives (when asked for)"""


@dataclass
class _End:
    """The last item a worker thread emits: the outcome, or the error."""

    outcome: _Outcome | None = None
    error: BaseException | None = None


_Item = str | _End


class _Collector:
    """Turns streamed chunks into deltas and an outcome; runs inside xllamacpp's callback."""

    def __init__(
        self, endpoint: Endpoint, stop: threading.Event, on_delta: Callable[[str], None]
    ) -> None:
        self.endpoint = endpoint
        self.stop = stop
        self.on_delta = on_delta
        self.parts: list[str] = []
        self.outcome = _Outcome()
        self.error: str | None = None
        self.exception: BaseException | None = None

    def __call__(self, chunk: Any) -> bool:
        """Handle one chunk; True tells llama.cpp to stop. Never raises (errors are kept)."""
        try:
            return self._feed(chunk)
        except BaseException as exc:  # Ctrl-C or a consumer bug: stop and re-raise later
            self.exception = exc
            return True

    def _feed(self, chunk: Any) -> bool:
        if self.stop.is_set():
            self.outcome.cancelled = True
            return True
        if not isinstance(chunk, dict):
            self.error = f"unexpected response from llama.cpp: {str(chunk)[:200]}"
            return True
        if "error" in chunk or ("choices" not in chunk and "message" in chunk):
            detail = chunk.get("error", chunk)
            message = detail.get("message") if isinstance(detail, dict) else detail
            self.error = str(message or detail).strip().splitlines()[0][:300]
            return True
        for choice in chunk.get("choices") or ():
            if self.endpoint == "chat":
                piece = (choice.get("delta") or {}).get("content")
            else:
                piece = choice.get("text")
            if piece:
                self.parts.append(piece)
                self.on_delta(piece)
            logprobs = choice.get("logprobs")
            if isinstance(logprobs, dict):
                self.outcome.logprobs.extend(logprobs.get("content") or ())
            if choice.get("finish_reason"):
                self.outcome.finish_reason = choice["finish_reason"]
        if "timings" in chunk or "usage" in chunk:
            self.outcome.raw.update({k: v for k, v in chunk.items() if k != "choices"})
        if self.stop.is_set():
            self.outcome.cancelled = True
            return True
        return False


class LocalLlamaCppLLM(CustomLLM):
    """A GGUF model run in-process by llama.cpp (``xllamacpp``), as a LlamaIndex chat LLM.

    The model loads in the constructor (use `from_settings` to check the file first). Sync
    methods block the calling thread; async methods and streams generate in a worker thread and
    never block the event loop. Stopping early — closing a stream, cancelling the awaiting task —
    stops the generation within about a second. Call `close` to free the model.
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

    _server: Any = PrivateAttr(default=None)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)
    _last_stats: dict[str, Any] = PrivateAttr(default_factory=dict)

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
            threads=threads or _default_threads(),
            n_batch=n_batch,
            model_name=model_name or Path(model_path).stem,
            **kwargs,
        )
        self._server = self._load()

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
        return dict(self._last_stats)

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

    # --- loading ---------------------------------------------------------------------------

    def _load(self) -> Any:
        try:
            import xllamacpp
        except ImportError:
            raise ModelError(
                "the local LLM needs xllamacpp; install it with: pip install 'citeflow[local]'"
            ) from None
        params = xllamacpp.CommonParams()
        params.model.path = self.model_path
        params.n_ctx = self.context_window
        params.n_parallel = 1  # one slot gets the whole context; the lock serializes anyway
        params.n_batch = self.n_batch
        params.n_ubatch = self.n_batch
        params.cpuparams.n_threads = self.threads
        params.cpuparams_batch.n_threads = self.threads
        params.sampling.temp = self.temperature
        params.cache_ram_mib = 1024
        params.verbosity = 1  # llama.cpp's own stderr log: errors only
        # The engine also listens on a random 127.0.0.1 port: lock it with a random key.
        params.api_keys = [secrets.token_urlsafe(32)]
        params.ui = False
        params.endpoint_slots = False
        params.endpoint_metrics = False
        params.n_threads_http = 1
        start = time.perf_counter()
        try:
            server = xllamacpp.Server(params)
        except Exception as exc:
            raise ModelError(
                f"llama.cpp cannot load {self.model_path} ({exc}); the file may be corrupt or "
                "not an LLM GGUF, or memory may be short"
            ) from None
        log.info(
            "loaded %s in %.1f s (n_ctx %d, %d threads)",
            Path(self.model_path).name,
            time.perf_counter() - start,
            self.context_window,
            self.threads,
        )
        return server

    def close(self) -> None:
        """Free the model; later calls fail with `ModelError`."""
        with self._lock:
            self._server = None

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

    # --- the engine ------------------------------------------------------------------------

    def _run(
        self,
        endpoint: Endpoint,
        request: dict[str, Any],
        stop: threading.Event,
        on_delta: Callable[[str], None],
    ) -> _Outcome:
        """Generate, holding the lock; ``on_delta`` gets each piece of text as it comes."""
        while not self._lock.acquire(timeout=_LOCK_POLL):
            if stop.is_set():
                return _Outcome(cancelled=True)
        try:
            if stop.is_set():
                return _Outcome(cancelled=True)
            server = self._server
            if server is None:
                raise ModelError(f"the local LLM {self.model_name} is closed")
            collector = _Collector(endpoint, stop, on_delta)
            try:
                if endpoint == "chat":
                    server.handle_chat_completions(request, collector)
                else:
                    server.handle_completions(request, collector)
            except ValueError as exc:
                raise ModelError(f"local LLM rejected the request: {exc}") from None
            except Exception as exc:
                raise ModelError(f"local LLM failed: {type(exc).__name__}: {exc}") from None
        finally:
            self._lock.release()
        if collector.exception is not None:
            if isinstance(collector.exception, Exception) and not isinstance(
                collector.exception, ModelError
            ):
                raise ModelError(
                    f"local LLM failed: {type(collector.exception).__name__}: {collector.exception}"
                ) from collector.exception
            raise collector.exception
        if collector.error is not None:
            raise ModelError(f"local LLM failed: {collector.error}")
        outcome = collector.outcome
        outcome.text = "".join(collector.parts)
        timings = outcome.raw.get("timings")
        self._last_stats = dict(timings) if isinstance(timings, dict) else {}
        return outcome

    def _spawn(
        self,
        endpoint: Endpoint,
        request: dict[str, Any],
        stop: threading.Event,
        emit: Callable[[_Item], None],
    ) -> None:
        """Generate in a worker thread, emitting each delta and then one `_End`."""

        def work() -> None:
            try:
                outcome = self._run(endpoint, request, stop, emit)
            except BaseException as exc:
                emit(_End(error=exc))
            else:
                emit(_End(outcome=outcome))

        threading.Thread(target=work, name="citeflow-llm", daemon=True).start()

    def _iter_sync(
        self, endpoint: Endpoint, request: dict[str, Any]
    ) -> Generator[tuple[str, str], None, None]:
        """(text so far, delta) pairs from a worker thread; closing the iterator stops it."""
        items: queue.SimpleQueue[_Item] = queue.SimpleQueue()
        stop = threading.Event()
        self._spawn(endpoint, request, stop, items.put)
        text = ""
        try:
            while not isinstance(item := items.get(), _End):
                text += item
                yield text, item
            self._outcome(item)
        finally:
            stop.set()

    async def _iter_async(
        self, endpoint: Endpoint, request: dict[str, Any]
    ) -> AsyncGenerator[tuple[str, str] | _Outcome, None]:
        """(text so far, delta) pairs, then the outcome, without blocking the event loop.

        Cancelling the consuming task or closing the iterator stops the generation.
        """
        loop = asyncio.get_running_loop()
        items: asyncio.Queue[_Item] = asyncio.Queue()
        stop = threading.Event()

        def emit(item: _Item) -> None:
            try:
                loop.call_soon_threadsafe(items.put_nowait, item)
            except RuntimeError:  # the loop is closed: nobody is listening any more
                stop.set()

        self._spawn(endpoint, request, stop, emit)
        text = ""
        try:
            while not isinstance(item := await items.get(), _End):
                text += item
                yield text, item
            yield self._outcome(item)
        finally:
            stop.set()

    @staticmethod
    def _outcome(end: _End) -> _Outcome:
        if end.error is not None:
            raise end.error
        assert end.outcome is not None
        return end.outcome

    # --- LlamaIndex API: sync --------------------------------------------------------------

    def _generate(self, endpoint: Endpoint, request: dict[str, Any]) -> _Outcome:
        return self._run(endpoint, request, threading.Event(), lambda _: None)

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        """Answer ``prompt`` (as a user message, through the chat template, unless
        ``formatted``)."""
        endpoint, request = self._completion_request(prompt, formatted, kwargs)
        outcome = self._generate(endpoint, request)
        return CompletionResponse(text=outcome.text, raw=outcome.raw)

    @llm_completion_callback()
    def stream_complete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponseGen:
        """Like `complete`, streaming; each response has the text so far and the new delta."""
        endpoint, request = self._completion_request(prompt, formatted, kwargs)

        def gen() -> CompletionResponseGen:
            with contextlib.closing(self._iter_sync(endpoint, request)) as pieces:
                for text, delta in pieces:
                    yield CompletionResponse(text=text, delta=delta)

        return gen()

    @llm_chat_callback()
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        """Answer the conversation, using the model's chat template."""
        outcome = self._generate("chat", self._chat_request(messages, kwargs))
        return ChatResponse(message=_assistant(outcome.text), raw=outcome.raw)

    @llm_chat_callback()
    def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseGen:
        """Like `chat`, streaming; each response has the message so far and the new delta."""
        request = self._chat_request(messages, kwargs)

        def gen() -> ChatResponseGen:
            with contextlib.closing(self._iter_sync("chat", request)) as pieces:
                for text, delta in pieces:
                    yield ChatResponse(message=_assistant(text), delta=delta)

        return gen()

    # --- LlamaIndex API: async -------------------------------------------------------------

    async def _agenerate(self, endpoint: Endpoint, request: dict[str, Any]) -> _Outcome:
        async with contextlib.aclosing(self._iter_async(endpoint, request)) as pieces:
            async for piece in pieces:
                if isinstance(piece, _Outcome):
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

        async def gen() -> CompletionResponseAsyncGen:
            async with contextlib.aclosing(self._iter_async(endpoint, request)) as pieces:
                async for piece in pieces:
                    if not isinstance(piece, _Outcome):
                        yield CompletionResponse(text=piece[0], delta=piece[1])

        return gen()

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
        first = outcome.logprobs[0].get("top_logprobs") or [outcome.logprobs[0]]
        out: dict[str, float] = {}
        for alternative in first:
            token, logprob = str(alternative.get("token", "")), alternative.get("logprob")
            if isinstance(logprob, int | float):
                out[token] = max(out.get(token, -math.inf), float(logprob))
        return out

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

        async def gen() -> ChatResponseAsyncGen:
            async with contextlib.aclosing(self._iter_async("chat", request)) as pieces:
                async for piece in pieces:
                    if not isinstance(piece, _Outcome):
                        yield ChatResponse(message=_assistant(piece[0]), delta=piece[1])

        return gen()
