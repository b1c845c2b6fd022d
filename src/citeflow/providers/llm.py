"""The chat LLM that `Settings` asks for: built by `build_llm`, named by `describe_llm`.

Three providers:

* ``openai``: the OpenAI API or any OpenAI-compatible server (vLLM, Ollama, llama.cpp server,
  LM Studio...) through ``CITEFLOW_OPENAI_BASE_URL``. Model names OpenAI does not know (e.g.
  ``qwen2.5:1.5b``) work: `CompatOpenAI` falls back to a conservative context window instead of
  raising.
* ``azure``: Azure OpenAI (`CompatAzureOpenAI`), directly or behind an Azure API Management
  gateway (``CITEFLOW_AZURE_HEADERS`` adds e.g. ``Ocp-Apim-Subscription-Key``), authenticated by
  API key, a static Entra ID token, or azure-identity's ``DefaultAzureCredential``.
* ``local``: llama.cpp in-process (`citeflow.providers.local_llm`, imported lazily).

Retries: the OpenAI SDK retries connection errors, 408/409/429 and 5xx (honouring
``Retry-After``); llama-index's own retry layer is off, so a failing upstream costs
``1 + max_retries`` requests, not their square.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import openai
from llama_index.core.base.llms.types import LLMMetadata
from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.llms import LLM
from llama_index.llms.azure_openai import AzureOpenAI
from llama_index.llms.openai import OpenAI
from llama_index.llms.openai.utils import (
    ALL_AVAILABLE_MODELS,
    is_chat_model,
    is_function_calling_model,
    openai_modelname_to_contextsize,
    resolve_openai_credentials,
)

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
from citeflow.providers.openai_stream import LeanStreamingMixin
from citeflow.settings import Settings

__all__ = [
    "DEFAULT_COMPAT_CONTEXT_WINDOW",
    "DEFAULT_OPENAI_MODEL",
    "CompatAzureOpenAI",
    "CompatOpenAI",
    "build_llm",
    "describe_llm",
]

#: Model used when ``CITEFLOW_LLM_MODEL`` is empty and the provider is ``openai``.
DEFAULT_OPENAI_MODEL = "gpt-4o-mini"
#: Context window assumed for model names OpenAI's tables do not know (Ollama's default is 4096).
DEFAULT_COMPAT_CONTEXT_WINDOW = 4096


class _CompatMixin(LeanStreamingMixin):
    """What `CompatOpenAI` and `CompatAzureOpenAI` share: lean streaming, and metadata that
    never raises for model or deployment names OpenAI's tables do not know."""

    @property
    def metadata(self) -> LLMMetadata:
        """Metadata; never raises for unknown model or deployment names."""
        llm: CompatOpenAI | CompatAzureOpenAI = self  # type: ignore[assignment]
        model = _base_model_name(llm.model)
        known = model in ALL_AVAILABLE_MODELS
        window = llm.context_window
        if window is None:
            try:
                window = openai_modelname_to_contextsize(model)
            except ValueError:  # unknown or discontinued name
                window = DEFAULT_COMPAT_CONTEXT_WINDOW
        function_calling = llm.function_calling
        if function_calling is None:
            function_calling = known and is_function_calling_model(model)
        return LLMMetadata(
            context_window=window,
            num_output=llm.max_tokens or -1,
            # Every server worth talking to has /chat/completions; the legacy endpoint is a trap.
            is_chat_model=is_chat_model(model) if known else True,
            is_function_calling_model=function_calling,
            model_name=model,
        )

    def _init_sdk_clients(
        self,
        sdk: dict[str, Any],
        sync_class: Callable[..., openai.OpenAI],
        async_class: Callable[..., openai.AsyncOpenAI],
        *,
        timeout: float = 60.0,
        default_headers: dict[str, str] | None = None,
        client_max_retries: int = DEFAULT_MAX_RETRIES,
        async_http_client: httpx.AsyncClient | None = None,
        **kwargs: Any,
    ) -> None:
        """llama-index's ``__init__`` with the OpenAI SDK clients built here from ``sdk`` (the
        connection) and the options both share, the async one also kept for the lean path."""
        options = {"timeout": timeout, "max_retries": client_max_retries}
        sdk = {**sdk, **options, "default_headers": default_headers}
        client = async_class(**sdk, http_client=async_http_client)
        super().__init__(  # type: ignore[call-arg]  # the llama-index class after this mixin
            timeout=timeout,
            default_headers=default_headers,
            client_max_retries=client_max_retries,
            openai_client=sync_class(**sdk),
            async_openai_client=client,
            **kwargs,
        )
        self._sdk_client = client


def _base_model_name(model: str) -> str:
    """The OpenAI model a fine-tuned model is named after (``ft:gpt-4o-mini:org::id``), as
    llama-index reads it."""
    if model.startswith("ft:"):
        return model.split(":")[1]
    if "ft-" in model:  # legacy fine-tuning
        return model.split(":")[0]
    return model


