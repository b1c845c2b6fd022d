"""Providers against a real HTTP server: OpenAI(-compatible) and Azure OpenAI, LLM and embeddings.

Everything but the last test talks over real sockets to `FakeOpenAIServer`; the last one loads the
real MiniLM embedder (marked slow). Over 400 lines: two providers times LLM and embeddings, each
with its failures and configuration errors, against one fake server fixture.
"""

from __future__ import annotations

import asyncio
import math
import os
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import openai
import pytest
from llama_index.core.base.embeddings.base import similarity as cosine
from llama_index.core.llms import ChatMessage
from pydantic import SecretStr

from citeflow.citations.judge import LLMJudge, TokenLogprobs
from citeflow.errors import ConfigError, UpstreamError
from citeflow.providers.connections import NO_KEY_PLACEHOLDER
from citeflow.providers.describe import describe_providers
from citeflow.providers.embeddings import build_embed_model, describe_embeddings, embed_batch_size
from citeflow.providers.llm import (
    DEFAULT_COMPAT_CONTEXT_WINDOW,
    DEFAULT_OPENAI_MODEL,
    CompatOpenAI,
    build_llm,
)
from citeflow.providers.upstream_errors import as_upstream_error
from citeflow.settings import Settings
from citeflow.testing.openai_server import (
    FakeOpenAIServer,
    RecordedRequest,
    Reply,
    default_reply,
    fake_embedding,
)
from tests.settings_helpers import (
    APIM_KEY,
    AZURE_KEY,
    assert_azure_request,
    azure_settings,
    settings_of,
)

OPENAI_KEY = "sk-test-openai-0123456789"
ENTRA_TOKEN = "entra-static-token-xyz"
USER = [ChatMessage(role="user", content="What did the author work on before college?")]

#: Every test must finish well within this (no hangs on failures).
PROMPT = 10.0


@pytest.fixture(autouse=True)
def _no_sdk_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The OpenAI SDK and llama-index read ``OPENAI_*`` and ``AZURE_OPENAI_*`` variables (the
    key, base URL, API version, Azure endpoint and token); a developer's must not leak in."""
    for name in [n for n in os.environ if n.startswith(("OPENAI_", "AZURE_OPENAI_"))]:
        monkeypatch.delenv(name)


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(api_keys=[OPENAI_KEY, AZURE_KEY, ENTRA_TOKEN]) as fake:
        yield fake


def openai_settings(server: FakeOpenAIServer, **values: Any) -> Settings:
    base: dict[str, Any] = {
        "llm_provider": "openai",
        "embed_provider": "openai",
        "llm_model": "qwen2.5:1.5b",
        "openai_base_url": server.openai_base_url,
        "openai_api_key": OPENAI_KEY,
    }
    return settings_of(**{**base, **values})


async def stream_deltas(settings: Settings, **build: Any) -> list[str]:
    llm = build_llm(settings, **build)
    return [chunk.delta or "" async for chunk in await llm.astream_chat(USER)]


# --- OpenAI and OpenAI-compatible servers ------------------------------------------------------


async def test_openai_complete_uses_base_url_key_and_any_model_name(
    server: FakeOpenAIServer,
) -> None:
    llm = build_llm(openai_settings(server, llm_temperature=0.2), max_retries=0)
    assert llm.metadata.model_name == "qwen2.5:1.5b"
    assert llm.metadata.context_window == DEFAULT_COMPAT_CONTEXT_WINDOW
    assert llm.metadata.is_chat_model

    response = await llm.acomplete("Name one programming language.")

    assert response.text == "Fake reply: Name one programming language."
    request = server.last_request
    assert (request.method, request.path) == ("POST", "/v1/chat/completions")
    assert request.headers["authorization"] == f"Bearer {OPENAI_KEY}"
    assert request.json["model"] == "qwen2.5:1.5b"
    assert request.json["max_tokens"] == 320
    assert request.json["temperature"] == 0.2
    assert not request.stream


def test_an_unknown_model_can_be_given_its_window_and_tool_calling() -> None:
    llm = CompatOpenAI(
        model="team-finetune", api_key="k", context_window=9000, function_calling=True
    )
    assert (llm.metadata.context_window, llm.metadata.is_function_calling_model) == (9000, True)


