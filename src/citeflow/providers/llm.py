"""Build the chat LLM that `Settings` asks for, and describe the providers in use.

Three providers:

* ``openai``: the OpenAI API or any OpenAI-compatible server (vLLM, Ollama, llama.cpp server,
  LM Studio...) through ``CITEFLOW_OPENAI_BASE_URL``. Model names OpenAI does not know (e.g.
  ``qwen2.5:1.5b``) work: `CompatOpenAI` falls back to a conservative context window instead of
  raising.
* ``azure``: Azure OpenAI, directly or behind an Azure API Management gateway
  (``CITEFLOW_AZURE_HEADERS`` adds e.g. ``Ocp-Apim-Subscription-Key``), authenticated by API key,
  a static Entra ID token, or azure-identity's ``DefaultAzureCredential``.
* ``local``: llama.cpp in-process (`citeflow.providers.local_llm`, imported lazily).

Retries: the OpenAI SDK retries connection errors, 408/409/429 and 5xx with a short exponential
backoff (honouring ``Retry-After``); llama-index's own tenacity retry layer on top of it is turned
off so a failing upstream costs ``1 + max_retries`` requests, not their square.
"""

from __future__ import annotations

import contextlib
import email.utils
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

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
from openai.lib.azure import API_KEY_SENTINEL

from citeflow.errors import ConfigError, UpstreamError, UpstreamRateLimitError, first_line
from citeflow.providers.openai_stream import LeanStreamingMixin
from citeflow.settings import Settings

__all__ = [
    "AZURE_AD_SCOPE",
    "DEFAULT_COMPAT_CONTEXT_WINDOW",
    "DEFAULT_MAX_RETRIES",
    "DEFAULT_OPENAI_MODEL",
    "DEFAULT_RETRY_AFTER",
    "NO_KEY_PLACEHOLDER",
    "AzureAuth",
    "CompatAzureOpenAI",
    "CompatOpenAI",
    "as_upstream_error",
    "azure_auth",
    "build_llm",
    "describe_llm",
    "require_azure_api_version",
    "require_azure_endpoint",
    "require_http_url",
    "retry_after",
    "safe_url",
    "secret_value",
]

#: Model used when ``CITEFLOW_LLM_MODEL`` is empty and the provider is ``openai``.
DEFAULT_OPENAI_MODEL = "gpt-4o-mini"
#: Retries of one request by the OpenAI SDK (so at most three requests per call).
DEFAULT_MAX_RETRIES = 2
#: Seconds a client is told to wait when a provider's HTTP 429 says not how long (Retry-After).
DEFAULT_RETRY_AFTER = 10.0
#: Longest wait passed on from a provider's Retry-After.
MAX_RETRY_AFTER = 3600.0
#: Context window assumed for model names OpenAI's tables do not know (Ollama's default is 4096).
DEFAULT_COMPAT_CONTEXT_WINDOW = 4096
#: API key sent to an OpenAI-compatible server when none is configured (most ignore it).
NO_KEY_PLACEHOLDER = "sk-no-key-required"
#: OAuth scope of Azure OpenAI for Entra ID tokens.
AZURE_AD_SCOPE = "https://cognitiveservices.azure.com/.default"


# --- helpers shared with embeddings.py ---------------------------------------------------------


