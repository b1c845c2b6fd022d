"""Build the chat LLM that `Settings` asks for, and describe it.

Three providers:

* ``openai``: the OpenAI API or any OpenAI-compatible server (vLLM, Ollama, llama.cpp server,
  LM Studio...) through ``CITEFLOW_OPENAI_BASE_URL`` (`citeflow.providers.openai_llms`).
* ``azure``: Azure OpenAI, directly or behind an Azure API Management gateway
  (``CITEFLOW_AZURE_HEADERS`` adds e.g. ``Ocp-Apim-Subscription-Key``), authenticated by API key,
  a static Entra ID token, or azure-identity's ``DefaultAzureCredential``.
* ``local``: llama.cpp in-process (`citeflow.providers.local_llm`, imported lazily).
"""

from __future__ import annotations

from typing import Any

import httpx
from llama_index.core.llms import LLM

from citeflow.errors import ConfigError, first_line
from citeflow.providers.connections import (
    DEFAULT_MAX_RETRIES,
    azure_auth,
    azure_location,
    describe_openai_model,
    openai_connection,
    require_azure_api_version,
    require_azure_endpoint,
)
from citeflow.providers.openai_llms import CompatAzureOpenAI, CompatOpenAI
from citeflow.settings import Settings

__all__ = ["DEFAULT_OPENAI_MODEL", "build_llm", "describe_llm"]

#: Model used when ``CITEFLOW_LLM_MODEL`` is empty and the provider is ``openai``.
DEFAULT_OPENAI_MODEL = "gpt-4o-mini"


def build_llm(
    settings: Settings, *, max_retries: int = DEFAULT_MAX_RETRIES, aiohttp: bool = False
) -> LLM:
    """Build the LLM for ``settings.llm.provider``.

    Args:
        settings: the settings.
        max_retries: retries of a failed request (openai/azure only); tests use 0.
        aiohttp: send the async requests (openai/azure) through aiohttp
            (`citeflow.providers.aiohttp_transport`): a third less client CPU per streamed
            answer; the server's choice. The client is bound to an event loop at a time, so
            one-shot callers (``asyncio.run`` per question) keep httpx's.

    Raises:
        ConfigError: a setting is missing or invalid (the message names the variable).
    """
    provider = settings.llm.provider
    if provider == "local":
        from citeflow.providers.local_llm import LocalLlamaCppLLM

        llm: LLM = LocalLlamaCppLLM.from_settings(settings)
        return llm
    http_client = _async_http_client(settings) if aiohttp else None
    if provider == "openai":
        return _build_openai(settings, max_retries, http_client)
    if provider == "azure":
        return _build_azure(settings, max_retries, http_client)
    raise ConfigError(f"CITEFLOW_LLM_PROVIDER={provider!r}: expected local, openai or azure")


def _async_http_client(settings: Settings) -> httpx.AsyncClient:
    from citeflow.providers.aiohttp_transport import aiohttp_client

    return aiohttp_client(settings.llm.timeout)


def _http_kwargs(http_client: httpx.AsyncClient | None) -> dict[str, Any]:
    # an __init__ argument of llama-index's OpenAI LLMs, not a field: mypy's pydantic plugin
    # does not see it
    return {"async_http_client": http_client}


def _build_openai(
    settings: Settings, max_retries: int, http_client: httpx.AsyncClient | None = None
) -> LLM:
    model = settings.llm.model.strip() or DEFAULT_OPENAI_MODEL
    base_url, key = openai_connection(settings, "CITEFLOW_LLM_PROVIDER")
    try:
        return CompatOpenAI(
            model=model,
            temperature=settings.llm.temperature,
            max_tokens=settings.llm.max_tokens,
            api_key=key,
            api_base=base_url or "https://api.openai.com/v1",
            timeout=settings.llm.timeout,
            max_retries=0,  # llama-index's tenacity layer; the SDK retries instead
            client_max_retries=max_retries,
            **_http_kwargs(http_client),
        )
    except ValueError as exc:  # pydantic ValidationError included
        raise ConfigError(f"CITEFLOW_LLM_MODEL={model!r}: {first_line(exc)}") from None


def _build_azure(
    settings: Settings, max_retries: int, http_client: httpx.AsyncClient | None = None
) -> LLM:
    endpoint = require_azure_endpoint(settings, purpose="the LLM")
    deployment = settings.llm.model.strip()
    if not deployment:
        raise ConfigError(
            "CITEFLOW_LLM_PROVIDER=azure needs CITEFLOW_LLM_MODEL set to the Azure OpenAI "
            "deployment name"
        )
    auth = azure_auth(settings, purpose="the LLM")
    try:
        llm: LLM = CompatAzureOpenAI(
            model=deployment,
            engine=deployment,
            temperature=settings.llm.temperature,
            max_tokens=settings.llm.max_tokens,
            azure_endpoint=endpoint,
            api_version=require_azure_api_version(settings),
            api_key=auth.api_key,
            use_azure_ad=auth.use_azure_ad,
            azure_ad_token_provider=auth.token_provider,
            default_headers=dict(settings.azure.headers) or None,
            timeout=settings.llm.timeout,
            max_retries=0,
            client_max_retries=max_retries,
            **_http_kwargs(http_client),
        )
    except ValueError as exc:
        raise ConfigError(f"Azure OpenAI LLM: {first_line(exc)}") from None
    return llm


def describe_llm(settings: Settings) -> str:
    """Which LLM is in use, e.g. ``openai gpt-4o-mini at http://localhost:11434/v1``; no secrets."""
    provider = settings.llm.provider
    if provider == "local":
        return f"local llama.cpp {settings.local.gguf_path.name}"
    if provider == "openai":
        return describe_openai_model(settings, settings.llm.model.strip() or DEFAULT_OPENAI_MODEL)
    deployment = settings.llm.model.strip() or "<no deployment>"
    return (
        f"azure deployment {deployment}{azure_location(settings)}"
        f" (api-version {settings.azure.api_version})"
    )
