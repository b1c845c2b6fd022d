"""`FakeOpenAIServer`: the fake OpenAI / Azure OpenAI server's lifecycle, script and routing.

The endpoints' bodies are in `chat`, `embeddings` and `errors`.
"""

from __future__ import annotations

import functools
import itertools
import json
import logging
import threading
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from citeflow.testing.openai_replies import (
    Kind,
    RecordedRequest,
    Reply,
    ReplyScript,
    default_reply,
)
from citeflow.testing.openai_server.chat import DropConnection, StreamCount, chat_response
from citeflow.testing.openai_server.embeddings import embeddings_response
from citeflow.testing.openai_server.errors import error_response
from citeflow.testing.serving import ThreadedServer, serve_in_thread

__all__ = ["FakeOpenAIServer"]


@dataclass
class _Fault:
    status: int
    message: str | None
    retry_after: float | None
    kind: Kind | Literal["any"]
    remaining: int | None  # None: forever


def _not_a_drop(record: logging.LogRecord) -> bool:
    """Keeps uvicorn from logging a traceback for a deliberate `DropConnection`."""
    exc = record.exc_info[1] if record.exc_info else None
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return not isinstance(exc, DropConnection)


# --- the server ----------------------------------------------------------------------------------


class FakeOpenAIServer:
    """Fake OpenAI / Azure OpenAI HTTP server in a background thread (see the package doc).

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
        self._streams = StreamCount()
        self._served: ThreadedServer | None = None
        self._port: int | None = None  # kept after `stop`
        self.script(replies)

    # --- lifecycle -------------------------------------------------------------------------

    def start(self, timeout: float = 10.0) -> FakeOpenAIServer:
        """Bind a free port, start serving in a daemon thread and wait until it accepts."""
        if self._served is not None:
            return self
        logging.getLogger("uvicorn.error").addFilter(_not_a_drop)
        config = uvicorn.Config(
            self._app(),
            log_config=None,
            access_log=False,
            lifespan="off",
            backlog=4096,
            timeout_keep_alive=30,
            timeout_graceful_shutdown=1,
        )
        self._served = serve_in_thread(
            config, host=self.host, port=self._bind_port, timeout=timeout
        )
        self._port = self._served.port
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop serving (open streams are cut after one second) and join the thread."""
        if self._served is not None:
            self._served.stop(timeout)
        self._served = None

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

    #: Endpoint for Azure OpenAI clients (``CITEFLOW_AZURE_ENDPOINT``): `url`.
    azure_endpoint = url

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

    def fail_next(
        self,
        status: int = 500,
        *,
        times: int | None = 1,
        kind: Kind | Literal["any"] = "any",
        message: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        """Answer the next `times` requests of `kind` (None: all of them) with `status`."""
        with self._lock:
            self._faults.append(_Fault(status, message, retry_after, kind, times))

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
        return self._streams.active

    @property
    def peak_streams(self) -> int:
        """Most streaming responses in progress at once so far."""
        return self._streams.peak

    # --- the ASGI app ----------------------------------------------------------------------

    def _app(self) -> Starlette:
        def route(path: str, kind: Kind, methods: list[str]) -> Route:
            return Route(path, functools.partial(self._handle, kind=kind), methods=methods)

        azure = "/openai/deployments/{deployment}"
        return Starlette(
            routes=[
                route("/v1/chat/completions", "chat", ["POST"]),
                route("/v1/embeddings", "embeddings", ["POST"]),
                route("/v1/models", "models", ["GET"]),
                route(f"{azure}/chat/completions", "chat", ["POST"]),
                route(f"{azure}/embeddings", "embeddings", ["POST"]),
                route("/{path:path}", "other", ["GET", "POST", "PUT", "PATCH", "DELETE"]),
            ]
        )

    async def _handle(self, request: Request, kind: Kind) -> Response:
        try:
            body: Any = json.loads(await request.body())
        except ValueError:  # no body, or not JSON
            body = None
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
            return error_response(400, "Missing required query parameter: api-version.")
        if kind == "other":
            return error_response(404, f"Unknown path {recorded.path}.")
        if (fault := self._take_fault(kind)) is not None:
            return error_response(fault.status, fault.message, retry_after=fault.retry_after)
        if kind == "models":
            data = [
                {"id": m, "object": "model", "created": 0, "owned_by": "citeflow-fake"}
                for m in self.models
            ]
            return JSONResponse({"object": "list", "data": data})
        if not isinstance(body, dict):
            return error_response(400, "The request body must be a JSON object.")
        if kind == "embeddings":
            return embeddings_response(
                recorded, default_dim=self.embedding_dim, max_input_tokens=self.max_input_tokens
            )
        return await chat_response(
            recorded,
            self._next_reply(recorded),
            completion_id=next(self._ids),
            default_ttft=self.ttft,
            default_tokens_per_second=self.tokens_per_second,
            always_stream_usage=self.always_stream_usage,
            streams=self._streams,
        )

    def _check_auth(self, request: RecordedRequest) -> Response | None:
        if self.api_keys is None:
            return None
        offered = [k for k in (request.bearer_token, request.headers.get("api-key")) if k]
        if any(key in self.api_keys for key in offered):
            return None
        if not offered:
            return error_response(401, "You didn't provide an API key.")
        return error_response(401)

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