def safe_url(url: str) -> str:
    """Return `url` without user info, query or fragment, so it can be shown or logged."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return "<invalid URL>"
    if not parts.scheme or not host:
        return "<invalid URL>"
    netloc = f"[{host}]" if ":" in host else host
    if port is not None:
        netloc = f"{netloc}:{port}"
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))


def require_http_url(value: str, env_var: str) -> str:
    """Return `value` stripped if it is an http(s) URL with a host, else raise `ConfigError`."""
    url = value.strip()
    try:
        parts = urlsplit(url)
        ok = parts.scheme in ("http", "https") and bool(parts.hostname)
    except ValueError:
        ok = False
    if not ok:
        raise ConfigError(f"{env_var} must be an http(s) URL such as https://host/..., got {url!r}")
    return url


def secret_value(secret: Any) -> str:
    """The stripped value of an optional `SecretStr` ('' when unset)."""
    if secret is None:
        return ""
    return str(secret.get_secret_value()).strip()


@dataclass(frozen=True)
class AzureAuth:
    """How to authenticate to Azure OpenAI: exactly one of `api_key` or `token_provider` is set."""

    api_key: str | None
    token_provider: Callable[[], str] | None
    label: str

    @property
    def use_azure_ad(self) -> bool:
        """True when an Entra ID bearer token is sent instead of an ``api-key`` header."""
        return self.token_provider is not None


def azure_auth(settings: Settings, *, purpose: str) -> AzureAuth:
    """Resolve Azure OpenAI credentials from settings.

    Order: ``CITEFLOW_AZURE_USE_ENTRA_ID`` (DefaultAzureCredential), then a static
    ``CITEFLOW_AZURE_AD_TOKEN``, then ``CITEFLOW_AZURE_API_KEY``, then an ``api-key`` or
    ``Authorization`` header given verbatim in ``CITEFLOW_AZURE_HEADERS``.

    Args:
        settings: the settings.
        purpose: what needs the credentials, for the error message (e.g. ``"the LLM"``).

    Raises:
        ConfigError: no credentials, or Entra ID asked for without azure-identity installed.
    """
    if settings.azure.use_entra_id:
        try:
            from azure.identity import DefaultAzureCredential, get_bearer_token_provider
        except ImportError:
            raise ConfigError(
                "CITEFLOW_AZURE_USE_ENTRA_ID=true needs the azure-identity package: "
                "pip install azure-identity"
            ) from None
        provider = get_bearer_token_provider(DefaultAzureCredential(), AZURE_AD_SCOPE)
        return AzureAuth(None, provider, "Entra ID (DefaultAzureCredential)")
    token = secret_value(settings.azure.ad_token)
    if token:
        return AzureAuth(None, lambda: token, "Entra ID token")
    key = secret_value(settings.azure.api_key)
    if key:
        return AzureAuth(key, None, "API key")
    header_names = {name.lower() for name in settings.azure.headers}
    if header_names & {"api-key", "authorization"}:
        # The SDK sends no auth header of its own for this sentinel; the configured one is used.
        return AzureAuth(API_KEY_SENTINEL, None, "CITEFLOW_AZURE_HEADERS")
    raise ConfigError(
        f"Azure OpenAI for {purpose} needs credentials: set CITEFLOW_AZURE_API_KEY, "
        "CITEFLOW_AZURE_AD_TOKEN or CITEFLOW_AZURE_USE_ENTRA_ID=true "
        "(behind API Management, the subscription key usually goes in CITEFLOW_AZURE_API_KEY)"
    )


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


# --- LLM classes ---------------------------------------------------------------------------------


def _compat_metadata(
    model: str,
    *,
    num_output: int,
    context_window: int | None,
    function_calling: bool | None,
) -> LLMMetadata:
    """LLM metadata that never raises for model names OpenAI's tables do not know."""
    known = model in ALL_AVAILABLE_MODELS
    window = context_window
    if window is None:
        try:
            window = openai_modelname_to_contextsize(model)
        except ValueError:  # unknown or discontinued name
            window = DEFAULT_COMPAT_CONTEXT_WINDOW
    if function_calling is None:
        function_calling = known and is_function_calling_model(model)
    return LLMMetadata(
        context_window=window,
        num_output=num_output,
        # Every server worth talking to has /chat/completions; the legacy endpoint is a trap.
        is_chat_model=is_chat_model(model) if known else True,
        is_function_calling_model=function_calling,
        model_name=model,
    )


def _base_model_name(model: str) -> str:
    """The OpenAI model a fine-tuned model is named after (``ft:gpt-4o-mini:org::id``), as
    llama-index reads it."""
    if model.startswith("ft:"):
        return model.split(":")[1]
    if "ft-" in model:  # legacy fine-tuning
        return model.split(":")[0]
    return model


class CompatOpenAI(LeanStreamingMixin, OpenAI):
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
        self,
        *,
        api_key: str | None = None,
        api_base: str | None = None,
        timeout: float = 60.0,
        default_headers: dict[str, str] | None = None,
        client_max_retries: int = DEFAULT_MAX_RETRIES,
        async_http_client: httpx.AsyncClient | None = None,
        **kwargs: Any,
    ) -> None:
        key, base, _ = resolve_openai_credentials(api_key=api_key, api_base=api_base)
        sdk: dict[str, Any] = {
            "api_key": key,
            "base_url": base,
            "timeout": timeout,
            "max_retries": client_max_retries,
            "default_headers": default_headers,
        }
        client = openai.AsyncOpenAI(**sdk, http_client=async_http_client)
        super().__init__(
            api_key=key,
            api_base=base,
            timeout=timeout,
            default_headers=default_headers,
            client_max_retries=client_max_retries,
            openai_client=openai.OpenAI(**sdk),
            async_openai_client=client,
            **kwargs,
        )
        self._sdk_client = client

    @classmethod
    def class_name(cls) -> str:
        """Name used when serialising the LLM."""
        return "citeflow_compat_openai_llm"

    @property
    def sdk_client(self) -> openai.AsyncOpenAI:
        """The async OpenAI SDK client (shared with llama-index)."""
        return self._sdk_client

    @property
    def metadata(self) -> LLMMetadata:
        """Metadata; never raises for unknown model names."""
        return _compat_metadata(
            _base_model_name(self.model),
            num_output=self.max_tokens or -1,
            context_window=self.context_window,
            function_calling=self.function_calling,
        )