class CompatOpenAI(_CompatMixin, OpenAI):
    """`OpenAI` that works with any OpenAI-compatible server and any model name.

    Unknown model names get `context_window` (default `DEFAULT_COMPAT_CONTEXT_WINDOW`), are
    treated as chat models and, unless `function_calling` says otherwise, as models without tool
    calling (structured output then goes through the prompt, which every server supports).
    Streamed chats are parsed by `LeanStreamingMixin` (a fraction of the SDK's CPU per token).
    The OpenAI SDK clients are built here (with ``client_max_retries`` and ``async_http_client``)
    and handed to llama-index, so the SDK retries and llama-index and the lean path share them.
    """

    context_window: int | None = Field(
        default=None, description="Context window; None: OpenAI's table, else the default."
    )
    function_calling: bool | None = Field(
        default=None, description="Tool calling support; None: known OpenAI models only."
    )
    client_max_retries: int = Field(
        default=DEFAULT_MAX_RETRIES, ge=0, description="Retries done by the OpenAI SDK."
    )
    _sdk_client: openai.AsyncOpenAI = PrivateAttr()

    def __init__(
        self, *, api_key: str | None = None, api_base: str | None = None, **kwargs: Any
    ) -> None:
        key, base, _ = resolve_openai_credentials(api_key=api_key, api_base=api_base)
        sdk = {"api_key": key, "base_url": base}
        self._init_sdk_clients(
            sdk, openai.OpenAI, openai.AsyncOpenAI, api_key=key, api_base=base, **kwargs
        )

    @classmethod
    def class_name(cls) -> str:
        """Name used when serialising the LLM."""
        return "citeflow_compat_openai_llm"


class CompatAzureOpenAI(_CompatMixin, AzureOpenAI):
    """`AzureOpenAI` whose deployment names need not be OpenAI model names.

    Same metadata fallback, retry policy, SDK clients and streaming as `CompatOpenAI`. With an
    Entra ID token provider, the SDK sends its token as ``Authorization: Bearer`` and no
    ``api-key`` header.
    """

    context_window: int | None = Field(default=None)
    function_calling: bool | None = Field(default=None)
    client_max_retries: int = Field(default=DEFAULT_MAX_RETRIES, ge=0)
    _sdk_client: openai.AsyncAzureOpenAI = PrivateAttr()

    def __init__(
        self,
        *,
        azure_endpoint: str | None = None,
        api_version: str | None = None,
        api_key: str | None = None,
        use_azure_ad: bool = False,
        azure_ad_token_provider: Callable[[], str] | None = None,
        **kwargs: Any,
    ) -> None:
        sdk = {
            "azure_endpoint": azure_endpoint,
            "api_version": api_version,
            "api_key": None if use_azure_ad else api_key,
            "azure_ad_token_provider": azure_ad_token_provider,
        }
        self._init_sdk_clients(
            sdk,
            openai.AzureOpenAI,
            openai.AsyncAzureOpenAI,
            azure_endpoint=azure_endpoint,
            api_version=api_version,
            api_key=api_key,
            use_azure_ad=use_azure_ad,
            azure_ad_token_provider=azure_ad_token_provider,
            **kwargs,
        )

    @classmethod
    def class_name(cls) -> str:
        """Name used when serialising the LLM."""
        return "citeflow_compat_azure_openai_llm"


def build_llm(
    settings: Settings, *, max_retries: int = DEFAULT_MAX_RETRIES, aiohttp: bool = False
) -> LLM:
    """Build the LLM for ``settings.llm.provider``.

    Args:
        settings: the settings.
        max_retries: retries of a failed request (openai/azure only); tests use 0.
        aiohttp: send the async requests (openai/azure) through aiohttp
            (`citeflow.providers.aiohttp_transport`): less client CPU per streamed answer;
            the server's choice. The client is bound to an event loop at a time, so
            one-shot callers (``asyncio.run`` per question) keep httpx's.

    Raises:
        ConfigError: a setting is missing or invalid (the message names the variable).
    """
    provider = settings.llm.provider
    if provider == "local":
        from citeflow.providers.local_llm import LocalLlamaCppLLM

        return LocalLlamaCppLLM.from_settings(settings)
    http_client = None
    if aiohttp:
        from citeflow.providers.aiohttp_transport import aiohttp_client

        http_client = aiohttp_client(settings.llm.timeout)
    if provider == "openai":
        return _build_openai(settings, max_retries, http_client)
    if provider == "azure":
        return _build_azure(settings, max_retries, http_client)
    raise ConfigError(f"CITEFLOW_LLM_PROVIDER={provider!r}: expected local, openai or azure")


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
            async_http_client=http_client,
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
        return CompatAzureOpenAI(
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
            async_http_client=http_client,
        )
    except ValueError as exc:
        raise ConfigError(f"Azure OpenAI LLM: {first_line(exc)}") from None


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
