"""The HTTP server: an OpenAI-compatible chat API over citeflow's knowledge bases.

``create_app(engine)`` assembles the FastAPI app around an `Engine` (tests pass one built from
fakes); ``serve(settings)`` builds the engine once from the settings and runs uvicorn::

    citeflow serve --host 0.0.0.0 --port 8000

Open WebUI: add an OpenAI connection to ``http://HOST:PORT/v1`` with one of
``CITEFLOW_API_KEYS``; each knowledge base is a model ``citeflow-<collection>``.
"""

from __future__ import annotations

import logging
import time

from fastapi import FastAPI
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from citeflow import __version__
from citeflow.api import documents, errors, routes
from citeflow.api.engine import Engine
from citeflow.api.limits import ChatLimits
from citeflow.api.links import DocumentLinks
from citeflow.api.options import ServerOptions
from citeflow.settings import Settings

log = logging.getLogger("citeflow.server")


def create_app(engine: Engine) -> FastAPI:
    """The FastAPI app serving ``engine`` (which the caller owns and closes)."""
    app = FastAPI(
        title="citeflow",
        version=__version__,
        summary="Answers questions over your documents with numbered, verifiable citations.",
    )
    app.state.engine = engine
    app.state.limits = ChatLimits(
        engine.options.max_concurrent_chats, engine.options.chats_per_minute
    )
    app.state.links = DocumentLinks.from_settings(engine.settings)
    errors.install(app)
    app.include_router(routes.health)
    app.include_router(routes.api)
    app.include_router(documents.router)
    app.include_router(documents.files)
    app.add_middleware(AccessLog)
    return app


class AccessLog:
    """Logs each request's method, path, status and time to its response headers (pure ASGI,
    so streams pass through untouched)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()

        async def send_logged(message: Message) -> None:
            if message["type"] == "http.response.start":
                status = message["status"]
                ms = round(1000 * (time.perf_counter() - started))
                log.info(
                    "%s %s %d",
                    scope["method"],
                    scope["path"],
                    status,
                    extra={"status": status, "ms": ms},
                )
            await send(message)

        await self.app(scope, receive, send_logged)


def use_embed_threads(settings: Settings) -> None:
    """Run the local embedder on ``serve_embed_threads`` torch threads (0: torch's default).

    torch's default, one thread per core, suits a batch job; in the server the event loop needs
    a core of its own, and torch's threads spin-wait for each other: with every core busy, one
    question's embedding takes ten times longer. Query embeddings are batched
    (`citeflow.query.batching`), so one thread keeps up.
    """
    if settings.embed_provider != "local" or not settings.serve_embed_threads:
        return
    import torch

    torch.set_num_threads(settings.serve_embed_threads)


def serve(settings: Settings, *, options: ServerOptions | None = None) -> None:
    """Build the engine from ``settings`` and serve it on ``settings.host``:``settings.port``.

    Blocks until the server stops (Ctrl-C); the store is closed on the way out.

    Raises:
        CiteflowError: a provider or the store cannot be opened (e.g. `StoreLockedError`).
    """
    import uvicorn

    from citeflow.providers.llm import describe_providers

    if not logging.getLogger("citeflow").handlers:
        from citeflow import logs

        logs.configure("INFO")
    use_embed_threads(settings)
    engine = Engine.from_settings(settings, options)
    try:
        log.info("providers: %s", describe_providers(settings))
        log.info(
            "serving on http://%s:%d/v1 (auth %s)",
            settings.host,
            settings.port,
            f"on, {len(settings.api_keys)} key(s)" if settings.api_keys else "off",
        )
        config = uvicorn.Config(
            create_app(engine),
            host=settings.host,
            port=settings.port,
            log_level="warning",
            timeout_graceful_shutdown=5,
        )
        uvicorn.Server(config).run()
    finally:
        engine.close()