class CompatAzureOpenAI(LeanStreamingMixin, AzureOpenAI):
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
        timeout: float = 60.0,
        default_headers: dict[str, str] | None = None,
        client_max_retries: int = DEFAULT_MAX_RETRIES,
        async_http_client: httpx.AsyncClient | None = None,
        **kwargs: Any,
    ) -> None:
        sdk: dict[str, Any] = {
            "azure_endpoint": azure_endpoint,
            "api_version": api_version,
            "api_key": None if use_azure_ad else api_key,
            "azure_ad_token_provider": azure_ad_token_provider,
            "timeout": timeout,
            "max_retries": client_max_retries,
            "default_headers": default_headers,
        }
        client = openai.AsyncAzureOpenAI(**sdk, http_client=async_http_client)
        super().__init__(
            azure_endpoint=azure_endpoint,
            api_version=api_version,
            api_key=api_key,
            use_azure_ad=use_azure_ad,
            azure_ad_token_provider=azure_ad_token_provider,
            timeout=timeout,
            default_headers=default_headers,
            client_max_retries=client_max_retries,
            openai_client=openai.AzureOpenAI(**sdk),
            async_openai_client=client,
            **kwargs,
        )
        self._sdk_client = client

    @classmethod
    def class_name(cls) -> str:
        """Name used when serialising the LLM."""
        return "citeflow_compat_azure_openai_llm"

    @property
    def sdk_client(self) -> openai.AsyncAzureOpenAI:
        """The async Azure OpenAI SDK client (shared with llama-index)."""
        return self._sdk_client

    @property
    def metadata(self) -> LLMMetadata:
        """Metadata; never raises for unknown deployment names."""
        return _compat_metadata(
            _base_model_name(self.model),
            num_output=self.max_tokens or -1,
            context_window=self.context_window,
            function_calling=self.function_calling,
        )


# --- builders ------------------------------------------------------------------------------------


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


def openai_connection(settings: Settings, provider_var: str) -> tuple[str, str]:
    """The base URL (empty: OpenAI's) and API key for OpenAI or an OpenAI-compatible server.

    A server given by URL may need no key; OpenAI itself does.
    """
    base_url = settings.openai.base_url.strip() if settings.openai.base_url else ""
    if base_url:
        base_url = require_http_url(base_url, "CITEFLOW_OPENAI_BASE_URL")
    key = secret_value(settings.openai.api_key)
    if not key:
        if not base_url:
            raise ConfigError(
                f"{provider_var}=openai needs CITEFLOW_OPENAI_API_KEY, or "
                "CITEFLOW_OPENAI_BASE_URL for an OpenAI-compatible server that needs no key"
            )
        key = NO_KEY_PLACEHOLDER
    return base_url, key


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


def require_azure_endpoint(settings: Settings, *, purpose: str) -> str:
    """``CITEFLOW_AZURE_ENDPOINT``, checked."""
    endpoint = (settings.azure.endpoint or "").strip()
    if not endpoint:
        raise ConfigError(
            f"Azure OpenAI for {purpose} needs CITEFLOW_AZURE_ENDPOINT "
            "(https://<resource>.openai.azure.com, or your API Management gateway URL)"
        )
    return require_http_url(endpoint, "CITEFLOW_AZURE_ENDPOINT").rstrip("/")


def require_azure_api_version(settings: Settings) -> str:
    """``CITEFLOW_AZURE_API_VERSION``, checked."""
    version = settings.azure.api_version.strip()
    if not version:
        raise ConfigError("CITEFLOW_AZURE_API_VERSION must not be empty (e.g. 2024-10-21)")
    return version


# --- descriptions --------------------------------------------------------------------------------


def describe_llm(settings: Settings) -> str:
    """Which LLM is in use, e.g. ``openai gpt-4o-mini at http://localhost:11434/v1``; no secrets."""
    provider = settings.llm.provider
    if provider == "local":
        return f"local llama.cpp {settings.local.gguf_path.name}"
    if provider == "openai":
        model = settings.llm.model.strip() or DEFAULT_OPENAI_MODEL
        if settings.openai.base_url and settings.openai.base_url.strip():
            return f"openai-compatible {model} at {safe_url(settings.openai.base_url.strip())}"
        return f"openai {model}"
    deployment = settings.llm.model.strip() or "<no deployment>"
    return f"azure deployment {deployment}{_describe_azure_endpoint(settings)}"


def _describe_azure_endpoint(settings: Settings) -> str:
    endpoint = (settings.azure.endpoint or "").strip()
    where = f" at {safe_url(endpoint)}" if endpoint else ""
    return f"{where} (api-version {settings.azure.api_version})"
