"""A fake OpenAI + Azure OpenAI server: real HTTP on 127.0.0.1, one background thread.

It serves, on a random free port:

* OpenAI: ``POST /v1/chat/completions`` (JSON or SSE streaming), ``POST /v1/embeddings``,
  ``GET /v1/models``;
* Azure OpenAI: ``POST /openai/deployments/{deployment}/chat/completions`` and
  ``.../embeddings``, which need the ``api-version`` query parameter (HTTP 400 without it).

Usage::

    with FakeOpenAIServer(replies=["Paris is the capital [1].", Reply.error(500)]) as server:
        settings = Settings(_env_file=None, llm={"provider": "openai"},
                            openai={"base_url": server.openai_base_url})  # or azure_endpoint
        ...
        assert server.requests[-1].headers["authorization"] == "Bearer ..."

Replies come from a script (`FakeOpenAIServer.script`): a string or `Reply` for every request, a
list consumed in order (then `default_reply`), or a callable ``(RecordedRequest) -> str | Reply``.
Timing: `ttft` seconds before the first token and `tokens_per_second` after it (per server, or per
`Reply`); failures: `Reply.error` (HTTP 4xx/5xx with an OpenAI-style body), `Reply.drop` (the
connection is cut mid-response) and `FakeOpenAIServer.fail_next` (any endpoint, N times).

Everything runs on one asyncio event loop in one thread (uvicorn + Starlette): a streaming response
costs a coroutine and its sleeps, so 64+ concurrent streams are cheap.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import logging
import socket
import struct
import sys
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import suppress
from dataclasses import dataclass
from typing import Any, Literal

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from citeflow.testing.openai_replies import (
    Kind,
    RecordedRequest,
    Reply,
    ReplyScript,
    count_tokens,
    default_reply,
    fake_embedding,
    message_text,
    split_tokens,
)

__all__ = [
    "FakeOpenAIServer",
    "RecordedRequest",
    "Reply",
    "ReplyScript",
    "default_reply",
    "fake_embedding",
    "main",
    "split_tokens",
]

_JSON_SEPARATORS = (",", ":")


@dataclass
class _Fault:
    status: int
    message: str | None
    retry_after: float | None
    kind: Kind | Literal["any"]
    remaining: int | None  # None: forever


class _DropConnection(Exception):
    """Raised inside a response body to make uvicorn cut the connection."""


class _QuietDrops(logging.Filter):
    """Keeps uvicorn from logging a traceback for a deliberate `_DropConnection`."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
            exc = exc.exceptions[0]
        return not isinstance(exc, _DropConnection)


_QUIET_DROPS = _QuietDrops()
_DEFAULT_ERRORS = {
    400: ("invalid_request_error", None, "Bad request."),
    401: ("invalid_request_error", "invalid_api_key", "Incorrect API key provided."),
    403: ("permission_error", None, "Forbidden."),
    404: ("invalid_request_error", "not_found", "Not found."),
    408: ("timeout", None, "Request timed out."),
    429: ("rate_limit_exceeded", "rate_limit_exceeded", "Rate limit reached, retry later."),
    500: ("server_error", None, "The server had an error while processing your request."),
    502: ("server_error", None, "Bad gateway."),
    503: ("server_error", None, "The engine is currently overloaded."),
}


def _error_response(
    status: int, message: str | None = None, *, retry_after: float | None = None
) -> JSONResponse:
    kind, code, default = _DEFAULT_ERRORS.get(status, ("server_error", None, f"HTTP {status}"))
    headers = {"retry-after": f"{retry_after:g}"} if retry_after is not None else None
    body = {"error": {"message": message or default, "type": kind, "param": None, "code": code}}
    return JSONResponse(body, status_code=status, headers=headers)


