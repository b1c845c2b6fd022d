"""llama.cpp's server engine run in-process by ``xllamacpp``, one generation at a time, streamed
to a thread or an event loop and stoppable at any moment.

``xllamacpp.Server`` loads the model once; ``handle_chat_completions`` takes an OpenAI-style
request and calls a Python callback with each streamed chunk, and a True from the callback stops
the generation (llama.cpp cancels the task and frees the slot). Requests always stream, with
``return_progress`` so the callback also fires during prompt processing (once per ``n_batch``
tokens): a consumer that goes away — a closed stream, a cancelled task — stops the work within
about a second, even during a long prefill. One lock serializes generations.

The engine also opens an HTTP listener on a random 127.0.0.1 port; it is given a random API key,
so nothing else can use it, and its web UI is off.
"""

from __future__ import annotations

import asyncio
import logging
import os
import queue
import secrets
import threading
import time
from collections.abc import AsyncGenerator, Callable, Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from citeflow.errors import ModelError

__all__ = ["Endpoint", "Generation", "LlamaCppEngine", "default_threads", "import_xllamacpp"]

log = logging.getLogger("citeflow.llm")

Endpoint = Literal["chat", "completion"]

_LOCK_POLL = 0.05


def default_threads() -> int:
    """One thread per usable core."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


@dataclass
class Generation:
    """What one generation produced."""

    text: str = ""
    raw: dict[str, Any] = field(default_factory=dict)
    logprobs: list[dict[str, Any]] = field(default_factory=list)
    """per generated token, its log-probability and its top alternatives (when asked for)"""


@dataclass
class _End:
    """The last item a worker thread emits: the outcome, or the error."""

    outcome: Generation | None = None
    error: BaseException | None = None

    def result(self) -> Generation:
        """The outcome; the error raised."""
        if self.error is not None:
            raise self.error
        assert self.outcome is not None
        return self.outcome


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
        self.outcome = Generation()
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
        if "timings" in chunk or "usage" in chunk:
            self.outcome.raw.update({k: v for k, v in chunk.items() if k != "choices"})
        return self.stop.is_set()


def import_xllamacpp() -> Any:
    """The ``xllamacpp`` module, or a one-line ModelError saying how to install it."""
    try:
        import xllamacpp
    except ImportError:
        raise ModelError(
            "the local LLM needs xllamacpp; install it with: pip install 'citeflow[local]'"
        ) from None
    return xllamacpp


def _load(
    model_path: Path, context_window: int, n_batch: int, threads: int, temperature: float
) -> Any:
    """A running ``xllamacpp.Server`` with ``model_path`` loaded."""
    xllamacpp = import_xllamacpp()
    params = xllamacpp.CommonParams()
    params.model.path = str(model_path)
    params.n_ctx = context_window
    params.n_parallel = 1  # one slot gets the whole context; the lock serializes anyway
    params.n_batch = n_batch
    params.n_ubatch = n_batch
    params.cpuparams.n_threads = threads
    params.cpuparams_batch.n_threads = threads
    params.sampling.temp = temperature
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
            f"llama.cpp cannot load {model_path} ({exc}); the file may be corrupt or "
            "not an LLM GGUF, or memory may be short"
        ) from None
    log.info(
        "loaded %s in %.1f s (n_ctx %d, %d threads)",
        model_path.name,
        time.perf_counter() - start,
        context_window,
        threads,
    )
    return server


class LlamaCppEngine:
    """A GGUF model loaded by llama.cpp; `generate` blocks, `stream` and `astream` generate in a
    worker thread. Call `close` to free the model."""

    def __init__(
        self,
        model_path: Path,
        *,
        context_window: int,
        n_batch: int,
        threads: int,
        temperature: float,
        name: str,
    ) -> None:
        """Load ``model_path``; `ModelError` if xllamacpp is missing or cannot load it."""
        self.name = name
        self.last_stats: dict[str, Any] = {}
        """llama.cpp's timings of the last generation (``prompt_n``, ``prompt_ms``, ...)"""
        self._lock = threading.Lock()
        self._server: Any = _load(model_path, context_window, n_batch, threads, temperature)

    def close(self) -> None:
        """Free the model; later calls fail with `ModelError`."""
        with self._lock:
            self._server = None

    def generate(
        self,
        endpoint: Endpoint,
        request: dict[str, Any],
        stop: threading.Event | None = None,
        on_delta: Callable[[str], None] = lambda _: None,
    ) -> Generation:
        """Generate, holding the lock; ``on_delta`` gets each piece of text as it comes, and a
        set ``stop`` ends the generation early."""
        stop = stop if stop is not None else threading.Event()
        while not self._lock.acquire(timeout=_LOCK_POLL):
            if stop.is_set():
                return Generation()
        try:
            if stop.is_set():
                return Generation()
            server = self._server
            if server is None:
                raise ModelError(f"the local LLM {self.name} is closed")
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
        if (raised := collector.exception) is not None:
            if isinstance(raised, Exception) and not isinstance(raised, ModelError):
                raise ModelError(f"local LLM failed: {type(raised).__name__}: {raised}") from raised
            raise raised
        if collector.error is not None:
            raise ModelError(f"local LLM failed: {collector.error}")
        outcome = collector.outcome
        outcome.text = "".join(collector.parts)
        timings = outcome.raw.get("timings")
        self.last_stats = dict(timings) if isinstance(timings, dict) else {}
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
                outcome = self.generate(endpoint, request, stop, emit)
            except BaseException as exc:
                emit(_End(error=exc))
            else:
                emit(_End(outcome=outcome))

        threading.Thread(target=work, name="citeflow-llm", daemon=True).start()

    def stream(
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
            item.result()
        finally:
            stop.set()

    async def astream(
        self, endpoint: Endpoint, request: dict[str, Any]
    ) -> AsyncGenerator[tuple[str, str] | Generation, None]:
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
            yield item.result()
        finally:
            stop.set()