async def test_openai_stream_chat_yields_several_deltas(server: FakeOpenAIServer) -> None:
    server.script(Reply("Before college the author wrote short stories [1].", ttft=0.02))
    server.tokens_per_second = 500

    deltas = await stream_deltas(openai_settings(server), max_retries=0)

    assert "".join(deltas) == "Before college the author wrote short stories [1]."
    assert len([d for d in deltas if d]) >= 5
    assert server.last_request.stream


async def test_openai_compatible_server_without_key_gets_a_placeholder() -> None:
    with FakeOpenAIServer() as server:
        settings = openai_settings(server, openai_api_key=None)
        response = await build_llm(settings, max_retries=0).acomplete("hi")
    assert response.text == "Fake reply: hi"
    assert server.last_request.headers["authorization"] == f"Bearer {NO_KEY_PLACEHOLDER}"


async def test_openai_defaults_to_gpt_4o_mini_with_its_known_context_window(
    server: FakeOpenAIServer,
) -> None:
    llm = build_llm(openai_settings(server, llm_model=""))
    assert llm.metadata.model_name == DEFAULT_OPENAI_MODEL
    assert llm.metadata.context_window == 128000
    await llm.acomplete("hi")
    assert server.last_request.json["model"] == DEFAULT_OPENAI_MODEL


def test_embed_batch_size_defaults_per_provider_and_follows_the_setting(
    server: FakeOpenAIServer,
) -> None:
    assert embed_batch_size(Settings(_env_file=None)) == 16  # type: ignore[call-arg]
    remote = openai_settings(server)
    assert embed_batch_size(remote) == 64
    assert build_embed_model(remote, max_retries=0).embed_batch_size == 64
    local = Settings(_env_file=None, embeddings={"batch_size": 8})
    assert embed_batch_size(local) == 8


async def test_openai_embeddings_batch(server: FakeOpenAIServer) -> None:
    settings = openai_settings(server, embed_model="nomic-embed-text", embed_batch_size=2)
    embed = build_embed_model(settings, max_retries=0)
    texts = ["Viaweb was an online store builder.", "Ducks live near ponds.", "IBM 1401"]

    vectors = await embed.aget_text_embedding_batch(texts)

    assert [len(v) for v in vectors] == [384, 384, 384]
    for text, vector in zip(texts, vectors, strict=True):
        assert vector == pytest.approx(fake_embedding(text), abs=1e-6)
    requests = server.requests_of("embeddings")
    assert [r.path for r in requests] == ["/v1/embeddings", "/v1/embeddings"]  # batches of 2
    assert {r.json["model"] for r in requests} == {"nomic-embed-text"}
    assert all(r.headers["authorization"] == f"Bearer {OPENAI_KEY}" for r in requests)
    query = await embed.aget_query_embedding("Where do ducks live?")
    assert len(query) == 384


