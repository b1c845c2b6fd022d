"""The HTTP server: an OpenAI-compatible chat API over citeflow's knowledge bases.

``create_app(engine)`` assembles the FastAPI app around an `Engine` (tests pass one built from
fakes); ``serve(settings)`` builds the engine once from the settings and runs uvicorn::

    CITEFLOW_API_KEYS=a-long-secret citeflow serve --host 0.0.0.0 --port 8000

(without keys, a host other than loopback is refused unless ``--insecure-no-auth``: see
`citeflow.api.exposure`). Open WebUI: add an OpenAI connection to ``http://HOST:PORT/v1`` with
one of ``CITEFLOW_API_KEYS``; each knowledge base is a model ``citeflow-<collection>``.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI
from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from citeflow import __version__
from citeflow.api import docs, documents, errors, metrics, routes, search, skills
from citeflow.api.engine import Engine
from citeflow.api.exposure import check_bind, docs_enabled
from citeflow.api.limits import ChatLimits
from citeflow.api.links import DocumentLinks
from citeflow.api.metrics import Metrics
from citeflow.api.throttle import FailedKeys
from citeflow.errors import ConfigError
from citeflow.settings import EmbeddingSettings, ServerSettings, Settings
from citeflow.tracing import fastapi_telemetry, installed

log = logging.getLogger("citeflow.server")


def create_app(engine: Engine) -> FastAPI:
    """The FastAPI app serving ``engine`` (which the caller owns and closes; the app closes the
    engine's event-loop-bound clients when it shuts down).

    The API docs are served when ``CITEFLOW_API_DOCS`` allows, behind the key (`citeflow.api.docs`).
    """

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        await engine.aclose()

    app = FastAPI(
        lifespan=lifespan,
        title="citeflow",
        version=__version__,
        summary="Answers questions over your documents with numbered, verifiable citations.",
        openapi_url=None,  # citeflow.api.docs serves them, when allowed and behind the key
        docs_url=None,
        redoc_url=None,
        telemetry=fastapi_telemetry(),  # request spans; see citeflow.tracing
    )
    server = engine.settings.server
    app.state.engine = engine
    app.state.limits = ChatLimits(server.max_concurrent_chats, server.chats_per_minute)
    app.state.links = DocumentLinks.from_settings(server)
    app.state.metrics = Metrics()
    app.state.failed_keys = FailedKeys(server.auth_max_failures, server.auth_failure_window)
    errors.install(app)
    docs.install(app)
    app.include_router(routes.health)
    app.include_router(routes.api)
    app.include_router(documents.router)
    app.include_router(documents.files)
    app.include_router(search.router)
    app.include_router(skills.router)
    if docs_enabled(server):
        app.include_router(docs.router)
    if server.metrics:
        app.include_router(metrics.router)
    app.add_middleware(RequestLog, metrics=app.state.metrics)
    if server.cors_origins:  # browsers calling the API: Open WebUI Direct Connections
        app.add_middleware(
            CORSMiddleware,
            allow_origins=server.cors_origins,
            allow_methods=["GET", "POST", "DELETE"],
            allow_headers=["Authorization", "Content-Type", "X-Citeflow-Source-List"],
            max_age=600,
        )
    return app


class RequestLog:
    """Logs each request's method, path, status and time to its response headers, and counts
    it in the metrics, timed to the end of its response (`Metrics.requested`). Pure ASGI, so
    streams pass through untouched.

    An unhandled exception is logged and counted as status 500 here: Starlette's outermost
    middleware sends its 500 response (the generic body of `citeflow.api.errors`) outside this one.
    """

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status: int | None = None

        def line(code: int) -> None:
            ms = round(1000 * (time.perf_counter() - started))
            extra: dict[str, Any] = {"status": code, "ms": ms}
            user = scope.get("state", {}).get("user")  # `citeflow.api.users`
            if user:
                extra["user"] = user
            log.info("%s %s %d", scope["method"], scope["path"], code, extra=extra)

        async def send_logged(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                line(status)
            await send(message)

        try:
            await self.app(scope, receive, send_logged)
        except Exception:
            if status is None:
                line(500)
            raise
        finally:
            self.metrics.requested(scope, status or 500, time.perf_counter() - started)


def use_embed_threads(settings: EmbeddingSettings) -> None:
    """Run the local embedder on ``serve_embed_threads`` torch threads (0: torch's default),
    when it runs on torch (ONNX Runtime's threads are set per session, `build_embed_model`).

    torch's default, one thread per core, suits a batch job; in the server the event loop needs
    a core of its own, and torch's threads spin-wait for each other: with every core busy, one
    question's embedding takes ten times longer. Query embeddings are batched
    (`citeflow.query.batching`), so one thread keeps up.
    """
    if settings.provider != "local" or settings.backend != "torch" or not settings.serve_threads:
        return
    import torch

    torch.set_num_threads(settings.serve_threads)


def use_one_blas_thread() -> Any:
    """Run numpy's BLAS on one thread while serving; returns the limiter (to restore it).

    Requests use numpy's BLAS for small products (the query against candidate vectors).
    OpenBLAS splits each over every core and its threads spin-wait for each other, which with
    the server's other threads busy cost a product ten times its one-thread time. Requests run
    side by side; each needs no more than one core.
    """
    from threadpoolctl import threadpool_limits

    return threadpool_limits(1, user_api="blas")


#: gc thresholds while serving: a young generation of 20k objects instead of 700 (see `tune_gc`).
GC_THRESHOLDS = (20_000, 20, 20)


def tune_gc() -> None:
    """Make the cyclic garbage collector cheap for a long-running server.

    At start-up the process holds most of the objects it ever will (torch, the embedding model,
    llama-index, the SDKs: nearly a million), and every full collection walked them all: about
    0.4 s with the GIL held, several times a minute under load (a fifth of the server's CPU, and
    a stall of every stream). `gc.freeze` moves them to the permanent generation, which
    collections skip; a larger young generation lets the short-lived objects of each request
    (events, chunks, nodes) die by reference counting before a collection looks at them.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


def loop_and_http(settings: ServerSettings) -> tuple[str, str]:
    """uvicorn's event loop and HTTP implementation: ``auto`` resolved to what is installed.

    uvloop and httptools (C) cost a fraction of asyncio's and h11's (pure Python) CPU per
    request and per streamed chunk.

    Raises:
        ConfigError: uvloop or httptools is asked for but not installed.
    """
    chosen: list[str] = []
    for asked, fast, slow, field in (
        (settings.uvicorn_loop, "uvloop", "asyncio", "CITEFLOW_UVICORN_LOOP"),
        (settings.uvicorn_http, "httptools", "h11", "CITEFLOW_UVICORN_HTTP"),
    ):
        if asked == "auto":
            chosen.append(fast if installed(fast) else slow)
            continue
        if asked == fast and not installed(fast):
            raise ConfigError(f"{field}={fast}, but {fast} is not installed")
        chosen.append(asked)
    return chosen[0], chosen[1]


def uvicorn_config(app: Any, settings: ServerSettings) -> Any:
    """The `uvicorn.Config` that `serve` runs ``app`` with."""
    import uvicorn

    loop, http = loop_and_http(settings)
    return uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        loop=loop,
        http=http,
        log_level="warning",
        timeout_graceful_shutdown=5,
    )


def serve(settings: Settings, *, insecure_no_auth: bool = False) -> None:
    """Build the engine from ``settings`` and serve it on ``CITEFLOW_HOST``:``CITEFLOW_PORT``.

    Blocks until the server stops (Ctrl-C); the store is closed on the way out. Without API
    keys, a host other than loopback needs ``insecure_no_auth`` (`citeflow.api.exposure`).

    Raises:
        ConfigError: no API keys on a non-loopback host without ``insecure_no_auth``.
        CiteflowError: a provider or the store cannot be opened (e.g. `StoreLockedError`).
    """
    import uvicorn

    from citeflow.providers.describe import describe_providers

    warning = check_bind(settings.server, insecure_no_auth=insecure_no_auth)
    if not logging.getLogger("citeflow").handlers:
        from citeflow import logs

        logs.configure("INFO")
    if warning:
        log.warning(warning)
    use_embed_threads(settings.embeddings)
    use_one_blas_thread()
    engine = Engine.from_settings(settings)
    try:
        config = uvicorn_config(create_app(engine), settings.server)
        log.info("providers: %s", describe_providers(settings))
        log.info(
            "serving on http://%s:%d/v1 (auth %s; %s, %s)",
            settings.server.host,
            settings.server.port,
            f"on, {len(settings.server.api_keys)} key(s)" if settings.server.api_keys else "off",
            config.loop,
            config.http,
        )
        if settings.server.gc_freeze:
            tune_gc()
        uvicorn.Server(config).run()
    finally:
        engine.close()
