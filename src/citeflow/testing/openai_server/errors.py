"""The fake OpenAI server's HTTP errors, with OpenAI-style bodies."""

from __future__ import annotations

from starlette.responses import JSONResponse

__all__ = ["error_response"]

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


def error_response(
    status: int, message: str | None = None, *, retry_after: float | None = None
) -> JSONResponse:
    """An OpenAI-style error body; `message` defaults to OpenAI's text for `status`."""
    kind, code, default = _DEFAULT_ERRORS.get(status, ("server_error", None, f"HTTP {status}"))
    headers = {"retry-after": f"{retry_after:g}"} if retry_after is not None else None
    body = {"error": {"message": message or default, "type": kind, "param": None, "code": code}}
    return JSONResponse(body, status_code=status, headers=headers)
