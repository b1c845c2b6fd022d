"""The one place that turns errors into OpenAI error bodies and HTTP statuses.

Every error the server returns, in a response or as the last data line of a stream, is
``{"error": {"message": ..., "type": ..., "param": ..., "code": ...}}``. A provider's failure is
told in general terms (`UpstreamError.public`); its own message, which may name the server's key
or account, goes to the server log (`log_failure`). So does a full disk's (`StorageFullError`),
which names the server's paths.

| cause | status | type |
| --- | --- | --- |
| malformed JSON, a bad field or message, an empty collection | 400 | ``invalid_request_error`` |
| missing or wrong bearer key | 401 | ``authentication_error`` |
| a tampered or expired signed document link | 403 | ``permission_error`` |
| unknown model, knowledge base, document or route | 404 | ``not_found_error`` |
| a message, a body or a skill call's records over the limit | 413 | ``invalid_request_error`` |
| a well-formed request that cannot be processed | 422 | ``invalid_request_error`` |
| too many chats in progress or per minute (with ``Retry-After``) | 429 | ``rate_limit_error`` |
| too many wrong API keys from one address (with ``Retry-After``) | 429 | ``rate_limit_error`` |
| a provider's HTTP 429 (with its ``Retry-After``) | 429 | ``rate_limit_error`` |
| `UpstreamError` (LLM or embedding provider) | 502 | ``upstream_error`` |
| `StoreLockedError`, `ModelError`, not ready | 503 | ``server_error`` |
| `StorageFullError`: no space left for the store or an upload | 507 | ``server_error`` |
| anything else | 500 | ``server_error`` (details in the log only) |
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from citeflow.errors import (
    CiteflowError,
    CollectionNotFoundError,
    InvalidRequestError,
    StorageFullError,
    UpstreamError,
)

log = logging.getLogger("citeflow.server")

#: OpenAI error ``type`` for a bare HTTP status (any other: ``server_error``).
STATUS_TYPES: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
    502: "upstream_error",
}


class AuthenticationError(CiteflowError):
    """The bearer key is missing or not one of ``CITEFLOW_API_KEYS`` (or a forwarded user's
    signed token is not valid: `citeflow.api.users`)."""

    kind = "authentication_error"
    status = 401
    code = "invalid_api_key"


class PermissionDeniedError(CiteflowError):
    """A credential was presented but grants no access (a bad or expired signed link)."""

    kind = "permission_error"
    status = 403


class RateLimitError(CiteflowError):
    """Too many chat completions in progress, or per minute for one client (HTTP 429).

    ``retry_after`` (seconds) is sent as the ``Retry-After`` header.
    """

    kind = "rate_limit_error"
    status = 429
    code = "rate_limit_exceeded"

    def __init__(self, message: str, *, retry_after: float, reason: str = "in_progress") -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.reason = reason  # the metrics' label (`citeflow.api.metrics.RATE_LIMIT_REASONS`)


class AuthThrottledError(RateLimitError):
    """Too many wrong API keys from one client address (`citeflow.api.throttle`)."""

    code = "too_many_failed_keys"

    def __init__(self, message: str, *, retry_after: float) -> None:
        super().__init__(message, retry_after=retry_after, reason="failed_keys")


class ModelNotFoundError(CollectionNotFoundError):
    """The request names a model (knowledge base) that does not exist."""

    code = "model_not_found"


class UnknownCollectionError(CollectionNotFoundError):
    """A request names a knowledge base that does not exist, in parameter ``param``."""

    code = "collection_not_found"


class BadRequestError(InvalidRequestError):
    """An invalid request, naming the offending parameter (``param``) when there is one."""


class PayloadTooLargeError(BadRequestError):
    """A message or the request body is over the configured limit."""

    status = 413
    code = "request_too_large"


class NotReadyError(CiteflowError):
    """The engine cannot serve yet (store unreachable, models not loaded)."""

    kind = "server_error"
    status = 503


def error_body(
    message: str, kind: str, *, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    """``{"error": {"message", "type", "param", "code"}}``."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def describe(exc: BaseException) -> tuple[int, dict[str, Any]]:
    """The HTTP status and OpenAI error body for any exception.

    Unexpected exceptions become a generic 500 whose message names no internals; they are logged
    by the caller.
    """
    if isinstance(exc, UpstreamError | StorageFullError):  # their own words: for the log only
        return exc.status, error_body(exc.public, exc.kind, code=exc.code)
    if isinstance(exc, CiteflowError):
        return exc.status, error_body(exc.message, exc.kind, param=exc.param, code=exc.code)
    if isinstance(exc, RequestValidationError | ValidationError):
        return 400, _validation_body(list(exc.errors()))
    if isinstance(exc, StarletteHTTPException):
        status = exc.status_code
        detail = exc.detail if isinstance(exc.detail, str) else json.dumps(exc.detail)
        return status, error_body(detail, STATUS_TYPES.get(status, "server_error"))
    return 500, error_body("internal server error; see the server log", "server_error")