async def test_wrong_key_is_an_authentication_error(server: FakeOpenAIServer) -> None:
    llm = build_llm(openai_settings(server, openai_api_key="sk-wrong"), max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        await llm.acomplete("hi")
    assert server.last_request.headers["authorization"] == "Bearer sk-wrong"


# --- Azure OpenAI (and API Management) -----------------------------------------------------------


async def test_azure_chat_sends_deployment_api_version_key_and_apim_header(
    server: FakeOpenAIServer,
) -> None:
    llm = build_llm(azure_settings(server), max_retries=0)
    assert llm.metadata.context_window == DEFAULT_COMPAT_CONTEXT_WINDOW  # unknown deployment

    response = await llm.acomplete("Who founded Viaweb?")

    assert response.text == "Fake reply: Who founded Viaweb?"
    request = server.last_request
    assert_azure_request(request, "/openai/deployments/chat-deployment/chat/completions")
    assert request.deployment == "chat-deployment"
    assert "authorization" not in request.headers


async def test_azure_streaming(server: FakeOpenAIServer) -> None:
    server.script(Reply.of_tokens(8, tokens_per_second=1000))

    deltas = await stream_deltas(azure_settings(server), max_retries=0)

    assert "".join(deltas) == " ".join(f"tok{i}" for i in range(1, 9))
    assert len([d for d in deltas if d]) == 8
    assert server.last_request.stream
    assert_azure_request(
        server.last_request, "/openai/deployments/chat-deployment/chat/completions"
    )


async def test_first_token_logprobs_for_the_citation_judge(server: FakeOpenAIServer) -> None:
    """OpenAI and Azure give the judge the first token's alternatives: one token, asked with
    ``logprobs``; a server that sends none gives an empty answer (the judge then keeps)."""
    verdict = {"Yes": math.log(0.2), "No": math.log(0.7), "Maybe": math.log(0.1)}
    for settings in (openai_settings(server), azure_settings(server)):
        llm = build_llm(settings, max_retries=0)
        assert isinstance(llm, TokenLogprobs)
        server.script(Reply(text="No", top_logprobs=verdict))
        alternatives = await llm.afirst_token_logprobs(USER, top=2)
        assert alternatives == pytest.approx({"No": math.log(0.7), "Yes": math.log(0.2)})
        body = server.last_request.json
        assert body["max_tokens"] == 1 and body["temperature"] == 0.0
        assert body["logprobs"] is True and body["top_logprobs"] == 2
        assert not server.last_request.stream
        server.script(Reply(text="No", top_logprobs=verdict))
        support = await LLMJudge(llm).support("Viaweb was founded in 1995.", "Viaweb ...")
        assert support == pytest.approx(0.2 / 0.9)
        server.script("Yes")  # no logprobs in the reply
        assert await llm.afirst_token_logprobs(USER) == {}
    assert server.last_request.is_azure


async def test_azure_entra_id_static_token_is_a_bearer_token(server: FakeOpenAIServer) -> None:
    settings = azure_settings(server, azure_api_key=None, azure_ad_token=ENTRA_TOKEN)

    await build_llm(settings, max_retries=0).acomplete("hi")
    await build_embed_model(settings, max_retries=0).aget_query_embedding("hi")

    for request in server.requests:
        assert request.headers["authorization"] == f"Bearer {ENTRA_TOKEN}"
        assert "api-key" not in request.headers
        assert request.headers["ocp-apim-subscription-key"] == APIM_KEY


async def test_azure_entra_id_from_default_azure_credential(
    server: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    import azure.identity

    scopes: list[tuple[str, ...]] = []

    def fake_provider(_credential: object, *requested: str) -> Callable[[], str]:
        scopes.append(requested)
        return lambda: ENTRA_TOKEN

    monkeypatch.setattr(azure.identity, "DefaultAzureCredential", lambda: object())
    monkeypatch.setattr(azure.identity, "get_bearer_token_provider", fake_provider)
    settings = azure_settings(server, azure_api_key=None, azure_use_entra_id=True)

    await build_llm(settings, max_retries=0).acomplete("hi")

    assert scopes == [("https://cognitiveservices.azure.com/.default",)]
    assert server.last_request.headers["authorization"] == f"Bearer {ENTRA_TOKEN}"
    assert "api-key" not in server.last_request.headers


def test_azure_entra_id_without_azure_identity_says_what_to_install(
    server: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "azure.identity", None)
    settings = azure_settings(server, azure_api_key=None, azure_use_entra_id=True)
    with pytest.raises(ConfigError, match="pip install azure-identity"):
        build_llm(settings)


async def test_azure_embeddings(server: FakeOpenAIServer) -> None:
    embed = build_embed_model(azure_settings(server), max_retries=0)

    vectors = await embed.aget_text_embedding_batch(["Yahoo bought Viaweb.", "Ducks eat plants."])

    assert [len(v) for v in vectors] == [384, 384]
    assert vectors[0] == pytest.approx(fake_embedding("Yahoo bought Viaweb."), abs=1e-6)
    assert_azure_request(server.last_request, "/openai/deployments/embed-deployment/embeddings")


async def test_fake_azure_paths_need_api_version(server: FakeOpenAIServer) -> None:
    async with httpx.AsyncClient(base_url=server.url, headers={"api-key": AZURE_KEY}) as client:
        response = await client.post(
            "/openai/deployments/d/chat/completions", json={"messages": []}
        )
        models = await client.get("/v1/models")
    assert response.status_code == 400
    assert "api-version" in response.json()["error"]["message"]
    assert models.json()["data"][0]["id"] == "fake-model"


# --- failures -----------------------------------------------------------------------------------


async def test_upstream_500_fails_promptly(server: FakeOpenAIServer) -> None:
    server.fail_next(500, times=None)
    llm = build_llm(openai_settings(server), max_retries=0)
    started = time.monotonic()

    with pytest.raises(openai.InternalServerError) as caught:
        await asyncio.wait_for(llm.acomplete("hi"), PROMPT)
    with pytest.raises(openai.InternalServerError):
        await asyncio.wait_for(stream_deltas(openai_settings(server), max_retries=0), PROMPT)

    assert time.monotonic() - started < 2.0
    assert len(server.requests) == 2  # no retry at all with max_retries=0
    error = as_upstream_error(caught.value)
    assert isinstance(error, UpstreamError)
    assert "HTTP 500" in str(error)
    assert "\n" not in str(error)


async def test_retries_are_not_multiplied(server: FakeOpenAIServer) -> None:
    """max_retries=2 means three requests (the SDK retries; llama-index's layer is off)."""
    server.fail_next(429, times=None, retry_after=0.01)
    embed = build_embed_model(openai_settings(server), max_retries=2)
    llm = build_llm(openai_settings(server), max_retries=2)

    with pytest.raises(openai.RateLimitError):
        await asyncio.wait_for(llm.acomplete("hi"), PROMPT)
    assert len(server.requests_of("chat")) == 3
    with pytest.raises(openai.RateLimitError):
        await asyncio.wait_for(embed.aget_query_embedding("hi"), PROMPT)
    assert len(server.requests_of("embeddings")) == 3


async def test_connection_dropped_mid_stream_raises(server: FakeOpenAIServer) -> None:
    server.script(Reply.drop(after_tokens=2, text="one two three four five"))
    llm = build_llm(openai_settings(server), max_retries=0)
    seen: list[str] = []

    async def consume() -> None:
        async for chunk in await llm.astream_chat(USER):
            seen.append(chunk.delta or "")

    with pytest.raises((httpx.HTTPError, openai.APIError)) as caught:
        await asyncio.wait_for(consume(), PROMPT)
    assert "".join(seen) == "one two "
    assert isinstance(as_upstream_error(caught.value), UpstreamError)


async def test_unreachable_server_is_a_connection_error() -> None:
    with FakeOpenAIServer() as gone:
        settings = openai_settings(gone)
    llm = build_llm(settings, max_retries=0)
    with pytest.raises(openai.APIConnectionError) as caught:
        await asyncio.wait_for(llm.acomplete("hi"), PROMPT)
    assert "cannot reach the LLM provider at http://127.0.0.1:" in str(
        as_upstream_error(caught.value)
    )


# --- configuration errors ------------------------------------------------------------------------

#: an Azure endpoint, and with it a key; an Azure chat model, and an Azure embedder
AZURE_AT = {"azure_endpoint": "https://x.openai.azure.com"}
AZURE_KEYED = {**AZURE_AT, "azure_api_key": "k"}
AZURE_CHAT = {"llm_provider": "azure", "llm_model": "chat"}
AZURE_EMBED = {"embed_provider": "azure", "azure_embed_deployment": "e"}
APIM_ONLY = {"azure_headers": {"Ocp-Apim-Subscription-Key": "only-apim"}}
CONFIG_ERRORS: list[tuple[str, dict[str, Any], str]] = [
    ("llm", {"llm_provider": "openai"}, "CITEFLOW_OPENAI_API_KEY"),
    ("embed", {"embed_provider": "openai"}, "CITEFLOW_OPENAI_API_KEY"),
    (
        "llm",
        {"llm_provider": "openai", "openai_base_url": "localhost:11434/v1"},
        "CITEFLOW_OPENAI_BASE_URL",
    ),
    ("llm", {**AZURE_CHAT, "azure_api_key": "k"}, "CITEFLOW_AZURE_ENDPOINT"),
    ("embed", {**AZURE_EMBED, "azure_api_key": "k"}, "CITEFLOW_AZURE_ENDPOINT"),
    ("llm", {"llm_provider": "azure", **AZURE_KEYED}, "CITEFLOW_LLM_MODEL"),
    ("embed", {"embed_provider": "azure", **AZURE_KEYED}, "CITEFLOW_AZURE_EMBED_DEPLOYMENT"),
    ("llm", {**AZURE_CHAT, **AZURE_AT}, "CITEFLOW_AZURE_API_KEY"),
    ("embed", {**AZURE_EMBED, **APIM_ONLY, **AZURE_AT}, "CITEFLOW_AZURE_API_KEY"),
    ("embed", {"embed_provider": "local", "embed_model": "no/such/dir"}, "CITEFLOW_EMBED_MODEL"),
]


@pytest.mark.parametrize(("what", "values", "env_var"), CONFIG_ERRORS)
def test_config_errors_name_the_variable(what: str, values: dict[str, Any], env_var: str) -> None:
    settings = settings_of(**values)
    build = build_llm if what == "llm" else build_embed_model
    with pytest.raises(ConfigError) as caught:
        build(settings)
    assert env_var in str(caught.value)
    assert "\n" not in str(caught.value)


# --- descriptions --------------------------------------------------------------------------------

SECRETS = [
    "sk-secret-openai",
    "azure-secret-key",
    "entra-secret-token",
    "apim-secret",
    "qdrant-secret",
    "basic-auth-pw",
    "query-token",
]


@pytest.mark.parametrize(
    ("llm_provider", "embed_provider", "qdrant_url"),
    [
        ("local", "local", None),
        (
            "openai",
            "openai",
            "https://admin:qdrant-secret@qdrant.example:6333?api_key=qdrant-secret",
        ),
        ("azure", "azure", "http://localhost:6333"),
        ("openai", "azure", None),
    ],
)
def test_describe_providers_never_shows_secrets(
    llm_provider: str, embed_provider: str, qdrant_url: str | None
) -> None:
    settings = settings_of(
        llm_provider=llm_provider,
        embed_provider=embed_provider,
        llm_model="" if llm_provider == "local" else "gpt-4o",
        openai_api_key="sk-secret-openai",
        openai_base_url="https://user:basic-auth-pw@llm.example/v1?token=query-token",
        azure_endpoint="https://res.openai.azure.com/?sig=query-token",
        azure_api_key="azure-secret-key",
        azure_ad_token="entra-secret-token",
        azure_embed_deployment="emb",
        azure_headers={"Ocp-Apim-Subscription-Key": "apim-secret"},
        qdrant_url=qdrant_url,
        qdrant_api_key=SecretStr("qdrant-secret"),
    )

    line = describe_providers(settings)

    assert "\n" not in line
    assert [secret for secret in SECRETS if secret in line] == []
    assert line.startswith("LLM: ")
    assert " · embeddings: " in line
    if qdrant_url is None:
        assert f"store: embedded Qdrant at {settings.store.qdrant_path}" in line
    else:
        assert "store: Qdrant server at http" in line
    if llm_provider == "local":
        assert line == (
            "LLM: local llama.cpp qwen2.5-coder-1.5b-instruct-q4_k_m.gguf · embeddings: local "
            f"all-MiniLM-L6-v2 · store: embedded Qdrant at {settings.store.qdrant_path}"
        )
    if llm_provider == "openai":
        assert "openai-compatible gpt-4o at https://llm.example/v1" in line
    if embed_provider == "azure":
        assert "azure deployment emb at https://res.openai.azure.com" in describe_embeddings(
            settings
        )


def test_default_reply_is_deterministic() -> None:
    """The fake's default answer is predictable, so other tests can assert on it."""
    request = RecordedRequest(
        method="POST",
        path="/v1/chat/completions",
        query={},
        headers={},
        json={"messages": [{"role": "system", "content": "x"}, {"role": "user", "content": "a b"}]},
        kind="chat",
        deployment=None,
    )
    assert default_reply(request) == "Fake reply: a b"


# --- the real local embedder ---------------------------------------------------------------------


@pytest.mark.slow
async def test_local_minilm_embedder(monkeypatch: pytest.MonkeyPatch) -> None:
    # build_embed_model sets these process-wide; monkeypatch restores them after the test.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    embed = build_embed_model(settings_of(embed_provider="local"))

    cat, kitten, revenue = await embed.aget_text_embedding_batch(
        [
            "A cat is sleeping on the sofa.",
            "A kitten naps on the couch.",
            "Quarterly revenue grew by five percent.",
        ]
    )

    assert len(cat) == len(kitten) == len(revenue) == 384
    assert cosine(cat, kitten) > cosine(cat, revenue) + 0.2
    assert len(await embed.aget_query_embedding("Where is the cat?")) == 384
