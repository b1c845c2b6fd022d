"""A provider's failures through the server: a 429 passed on with Retry-After, nothing leaked.

The engine's LLM is the real OpenAI client (through aiohttp, as ``citeflow serve`` builds it)
against the fake OpenAI server on 127.0.0.1.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import httpx
import pytest

from citeflow.api.engine import Engine
from citeflow.errors import UpstreamError, UpstreamRateLimitError
from citeflow.knowledge_base import KnowledgeBase
from citeflow.providers.upstream_errors import DEFAULT_RETRY_AFTER, as_upstream_error, retry_after
from citeflow.testing.openai_server import FakeOpenAIServer, Reply
from tests.server_helpers import chat_request, events_of, parse_sse, upstream_engine

SECRET = "Incorrect API key provided: sk-pr****xk2Q. Org org-Secret123 has no access."


@pytest.fixture
async def engine(kb: KnowledgeBase, upstream: FakeOpenAIServer) -> AsyncIterator[Engine]:
    engine = upstream_engine(kb, upstream)
    yield engine
    await engine.aclose()


async def test_an_upstream_error_is_told_in_general_terms_and_logged(
    client: httpx.AsyncClient, upstream: FakeOpenAIServer, caplog: pytest.LogCaptureFixture
) -> None:
    upstream.script([Reply.error(401, SECRET), Reply.error(401, SECRET)])
    with caplog.at_level(logging.WARNING, logger="citeflow"):
        plain = await client.post("/v1/chat/completions", json=chat_request())
        streamed = await client.post("/v1/chat/completions", json=chat_request(stream=True))
    assert plain.status_code == 502, plain.text
    error = plain.json()["error"]
    assert error["type"] == "upstream_error"
    assert error["message"].startswith("the LLM provider failed; retry later")
    assert parse_sse(streamed.text)[-2:] == [{"error": error}, "[DONE]"]
    for word in ("Incorrect", "sk-pr", "xk2Q", "org-Secret123", "HTTP 401"):
        assert word not in plain.text + streamed.text, word
    # the operator sees the provider's words, once per request
    logged = [r.getMessage() for r in caplog.records if SECRET in r.getMessage()]
    assert len(logged) == 2, [r.getMessage() for r in caplog.records]
    assert all("HTTP 401" in line for line in logged)


@pytest.mark.parametrize(
    ("given", "expected"), [(7, "7"), (None, str(int(DEFAULT_RETRY_AFTER)))], ids=["7s", "none"]
)
async def test_an_upstream_rate_limit_is_429_with_retry_after(
    client: httpx.AsyncClient,
    upstream: FakeOpenAIServer,
    caplog: pytest.LogCaptureFixture,
    given: float | None,
    expected: str,
) -> None:
    limited = Reply.error(429, "Rate limit reached for org-Secret123.", retry_after=given)
    upstream.script([limited, limited])
    with caplog.at_level(logging.WARNING, logger="citeflow"):
        plain = await client.post("/v1/chat/completions", json=chat_request())
        streamed = await client.post("/v1/chat/completions", json=chat_request(stream=True))
    assert plain.status_code == 429, plain.text
    assert plain.headers["retry-after"] == expected
    error = plain.json()["error"]
    assert error["type"] == "rate_limit_error" and error["code"] == "rate_limit_exceeded"
    assert error["message"] == f"the LLM provider's rate limit is reached; retry in {expected} s"
    # streaming: the answer had begun (HTTP 200), so the error is the last chunk before [DONE]
    assert streamed.status_code == 200
    items = parse_sse(streamed.text)
    assert items[-2:] == [{"error": error}, "[DONE]"]
    assert events_of(items, "status")[-1] == {"description": "Failed", "done": True}
    assert "org-Secret123" not in plain.text + streamed.text
    assert sum("org-Secret123" in r.getMessage() for r in caplog.records) == 2


# --- units ---------------------------------------------------------------------------------------
def test_retry_after_reads_every_form() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    later = format_datetime(now + timedelta(seconds=30), usegmt=True)
    assert retry_after({"retry-after": "12"}) == 12
    assert retry_after({"retry-after": "0.2"}) == 1  # at least a second
    assert retry_after({"retry-after-ms": "2500", "retry-after": "9"}) == 2.5
    assert retry_after({"retry-after": later}, now=now.timestamp()) == 30
    assert retry_after({"retry-after": "99999999"}) == 3600
    for bad in ({}, {"retry-after": "soon"}, {"retry-after": "nan"}, {"retry-after-ms": "x"}):
        assert retry_after(bad) == DEFAULT_RETRY_AFTER


def test_as_upstream_error_keeps_the_details_for_the_log() -> None:
    import openai

    request = httpx.Request("POST", "http://upstream/v1/chat/completions")
    response = httpx.Response(
        429, request=request, headers={"retry-after": "3"}, json={"message": "slow down, org-x"}
    )
    exc = openai.RateLimitError("slow down", response=response, body={"message": "slow down"})
    error = as_upstream_error(exc, what="embedding")
    assert isinstance(error, UpstreamRateLimitError) and error.retry_after == 3
    assert error.status == 429 and "HTTP 429: slow down" in error.message
    assert error.public == "the embedding provider's rate limit is reached; retry in 3 s"
    timeout = as_upstream_error(openai.APITimeoutError(request=request))
    assert isinstance(timeout, UpstreamError) and timeout.status == 502
    assert timeout.public == "the LLM provider timed out; retry later"
