"""Wrong API keys: per client address, N of them per window, then 429 with Retry-After."""

from __future__ import annotations

import httpx
import pytest

from citeflow.api.engine import Engine
from citeflow.api.errors import AuthThrottledError
from citeflow.api.throttle import FailedKeys
from citeflow.knowledge_base import KnowledgeBase
from citeflow.server import create_app
from tests.server_helpers import asgi_client, assert_error, make_engine

GOOD = {"Authorization": "Bearer right-key"}
BAD = {"Authorization": "Bearer guess"}


# --- units ---------------------------------------------------------------------------------------
def test_past_n_failures_in_the_window_a_client_waits() -> None:
    now = [1000.0]
    failed = FailedKeys(3, 60, clock=lambda: now[0])
    for _ in range(3):
        failed.check("a")
        failed.failed("a")
        now[0] += 10
    with pytest.raises(AuthThrottledError) as caught:
        failed.check("a")
    # the oldest failure (t=1000) leaves the window at t=1060; it is now t=1030
    assert caught.value.retry_after == pytest.approx(30)
    assert caught.value.status == 429 and "retry in 30 s" in caught.value.message
    failed.check("b")  # another address is not affected
    now[0] += 30
    failed.check("a")  # one failure has left the window: one more try
    failed.failed("a")
    with pytest.raises(AuthThrottledError):
        failed.check("a")


def test_zero_turns_the_throttle_off() -> None:
    failed = FailedKeys(0, 60)
    for _ in range(100):
        failed.failed("a")
    failed.check("a")
    assert len(failed) == 0


def test_memory_is_bounded() -> None:
    now = [1000.0]
    failed = FailedKeys(5, 60, clock=lambda: now[0], max_clients=100)
    for i in range(1000):
        failed.failed(f"10.0.{i // 256}.{i % 256}")
        assert len(failed) <= 100
    # the most recent failures are kept
    for _ in range(4):
        failed.failed("10.0.3.231")
    with pytest.raises(AuthThrottledError):
        failed.check("10.0.3.231")


def test_addresses_whose_failures_expired_are_forgotten_first() -> None:
    now = [1000.0]
    failed = FailedKeys(5, 60, clock=lambda: now[0], max_clients=3)
    for address in ("a", "b"):
        failed.failed(address)
    now[0] += 30
    failed.failed("c")
    now[0] += 31  # a and b have left the window, c has not
    failed.failed("d")
    assert len(failed) == 2
    for _ in range(4):
        failed.failed("c")
    with pytest.raises(AuthThrottledError):
        failed.check("c")


# --- over HTTP -----------------------------------------------------------------------------------
@pytest.fixture
def engine(kb: KnowledgeBase) -> Engine:
    return make_engine(kb, keys=["right-key"], auth_max_failures=3)


async def test_wrong_keys_get_429_but_the_right_key_always_passes(engine: Engine) -> None:
    app = create_app(engine)
    async with asgi_client(app) as c:
        for _ in range(3):
            assert (await c.get("/v1/models", headers=BAD)).status_code == 401
        throttled = await c.get("/v1/models", headers=BAD)
        assert_error(throttled, 429, "rate_limit_error", code="too_many_failed_keys")
        assert 1 <= int(throttled.headers["retry-after"]) <= 60
        # the right key from the same address passes, and counts for nothing
        for _ in range(5):
            assert (await c.get("/v1/models", headers=GOOD)).status_code == 200
        assert (await c.get("/v1/models", headers=BAD)).status_code == 429
        # no key is no guess: told what is missing, not to wait
        assert (await c.get("/v1/models")).status_code == 401
        # every keyed route counts, uploads and document files too
        upload = await c.post("/v1/collections/x/documents", headers=BAD, files={"file": b""})
        assert upload.status_code == 429
        assert (await c.get("/v1/documents/kb/ducks/file", headers=BAD)).status_code == 429
    async with asgi_client(app, address="192.0.2.11") as other:  # another address is not affected
        assert (await other.get("/v1/models", headers=BAD)).status_code == 401


async def test_right_keys_never_count(client: httpx.AsyncClient) -> None:
    for _ in range(20):
        assert (await client.get("/v1/models", headers=GOOD)).status_code == 200
    assert (await client.get("/v1/models", headers=BAD)).status_code == 401


async def test_the_limit_is_a_setting(engine: Engine) -> None:
    engine.settings.server.auth_max_failures = 0
    async with asgi_client(engine) as c:
        for _ in range(30):
            assert (await c.get("/v1/models", headers=BAD)).status_code == 401
