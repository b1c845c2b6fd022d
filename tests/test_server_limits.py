"""HTTP 429: chat completions past the concurrency limit or a client's rate, with Retry-After."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from citeflow.api.errors import RateLimitError
from citeflow.api.limits import ChatLimits, ConcurrencyLimit, RequestRate, client_id
from citeflow.knowledge_base import KnowledgeBase
from citeflow.server import create_app
from citeflow.settings import Settings
from citeflow.testing.llm import ScriptedLLM
from tests.server_helpers import (
    ANSWER,
    CHAT,
    LONG_ANSWER,
    QUESTION,
    STREAM,
    PacedLLM,
    asgi_client,
    assert_error,
    chat_request,
    content_of,
    live_server,
    make_engine,
    parse_sse,
    wait_until,
)


def _assert_429(response: httpx.Response) -> dict[str, Any]:
    assert_error(response, 429, "rate_limit_error", code="rate_limit_exceeded")
    error: dict[str, Any] = response.json()["error"]
    assert int(response.headers["retry-after"]) >= 1
    return error


# --- units ---------------------------------------------------------------------------------------
def test_concurrency_limit_counts_held_slots() -> None:
    limit = ConcurrencyLimit(2)
    first, second = limit.acquire(), limit.acquire()
    with pytest.raises(RateLimitError) as caught:
        limit.acquire()
    assert caught.value.status == 429 and caught.value.retry_after == 1
    first.release()
    first.release()  # idempotent
    assert limit.active == 1
    third = limit.acquire()
    second.release()
    third.release()
    assert limit.active == 0
    unlimited = ConcurrencyLimit(0)
    assert all(unlimited.acquire() for _ in range(1000)) and unlimited.active == 0


def test_request_rate_is_a_token_bucket_per_client() -> None:
    now = [100.0]
    rate = RequestRate(6, clock=lambda: now[0])  # 6 per minute: one every 10 s
    for _ in range(6):
        rate.take("a")  # a burst of the whole minute's budget
    with pytest.raises(RateLimitError) as caught:
        rate.take("a")
    assert caught.value.retry_after == pytest.approx(10.0)
    rate.take("b")  # another client has its own budget
    now[0] += 4.0
    with pytest.raises(RateLimitError) as caught:
        rate.take("a")
    assert caught.value.retry_after == pytest.approx(6.0)
    now[0] += 6.0
    rate.take("a")
    now[0] += 3600.0
    for _ in range(6):  # refilled up to the burst size, not beyond
        rate.take("a")
    with pytest.raises(RateLimitError):
        rate.take("a")
    RequestRate(0).take("a")  # off


def test_request_rate_forgets_idle_clients() -> None:
    now = [0.0]
    rate = RequestRate(60, clock=lambda: now[0], max_clients=3)
    for client in "abc":
        rate.take(client)
    now[0] += 60.0  # all full again: nothing to remember
    rate.take("d")
    assert set(rate._buckets) == {"d"}


def test_client_identity_hides_the_key() -> None:
    assert client_id("secret-key", "10.0.0.1") != client_id("other-key", "10.0.0.1")
    assert "secret-key" not in client_id("secret-key", "10.0.0.1")
    assert client_id(None, "10.0.0.1") == "addr:10.0.0.1"


def test_chat_limits_release_the_slot_when_the_rate_refuses() -> None:
    limits = ChatLimits(max_concurrent=1, per_minute=1)
    limits.admit("a").release()
    with pytest.raises(RateLimitError):
        limits.admit("a")
    assert limits.concurrency.active == 0
    limits.admit("b").release()


def test_defaults_admit_the_load_benchmark() -> None:
    options = Settings(_env_file=None).server
    assert options.max_concurrent_chats >= 64 and options.chats_per_minute == 0
    limits = ChatLimits(options.max_concurrent_chats, options.chats_per_minute)
    slots = [limits.admit("open-webui") for _ in range(64)]
    assert limits.concurrency.active == 64
    for slot in slots:
        slot.release()


# --- over HTTP -----------------------------------------------------------------------------------
async def test_chats_past_the_concurrency_limit_get_429(kb: KnowledgeBase) -> None:
    llm = PacedLLM([ANSWER], delay=0.2)  # each answer holds its slot for 2 s or more
    app = create_app(make_engine(kb, llm, max_concurrent_chats=2))
    limits: ChatLimits = app.state.limits
    async with asgi_client(app) as client:
        running = [asyncio.create_task(client.post("/v1/chat/completions", json=CHAT))]
        running.append(asyncio.create_task(client.post("/v1/chat/completions", json=STREAM)))
        await wait_until(lambda: limits.concurrency.active == 2, within=5.0)
        error = _assert_429(await client.post("/v1/chat/completions", json=CHAT))
        assert "at most 2 at once" in error["message"]
        assert (await client.get("/v1/models")).status_code == 200  # other routes unaffected
        answers = await asyncio.gather(*running)
        assert [a.status_code for a in answers] == [200, 200]
        assert content_of(parse_sse(answers[1].text)).startswith("Yahoo bought Viaweb")
        # both slots are free again
        llm.delay = 0.0
        again = await asyncio.gather(
            *(client.post("/v1/chat/completions", json=body) for body in (CHAT, STREAM))
        )
        assert [a.status_code for a in again] == [200, 200]


async def test_failed_requests_free_their_slot(kb: KnowledgeBase) -> None:
    engine = make_engine(kb, ScriptedLLM([ANSWER]), max_concurrent_chats=1)
    async with asgi_client(engine) as client:
        unknown = {**CHAT, "model": "citeflow-nothing"}
        for body in (unknown, {"model": "citeflow-kb"}, chat_request("  ")):
            assert (await client.post("/v1/chat/completions", json=body)).status_code in (400, 404)
        bad = await client.post("/v1/chat/completions", content=b"{not json")
        assert bad.status_code == 400
        assert (await client.post("/v1/chat/completions", json=STREAM)).status_code == 200
        assert (await client.post("/v1/chat/completions", json=CHAT)).status_code == 200


async def test_a_stream_holds_its_slot_until_it_ends_or_its_client_leaves(
    kb: KnowledgeBase,
) -> None:
    llm = PacedLLM([LONG_ANSWER], delay=0.02)
    app = create_app(make_engine(kb, llm, max_concurrent_chats=1))
    limits: ChatLimits = app.state.limits
    with live_server(app) as url:
        async with httpx.AsyncClient(base_url=url, timeout=10) as client:
            async with client.stream("POST", "/v1/chat/completions", json=STREAM) as response:
                lines = response.aiter_lines()  # kept: a dropped iterator would close the stream
                while '"content":"Yahoo' not in await anext(lines):
                    pass
                assert limits.concurrency.active == 1
                _assert_429(await client.post("/v1/chat/completions", json=CHAT))
                assert not llm.closed_early.is_set()
            # the client went away: the run is cancelled and the slot freed
            await wait_until(lambda: limits.concurrency.active == 0, within=2.0)
            await wait_until(llm.closed_early.is_set, within=2.0)
            llm.delay = 0.0
            response = await client.post("/v1/chat/completions", json=STREAM)
            assert response.status_code == 200 and parse_sse(response.text)[-1] == "[DONE]"
            await wait_until(lambda: limits.concurrency.active == 0)  # released after the body


async def test_rate_per_minute_per_key(kb: KnowledgeBase) -> None:
    engine = make_engine(kb, ScriptedLLM([ANSWER]), keys=["k1", "k2"], chats_per_minute=2)
    async with (
        asgi_client(engine, authorization="Bearer k1") as first,
        asgi_client(engine, authorization="Bearer k2") as second,
    ):
        for _ in range(2):
            assert (await first.post("/v1/chat/completions", json=CHAT)).status_code == 200
        response = await first.post("/v1/chat/completions", json=STREAM)
        error = _assert_429(response)
        assert "2 chat completions per minute" in error["message"]
        assert 25 <= int(response.headers["retry-after"]) <= 31
        assert (await second.post("/v1/chat/completions", json=CHAT)).status_code == 200
        # an unauthenticated request is refused for its key, not counted against one
        async with asgi_client(engine) as anonymous:
            assert (await anonymous.post("/v1/chat/completions", json=CHAT)).status_code == 401
        assert (await second.post("/v1/chat/completions", json=CHAT)).status_code == 200


async def test_rate_per_address_without_keys(kb: KnowledgeBase) -> None:
    engine = make_engine(kb, ScriptedLLM([ANSWER]), chats_per_minute=1)
    async with asgi_client(engine) as client:
        assert (await client.post("/v1/chat/completions", json=CHAT)).status_code == 200
        _assert_429(await client.post("/v1/chat/completions", json=CHAT))


async def test_64_concurrent_streams_pass_the_default_limits(kb: KnowledgeBase) -> None:
    engine = make_engine(kb, PacedLLM([ANSWER], delay=0.01))
    async with asgi_client(engine) as client:
        answers = await asyncio.gather(
            *(
                client.post(
                    "/v1/chat/completions", json=chat_request(f"{QUESTION} ({i})", stream=True)
                )
                for i in range(64)
            )
        )
    assert [a.status_code for a in answers] == [200] * 64
    assert all(parse_sse(a.text)[-1] == "[DONE]" for a in answers)
