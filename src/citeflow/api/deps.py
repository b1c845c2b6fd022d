"""FastAPI dependencies: the engine, its settings and options, and bearer-key auth."""

from __future__ import annotations

import secrets
from typing import Annotated

from fastapi import Depends, Request

from citeflow.api.engine import Engine
from citeflow.api.errors import AuthenticationError
from citeflow.api.options import ServerOptions
from citeflow.settings import Settings


def get_engine(request: Request) -> Engine:
    """The engine the app was created with (`citeflow.server.create_app`)."""
    engine: Engine = request.app.state.engine
    return engine


def get_settings(engine: Annotated[Engine, Depends(get_engine)]) -> Settings:
    return engine.settings


def get_options(engine: Annotated[Engine, Depends(get_engine)]) -> ServerOptions:
    return engine.options


def check_key(token: str, keys: list[bytes]) -> bool:
    """Whether ``token`` is one of ``keys``; compares with every key in constant time."""
    given = token.encode()
    found = False
    for key in keys:
        found |= secrets.compare_digest(given, key)
    return found


async def require_api_key(
    request: Request, settings: Annotated[Settings, Depends(get_settings)]
) -> None:
    """Require ``Authorization: Bearer <key>`` with one of ``CITEFLOW_API_KEYS``; none: open.

    Raises:
        AuthenticationError: the header is missing, malformed or names no configured key (401).
    """
    if not settings.api_keys:
        return
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise AuthenticationError(
            "no API key: send the header 'Authorization: Bearer <key>' with a key from "
            "CITEFLOW_API_KEYS"
        )
    keys = [key.get_secret_value().encode() for key in settings.api_keys]
    if not check_key(token, keys):
        raise AuthenticationError("invalid API key")


EngineDep = Annotated[Engine, Depends(get_engine)]
OptionsDep = Annotated[ServerOptions, Depends(get_options)]
