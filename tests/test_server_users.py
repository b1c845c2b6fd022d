"""Open WebUI's forwarded users: per-user rate limits and log lines, the signed token checked."""

from __future__ import annotations

import logging
import time

import httpx
import jwt
import pytest
from pydantic import SecretStr

from citeflow.knowledge_base import KnowledgeBase
from citeflow.testing.llm import ScriptedLLM
from tests.server_helpers import asgi_client, assert_error, chat_request, make_engine

ANSWER = "Yahoo bought Viaweb in 1998 [1]."
KEY = {"Authorization": "Bearer a-long-secret-key"}
SECRET = "open-webui-forwarding-secret-0123456789"


def plain(user_id: str, name: str = "Ada%20Lovelace") -> dict[str, str]:
    return {
        **KEY,
        "X-OpenWebUI-User-Id": user_id,
        "X-OpenWebUI-User-Name": name,
        "X-OpenWebUI-User-Email": f"{user_id}@example.com",
        "X-OpenWebUI-User-Role": "user",
    }


def signed(user_id: str, *, secret: str = SECRET, expires_in: int = 300) -> dict[str, str]:
    now = int(time.time())
    claims = {"sub": user_id, "name": "Ada", "email": f"{user_id}@example.com", "role": "user"}
    token = jwt.encode(
        {**claims, "iss": "open-webui", "iat": now, "exp": now + expires_in},
        secret,
        algorithm="HS256",
    )
    return {**KEY, "X-OpenWebUI-User-Jwt": token}


def engine_for(kb: KnowledgeBase, **settings: object):  # type: ignore[no-untyped-def]
    return make_engine(
        kb, ScriptedLLM([ANSWER]), keys=["a-long-secret-key"], chats_per_minute=1, **settings
    )


async def _status(client: httpx.AsyncClient, headers: dict[str, str]) -> int:
    """The status of a chat completion sent with ``headers``."""
    response = await client.post("/v1/chat/completions", json=chat_request(), headers=headers)
    return response.status_code


async def test_each_forwarded_user_has_their_own_rate_limit(kb: KnowledgeBase) -> None:
    async with asgi_client(engine_for(kb)) as client:
        assert await _status(client, plain("u-1")) == 200
        assert await _status(client, plain("u-1")) == 429
        assert await _status(client, plain("u-2")) == 200  # another user behind the same key
        # without a forwarded user, the key's own budget (unused so far)
        assert await _status(client, KEY) == 200
        assert await _status(client, KEY) == 429


async def test_the_access_log_names_the_user_and_metrics_do_not(
    kb: KnowledgeBase, caplog: pytest.LogCaptureFixture
) -> None:
    async with asgi_client(engine_for(kb)) as client:
        with caplog.at_level(logging.INFO, logger="citeflow.server"):
            await client.post("/v1/chat/completions", json=chat_request(), headers=plain("u-77"))
        scraped = (await client.get("/metrics", headers=KEY)).text
    lines = [r for r in caplog.records if r.getMessage().startswith("POST /v1/chat/completions")]
    assert lines and getattr(lines[-1], "user", None) == "u-77"
    assert "u-77" not in scraped and "example.com" not in scraped
    assert 'citeflow_user_chats_total{role="user",signed="no"} 1.0' in scraped


async def test_with_a_secret_only_a_signed_user_counts(kb: KnowledgeBase) -> None:
    engine = engine_for(kb, openwebui_jwt_secret=SecretStr(SECRET))
    async with asgi_client(engine) as client:
        assert await _status(client, signed("u-1")) == 200
        assert await _status(client, signed("u-1")) == 429
        assert await _status(client, signed("u-2")) == 200
        # unsigned headers are not believed: both are the key's one budget
        assert await _status(client, plain("u-3")) == 200
        assert await _status(client, plain("u-4")) == 429
        scraped = (await client.get("/metrics", headers=KEY)).text
    # three signed chats (one refused with 429); the unsigned ones count as no user
    assert 'citeflow_user_chats_total{role="user",signed="yes"} 3.0' in scraped
    assert 'citeflow_user_chats_total{role="none",signed="no"} 2.0' in scraped


@pytest.mark.parametrize(
    ("headers", "words"),
    [
        (signed("u-1", secret="another-secret-of-some-length-012345"), "Signature"),
        (signed("u-1", expires_in=-10), "expired"),
        ({**KEY, "X-OpenWebUI-User-Jwt": "not-a-token"}, "X-OpenWebUI-User-Jwt"),
    ],
)
async def test_a_bad_signed_user_is_one_clear_401(
    kb: KnowledgeBase, headers: dict[str, str], words: str
) -> None:
    engine = engine_for(kb, openwebui_jwt_secret=SecretStr(SECRET))
    async with asgi_client(engine) as client:
        response = await client.post("/v1/chat/completions", json=chat_request(), headers=headers)
    assert_error(response, 401, "authentication_error", words, "CITEFLOW_OPENWEBUI_JWT_SECRET")
    assert response.json()["error"]["code"] == "invalid_user_token"
