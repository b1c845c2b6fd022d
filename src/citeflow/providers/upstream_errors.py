"""Turn a failed OpenAI / Azure OpenAI call into citeflow's one-line `UpstreamError`, with the
wait a rate limit asks for, so the server and CLI report provider failures alike and leak no
secrets."""

from __future__ import annotations

import contextlib
import email.utils
import math
import time
from collections.abc import Mapping

import httpx
import openai

from citeflow.errors import UpstreamError, UpstreamRateLimitError
from citeflow.providers.connections import safe_url

__all__ = ["DEFAULT_RETRY_AFTER", "MAX_RETRY_AFTER", "as_upstream_error", "retry_after"]

#: Seconds a client is told to wait when a provider's HTTP 429 says not how long (Retry-After).
DEFAULT_RETRY_AFTER = 10.0
#: Longest wait passed on from a provider's Retry-After.
MAX_RETRY_AFTER = 3600.0


def as_upstream_error(exc: BaseException, *, what: str = "LLM") -> UpstreamError:
    """Turn an OpenAI SDK / httpx exception into a one-line `UpstreamError` (no secrets).

    Args:
        exc: the exception raised by a provider call.
        what: ``"LLM"`` or ``"embedding"``, for the message.
    """
    if isinstance(exc, UpstreamError):
        return exc
    public = (
        f"the {what} provider failed; retry later, or ask the server's operator to check the "
        "server log"
    )
    if isinstance(exc, openai.APITimeoutError | httpx.TimeoutException):
        message = f"the {what} provider timed out (CITEFLOW_LLM_TIMEOUT)"
        public = f"the {what} provider timed out; retry later"
    elif isinstance(exc, openai.APIConnectionError):
        message = f"cannot reach the {what} provider at {safe_url(str(exc.request.url))}"
    elif isinstance(exc, openai.APIStatusError):
        body = exc.body
        detail: object = exc.message
        if isinstance(body, dict) and isinstance(body.get("message"), str):
            detail = body["message"]
        message = f"the {what} provider answered HTTP {exc.status_code}: {detail}"
        if exc.status_code == 429:
            wait = retry_after(exc.response.headers)
            return UpstreamRateLimitError(
                _one_line(message),
                retry_after=wait,
                public=f"the {what} provider's rate limit is reached; retry in {math.ceil(wait)} s",
            )
    elif isinstance(exc, httpx.HTTPError):
        message = f"the connection to the {what} provider failed: {exc or type(exc).__name__}"
    else:
        message = f"the {what} provider failed: {type(exc).__name__}: {exc}"
    return UpstreamError(_one_line(message), public=public)


def _one_line(message: str) -> str:
    return " ".join(message.split())[:500]


def retry_after(headers: Mapping[str, str], *, now: float | None = None) -> float:
    """Seconds to wait, from a provider's ``retry-after-ms`` or ``retry-after`` header (seconds
    or an HTTP date), within 1 s and `MAX_RETRY_AFTER`; `DEFAULT_RETRY_AFTER` without one."""
    wait: float | None = None
    with contextlib.suppress(ValueError):
        if (ms := headers.get("retry-after-ms")) is not None:
            wait = float(ms) / 1000
        elif (value := headers.get("retry-after")) is not None:
            try:
                wait = float(value)
            except ValueError:
                when = email.utils.parsedate_to_datetime(value)
                wait = when.timestamp() - (time.time() if now is None else now)
    if wait is None or not math.isfinite(wait):
        return DEFAULT_RETRY_AFTER
    return min(max(wait, 1.0), MAX_RETRY_AFTER)
