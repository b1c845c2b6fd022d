"""FastAPI dependencies: the engine, limits, links and auth (the app's state, `_app_state`).

Auth is the bearer key (`require_api_key`); wrong keys are counted per client address and
slowed down past a limit (`citeflow.api.throttle`).

They are ``async def`` although none of them waits: FastAPI runs a plain ``def`` dependency in
its thread pool, a round trip through a worker thread (and the GIL) per dependency per request.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Coroutine
from typing import Annotated, Any

from fastapi import Depends, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from citeflow.api.engine import Engine
from citeflow.api.errors import AuthenticationError
from citeflow.api.limits import ChatLimits
from citeflow.api.links import DocumentLinks
from citeflow.api.throttle import FailedKeys


def _app_state(name: str) -> Callable[[Request], Coroutine[Any, Any, Any]]:
    """A dependency: the app's ``state.<name>``, set by `citeflow.server.create_app`."""

    async def get(request: Request) -> Any:
        return getattr(request.app.state, name)

    return get


EngineDep = Annotated[Engine, Depends(_app_state("engine"))]
LimitsDep = Annotated[ChatLimits, Depends(_app_state("limits"))]
LinksDep = Annotated[DocumentLinks, Depends(_app_state("links"))]
FailedKeysDep = Annotated[FailedKeys, Depends(_app_state("failed_keys"))]

#: ``Authorization: Bearer <key>``, declared in the OpenAPI schema; a missing or other header is
#: None here, and `require_api_key` says what is wrong.
bearer_scheme = HTTPBearer(
    auto_error=False, description="One of the server's CITEFLOW_API_KEYS (none configured: open)."
)
BearerDep = Annotated[HTTPAuthorizationCredentials | None, Security(bearer_scheme)]


def bearer_token(request: Request) -> str | None:
    """The token of the ``Authorization: Bearer <token>`` header, if there is one."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


async def require_api_key(
    request: Request,
    engine: EngineDep,
    credentials: BearerDep,
    failed: FailedKeysDep,
) -> None:
    """Require ``Authorization: Bearer <key>`` with one of ``CITEFLOW_API_KEYS``; none: open.

    A right key always passes. A wrong one is counted against the client's address; past
    ``CITEFLOW_AUTH_MAX_FAILURES`` of them in the window, the answer is 429 instead of 401.

    Raises:
        AuthenticationError: the header is missing, malformed or names no configured key (401).
        AuthThrottledError: a wrong key from an address that sent too many of them (429).
    """
    if not engine.settings.server.api_keys:
        return
    if credentials is None:
        raise AuthenticationError(
            "no API key: send the header 'Authorization: Bearer <key>' with a key from "
            "CITEFLOW_API_KEYS"
        )
    # compared with every key in constant time (a list: no early exit)
    given = credentials.credentials.encode()
    keys = [key.get_secret_value().encode() for key in engine.settings.server.api_keys]
    if any([secrets.compare_digest(given, key) for key in keys]):
        return
    client = request.client.host if request.client else "unknown"
    failed.check(client)
    failed.failed(client)
    raise AuthenticationError("invalid API key")


async def require_key_or_link(
    request: Request,
    name: str,
    doc_id: str,
    engine: EngineDep,
    links: LinksDep,
    credentials: BearerDep,
    failed: FailedKeysDep,
    expires: str | None = None,
    sig: str | None = None,
) -> None:
    """A document file's auth: the bearer key, or else a signed link (`citeflow.api.links`).

    Raises:
        AuthenticationError: no valid key and no signed link (401).
        PermissionDeniedError: a tampered or expired signed link (403).
    """
    if not engine.settings.server.api_keys:
        return
    if request.headers.get("authorization") or not sig:
        await require_api_key(request, engine, credentials, failed)
        return
    links.check(name, doc_id, expires, sig)