def _validation_body(errors: list[Any]) -> dict[str, Any]:
    if not errors:
        return error_body("invalid request", "invalid_request_error")
    first = errors[0]
    if first.get("type") == "json_invalid":
        return error_body(
            f"the request body is not valid JSON: {first.get('ctx', {}).get('error', '')}".strip(),
            "invalid_request_error",
            code="invalid_json",
        )
    loc = [p for p in first.get("loc", ()) if p != "body"]
    param = param_path(int(p) if str(p).isdigit() else str(p) for p in loc)
    what = first.get("msg", "invalid value")
    message = f"{param}: {what}" if param else str(what)
    return error_body(message, "invalid_request_error", param=param or None)


def param_path(keys: Iterable[str | int]) -> str:
    """Where a value is in a JSON body, as an error's ``param`` names it: ``messages[0].role``."""
    out = ""
    for key in keys:
        out += f"[{key}]" if isinstance(key, int) else (f".{key}" if out else key)
    return out


def headers_for(exc: BaseException, status: int) -> dict[str, str] | None:
    """The headers an error response needs: ``WWW-Authenticate`` on 401, ``Retry-After``;
    ``Connection: close`` on 413 (the rest of the body is left unread)."""
    headers: dict[str, str] = {}
    if status == 401:
        headers["WWW-Authenticate"] = "Bearer"
    if status == 413:
        headers["Connection"] = "close"
    if isinstance(exc, StarletteHTTPException) and exc.headers:
        headers.update(exc.headers)  # e.g. Starlette's ``Allow`` on 405
    retry_after = getattr(exc, "retry_after", None)
    if isinstance(retry_after, int | float):
        headers["Retry-After"] = str(max(1, math.ceil(retry_after)))
    return headers or None


def response_for(exc: BaseException) -> JSONResponse:
    """The JSON error response for ``exc``."""
    status, body = describe(exc)
    return JSONResponse(body, status_code=status, headers=headers_for(exc, status))


#: The HTTP methods: those an ``Allow`` header may name, the metrics' ``method`` labels.
METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def allowed_methods(request: Request) -> str:
    """The methods some route accepts at the request's path (the ``Allow`` of a 405).

    Starlette names only the first route that matches the path (``POST`` where ``GET`` works
    too), and FastAPI's included routers hide theirs; each method is tried on the app's routes
    instead (`BaseRoute.matches`: a full match is a route for that path and method).
    """
    routes = request.app.router.routes
    allowed = [
        method
        for method in METHODS
        if any(
            route.matches({**request.scope, "method": method})[0] == Match.FULL for route in routes
        )
    ]
    return ", ".join(allowed)


def log_failure(exc: BaseException, path: str) -> None:
    """Log what the client is not told: a provider's failure in its own words, a 5xx's cause
    (unexpected exceptions are logged with their traceback by the caller)."""
    if isinstance(exc, UpstreamError) or (isinstance(exc, CiteflowError) and exc.status >= 500):
        log.warning("request failed: %s", exc, extra={"path": path})


def install(app: FastAPI) -> None:
    """Register the handlers that make every error of ``app`` an OpenAI error body."""

    async def on_citeflow(request: Request, exc: Exception) -> JSONResponse:
        log_failure(exc, request.url.path)
        response = response_for(exc)
        if response.status_code == 429:  # `create_app` set the metrics before installing this
            request.app.state.metrics.limited(getattr(exc, "reason", "upstream"))
        if response.status_code == 405:
            response.headers["Allow"] = allowed_methods(request)
        return response

    async def on_unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error", extra={"path": request.url.path})
        return response_for(exc)

    for kind in (CiteflowError, RequestValidationError, ValidationError, StarletteHTTPException):
        app.add_exception_handler(kind, on_citeflow)
    app.add_exception_handler(Exception, on_unexpected)