def _logprobs(reply: Reply, body: dict[str, Any]) -> dict[str, Any] | None:
    """A chat completion's ``logprobs`` for the reply's first token, as OpenAI sends them."""
    if not reply.top_logprobs or not body.get("logprobs"):
        return None
    ranked = sorted(reply.top_logprobs.items(), key=lambda kv: -kv[1])
    top = [
        {"token": token, "logprob": logprob, "bytes": list(token.encode())}
        for token, logprob in ranked[: int(body.get("top_logprobs") or 0)]
    ]
    first = {"token": ranked[0][0], "logprob": ranked[0][1], "bytes": list(ranked[0][0].encode())}
    return {"content": [{**first, "top_logprobs": top}], "refusal": None}


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=_JSON_SEPARATORS)


# --- the server ----------------------------------------------------------------------------------


class FakeOpenAIServer:
    """Fake OpenAI / Azure OpenAI HTTP server in a background thread (see the module doc).

    Args:
        replies: the initial reply script (see `script`).
        embedding_dim: vector size when a request gives no ``dimensions``.
        max_input_tokens: an embeddings request with a longer input (in `split_tokens` tokens) is
            refused with HTTP 400, as OpenAI refuses one over a model's 8,191 tokens; None: no
            limit.
        ttft: default seconds before the first token (also delays non-streaming replies).
        tokens_per_second: default token rate after the first token; None or 0: no delay.
        api_keys: if given, every request needs ``Authorization: Bearer <key>`` or
            ``api-key: <key>`` with one of these keys, else HTTP 401.
        models: ids listed by ``GET /v1/models``.
        always_stream_usage: send the usage chunk on every stream, not only when the request
            asks with ``stream_options.include_usage``.
        record: keep every request in `requests` (turn off for long benchmarks).
        host: interface to bind.
        port: port to bind; 0: a free one.
    """

    def __init__(
        self,
        replies: ReplyScript = None,
        *,
        embedding_dim: int = 384,
        max_input_tokens: int | None = None,
        ttft: float = 0.0,
        tokens_per_second: float | None = None,
        api_keys: str | Iterable[str] | None = None,
        models: Sequence[str] = ("fake-model",),
        always_stream_usage: bool = False,
        record: bool = True,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.embedding_dim = embedding_dim
        self.max_input_tokens = max_input_tokens
        self.ttft = ttft
        self.tokens_per_second = tokens_per_second
        self.api_keys: frozenset[str] | None = (
            None
            if api_keys is None
            else frozenset([api_keys] if isinstance(api_keys, str) else api_keys)
        )
        self.models = list(models)
        self.always_stream_usage = always_stream_usage
        self.record = record
        self.host = host
        self._bind_port = port

        self._lock = threading.Lock()
        self._requests: list[RecordedRequest] = []
        self._queue: deque[str | Reply] = deque()
        self._responder: Callable[[RecordedRequest], str | Reply] | None = None
        self._faults: list[_Fault] = []
        self._ids = itertools.count(1)
        self._active_streams = 0
        self._peak_streams = 0
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._port: int | None = None
        self.script(replies)

    # --- lifecycle -------------------------------------------------------------------------

    def start(self, timeout: float = 10.0) -> FakeOpenAIServer:
        """Bind a free port, start serving in a daemon thread and wait until it accepts."""
        if self._thread is not None:
            return self
        logging.getLogger("uvicorn.error").addFilter(_QUIET_DROPS)
        # IPPROTO_TCP lets asyncio see a TCP socket and set TCP_NODELAY (else ~40 ms per reply)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self._bind_port))
        self._port = int(sock.getsockname()[1])
        config = uvicorn.Config(
            self._app(),
            log_config=None,
            access_log=False,
            lifespan="off",
            backlog=4096,
            timeout_keep_alive=30,
            timeout_graceful_shutdown=1,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run,
            kwargs={"sockets": [sock]},
            name=f"fake-openai-{self._port}",
            daemon=True,
        )
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("the fake OpenAI server did not start")
            time.sleep(0.005)
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop serving (open streams are cut after one second) and join the thread."""
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout)
        self._server = None
        self._thread = None

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # --- addresses -------------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The bound port (after `start`)."""
        if self._port is None:
            raise RuntimeError("the fake OpenAI server is not started")
        return self._port

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://{self.host}:{self.port}"

    @property
    def openai_base_url(self) -> str:
        """Base URL for OpenAI clients (``CITEFLOW_OPENAI_BASE_URL``): `url` + ``/v1``."""
        return f"{self.url}/v1"

    @property
    def azure_endpoint(self) -> str:
        """Endpoint for Azure OpenAI clients (``CITEFLOW_AZURE_ENDPOINT``): `url`."""
        return self.url

    # --- scripting -------------------------------------------------------------------------

    def script(self, replies: ReplyScript) -> None:
        """Set how chat requests are answered (replaces the previous script).

        * None: `default_reply` for every request;
        * a `str` or `Reply`: that, for every request;
        * a list: one item per request, in order, then `default_reply`;
        * a callable ``(RecordedRequest) -> str | Reply``: called for every request (on the
          server's event loop: keep it fast and non-blocking).
        """
        with self._lock:
            self._queue.clear()
            self._responder = None
            if isinstance(replies, str | Reply):
                constant = replies
                self._responder = lambda _request: constant
            elif callable(replies):
                self._responder = replies
            elif replies is not None:
                self._queue.extend(replies)

    def add_replies(self, *replies: str | Reply) -> None:
        """Append replies to the scripted list."""
        with self._lock:
            self._queue.extend(replies)

    def fail_next(
        self,
        status: int = 500,
        *,
        times: int | None = 1,
        kind: Kind | Literal["any"] = "any",
        message: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        """Answer the next `times` requests of `kind` (None: all, until `clear`) with `status`."""
        with self._lock:
            self._faults.append(_Fault(status, message, retry_after, kind, times))

    def clear(self) -> None:
        """Forget recorded requests, the script and pending failures."""
        with self._lock:
            self._requests.clear()
            self._faults.clear()
        self.script(None)

    # --- inspection ------------------------------------------------------------------------

    @property
    def requests(self) -> list[RecordedRequest]:
        """A copy of every request received so far, oldest first."""
        with self._lock:
            return list(self._requests)

    def requests_of(self, kind: Kind) -> list[RecordedRequest]:
        """Recorded requests of one kind (``"chat"``, ``"embeddings"``, ``"models"``)."""
        return [r for r in self.requests if r.kind == kind]

    @property
    def last_request(self) -> RecordedRequest:
        """The most recent request (AssertionError when there is none)."""
        requests = self.requests
        assert requests, "the fake OpenAI server received no request"
        return requests[-1]

    @property
    def active_streams(self) -> int:
        """Streaming responses in progress now."""
        return self._active_streams

    @property
    def peak_streams(self) -> int:
        """Most streaming responses in progress at once so far."""
        return self._peak_streams

    # --- the ASGI app ----------------------------------------------------------------------

    def _app(self) -> Starlette:
        async def chat(request: Request) -> Response:
            return await self._handle(request, "chat")

        async def embeddings(request: Request) -> Response:
            return await self._handle(request, "embeddings")

        async def models(request: Request) -> Response:
            return await self._handle(request, "models")

        async def other(request: Request) -> Response:
            return await self._handle(request, "other")

        all_methods = ["GET", "POST", "PUT", "PATCH", "DELETE"]
        return Starlette(
            routes=[
                Route("/v1/chat/completions", chat, methods=["POST"]),
                Route("/v1/embeddings", embeddings, methods=["POST"]),
                Route("/v1/models", models, methods=["GET"]),
                Route("/openai/deployments/{deployment}/chat/completions", chat, methods=["POST"]),
                Route("/openai/deployments/{deployment}/embeddings", embeddings, methods=["POST"]),
                Route("/{path:path}", other, methods=all_methods),
            ]
        )

    async def _handle(self, request: Request, kind: Kind) -> Response:
        raw = await request.body()
        body: Any = None
        bad_json = False
        if raw:
            try:
                body = json.loads(raw)
            except ValueError:
                bad_json = True
        deployment = request.path_params.get("deployment")
        recorded = RecordedRequest(
            method=request.method,
            path=request.url.path,
            query=dict(request.query_params),
            headers={k.lower(): v for k, v in request.headers.items()},
            json=body,
            kind=kind,
            deployment=deployment if isinstance(deployment, str) else None,
        )
        if self.record:
            with self._lock:
                self._requests.append(recorded)

        if (denied := self._check_auth(recorded)) is not None:
            return denied
        if recorded.is_azure and not recorded.query.get("api-version"):
            return _error_response(400, "Missing required query parameter: api-version.")
        if kind == "other":
            return _error_response(404, f"Unknown path {recorded.path}.")
        if (fault := self._take_fault(kind)) is not None:
            return _error_response(fault.status, fault.message, retry_after=fault.retry_after)
        if kind == "models":
            return self._models()
        if bad_json or not isinstance(body, dict):
            return _error_response(400, "The request body must be a JSON object.")
        if kind == "embeddings":
            return self._embeddings(recorded)
        return await self._chat(recorded)

    def _check_auth(self, request: RecordedRequest) -> Response | None:
        if self.api_keys is None:
            return None
        offered = [k for k in (request.bearer_token, request.headers.get("api-key")) if k]
        if any(key in self.api_keys for key in offered):
            return None
        if not offered:
            return _error_response(401, "You didn't provide an API key.")
        return _error_response(401)

    def _take_fault(self, kind: Kind) -> _Fault | None:
        with self._lock:
            for fault in self._faults:
                if fault.kind in ("any", kind):
                    if fault.remaining is not None:
                        fault.remaining -= 1
                        if fault.remaining <= 0:
                            self._faults.remove(fault)
                    return fault
        return None

    def _next_reply(self, request: RecordedRequest) -> Reply:
        with self._lock:
            responder = self._responder
            item: str | Reply | None = self._queue.popleft() if self._queue else None
        if item is None:
            item = responder(request) if responder is not None else default_reply(request)
        return Reply(text=item) if isinstance(item, str) else item

    # --- endpoints ---------------------------------------------------------------------------

    def _models(self) -> Response:
        data = [
            {"id": m, "object": "model", "created": 0, "owned_by": "citeflow-fake"}
            for m in self.models
        ]
        return JSONResponse({"object": "list", "data": data})

    def _embeddings(self, request: RecordedRequest) -> Response:
        body = request.json
        raw_input = body.get("input")
        texts: list[str]
        if isinstance(raw_input, str):
            texts = [raw_input]
        elif isinstance(raw_input, list) and all(isinstance(t, str) for t in raw_input):
            texts = list(raw_input)
        elif isinstance(raw_input, list) and all(isinstance(t, int) for t in raw_input):
            texts = [" ".join(map(str, raw_input))]
        elif isinstance(raw_input, list) and all(isinstance(t, list) for t in raw_input):
            texts = [" ".join(map(str, t)) for t in raw_input]
        else:
            return _error_response(400, "'input' must be a string or a list of strings/tokens.")
        if not texts:
            return _error_response(400, "'input' must not be empty.")
        limit = self.max_input_tokens
        longest = max(count_tokens(t) for t in texts)
        if limit is not None and longest > limit:
            return _error_response(
                400,
                f"This model's maximum context length is {limit} tokens, however you requested "
                f"{longest} tokens. Please reduce your prompt.",
            )
        dim = body.get("dimensions") or self.embedding_dim
        if not isinstance(dim, int) or dim <= 0:
            return _error_response(400, "'dimensions' must be a positive integer.")
        as_base64 = body.get("encoding_format") == "base64"
        data: list[dict[str, Any]] = []
        for index, text in enumerate(texts):
            vector = fake_embedding(text, dim)
            embedding: Any = (
                base64.b64encode(struct.pack(f"<{dim}f", *vector)).decode("ascii")
                if as_base64
                else vector
            )
            data.append({"object": "embedding", "index": index, "embedding": embedding})
        tokens = sum(count_tokens(t) for t in texts)
        return JSONResponse(
            {
                "object": "list",
                "data": data,
                "model": request.model or request.deployment or "fake-embedding",
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            }
        )

    async def _chat(self, request: RecordedRequest) -> Response:
        reply = self._next_reply(request)
        if reply.status != 200:
            return _error_response(reply.status, reply.error_message, retry_after=reply.retry_after)
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
        ttft = self.ttft if reply.ttft is None else reply.ttft
        rate = reply.tokens_per_second
        if rate is None:
            rate = self.tokens_per_second
        interval = 1.0 / rate if rate else 0.0
        head = {
            "id": f"chatcmpl-fake-{next(self._ids)}",
            "created": int(time.time()),
            "model": request.model or request.deployment or "fake-model",
            "system_fingerprint": "fp_fake",
        }
        if request.stream:
            options = body.get("stream_options")
            include_usage = self.always_stream_usage or (
                isinstance(options, dict) and bool(options.get("include_usage"))
            )
            stream = self._sse(
                head, tokens, finish_reason, usage if include_usage else None,
                ttft, interval, reply.drop_after,
            )  # fmt: skip
            return StreamingResponse(
                stream,
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

    async def _sse(
        self,
        head: dict[str, Any],
        tokens: list[str],
        finish_reason: str,
        usage: dict[str, int] | None,
        ttft: float,
        interval: float,
        drop_after: int | None,
    ) -> AsyncIterator[bytes]:
        def event(choices: list[dict[str, Any]], **extra: Any) -> bytes:
            chunk = {**head, "object": "chat.completion.chunk", "choices": choices, **extra}
            return f"data: {_dumps(chunk)}\n\n".encode()

        def delta(content: dict[str, Any], finish: str | None = None) -> list[dict[str, Any]]:
            return [{"index": 0, "delta": content, "logprobs": None, "finish_reason": finish}]

        self._active_streams += 1
        self._peak_streams = max(self._peak_streams, self._active_streams)
        try:
            loop = asyncio.get_running_loop()
            start = loop.time() + ttft
            if ttft > 0:
                await asyncio.sleep(ttft)
            if not tokens:
                yield event(delta({"role": "assistant", "content": ""}))
            for i, token in enumerate(tokens):
                if drop_after is not None and i >= drop_after:
                    raise _DropConnection
                if interval and i:
                    wait = start + i * interval - loop.time()
                    if wait > 0:
                        await asyncio.sleep(wait)
                content = {"role": "assistant", "content": token} if i == 0 else {"content": token}
                yield event(delta(content))
            if drop_after is not None:
                raise _DropConnection
            yield event(delta({}, finish_reason))
            if usage is not None:
                yield event([], usage=usage)
            yield b"data: [DONE]\n\n"
        finally:
            self._active_streams -= 1


async def _cut(payload: bytes) -> AsyncIterator[bytes]:
    """Send half of `payload`, then cut the connection."""
    yield payload[: len(payload) // 2]
    raise _DropConnection


# --- command line -------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> None:
    """Serve until interrupted: ``python -m citeflow.testing.openai_server --tokens-per-second 50``.

    Handy for benchmarks, where the fake should not share a process (and a GIL) with the client.
    """
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: a free port")
    parser.add_argument("--ttft", type=float, default=0.0, help="seconds to the first token")
    parser.add_argument("--tokens-per-second", type=float, default=None)
    parser.add_argument("--reply-tokens", type=int, default=None, help="fixed reply length")
    parser.add_argument("--embedding-dim", type=int, default=384)
    parser.add_argument("--api-key", action="append", default=None, help="required key(s)")
    args = parser.parse_args(argv)
    replies = Reply.of_tokens(args.reply_tokens) if args.reply_tokens else None
    server = FakeOpenAIServer(
        replies,
        embedding_dim=args.embedding_dim,
        ttft=args.ttft,
        tokens_per_second=args.tokens_per_second,
        api_keys=args.api_key,
        record=False,
        host=args.host,
        port=args.port,
    )
    with server:
        sys.stdout.write(f"fake OpenAI: {server.openai_base_url}  Azure: {server.azure_endpoint}\n")
        sys.stdout.flush()
        with suppress(KeyboardInterrupt):
            while True:
                time.sleep(3600)


if __name__ == "__main__":
    main()
