"""Where and how to reach OpenAI, an OpenAI-compatible server or Azure OpenAI: the checked URLs,
keys and Azure credentials the LLM and embedding builders share, and their secret-free
descriptions."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from openai.lib.azure import API_KEY_SENTINEL

from citeflow.errors import ConfigError
from citeflow.settings import Settings

__all__ = [
    "DEFAULT_MAX_RETRIES",
    "NO_KEY_PLACEHOLDER",
    "AzureAuth",
    "azure_auth",
    "azure_location",
    "describe_openai_model",
    "openai_connection",
    "require_azure_api_version",
    "require_azure_endpoint",
    "safe_url",
]

#: Retries of one request by the OpenAI SDK (so at most three requests per call).
DEFAULT_MAX_RETRIES = 2
#: API key sent to an OpenAI-compatible server when none is configured (most ignore it).
NO_KEY_PLACEHOLDER = "sk-no-key-required"
#: OAuth scope of Azure OpenAI for Entra ID tokens.
_AZURE_AD_SCOPE = "https://cognitiveservices.azure.com/.default"


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


def _require_http_url(value: str, env_var: str) -> str:
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


def _secret_value(secret: Any) -> str:
    """The stripped value of an optional `SecretStr` ('' when unset)."""
    if secret is None:
        return ""
    return str(secret.get_secret_value()).strip()


def openai_connection(settings: Settings, provider_var: str) -> tuple[str, str]:
    """The base URL (empty: OpenAI's) and API key for OpenAI or an OpenAI-compatible server.

    A server given by URL may need no key; OpenAI itself does.
    """
    base_url = settings.openai.base_url.strip() if settings.openai.base_url else ""
    if base_url:
        base_url = _require_http_url(base_url, "CITEFLOW_OPENAI_BASE_URL")
    key = _secret_value(settings.openai.api_key)
    if not key:
        if not base_url:
            raise ConfigError(
                f"{provider_var}=openai needs CITEFLOW_OPENAI_API_KEY, or "
                "CITEFLOW_OPENAI_BASE_URL for an OpenAI-compatible server that needs no key"
            )
        key = NO_KEY_PLACEHOLDER
    return base_url, key


@dataclass(frozen=True)
class AzureAuth:
    """How to authenticate to Azure OpenAI: exactly one of `api_key` or `token_provider` is set."""

    api_key: str | None
    token_provider: Callable[[], str] | None

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
        provider = get_bearer_token_provider(DefaultAzureCredential(), _AZURE_AD_SCOPE)
        return AzureAuth(None, provider)
    token = _secret_value(settings.azure.ad_token)
    if token:
        return AzureAuth(None, lambda: token)
    key = _secret_value(settings.azure.api_key)
    if key:
        return AzureAuth(key, None)
    header_names = {name.lower() for name in settings.azure.headers}
    if header_names & {"api-key", "authorization"}:
        # The SDK sends no auth header of its own for this sentinel; the configured one is used.
        return AzureAuth(API_KEY_SENTINEL, None)
    raise ConfigError(
        f"Azure OpenAI for {purpose} needs credentials: set CITEFLOW_AZURE_API_KEY, "
        "CITEFLOW_AZURE_AD_TOKEN or CITEFLOW_AZURE_USE_ENTRA_ID=true "
        "(behind API Management, the subscription key usually goes in CITEFLOW_AZURE_API_KEY)"
    )


def require_azure_endpoint(settings: Settings, *, purpose: str) -> str:
    """``CITEFLOW_AZURE_ENDPOINT``, checked."""
    endpoint = (settings.azure.endpoint or "").strip()
    if not endpoint:
        raise ConfigError(
            f"Azure OpenAI for {purpose} needs CITEFLOW_AZURE_ENDPOINT "
            "(https://<resource>.openai.azure.com, or your API Management gateway URL)"
        )
    return _require_http_url(endpoint, "CITEFLOW_AZURE_ENDPOINT").rstrip("/")


def require_azure_api_version(settings: Settings) -> str:
    """``CITEFLOW_AZURE_API_VERSION``, checked."""
    version = settings.azure.api_version.strip()
    if not version:
        raise ConfigError("CITEFLOW_AZURE_API_VERSION must not be empty (e.g. 2024-10-21)")
    return version


def describe_openai_model(settings: Settings, model: str) -> str:
    """``openai <model>``, or ``openai-compatible <model> at <server>``; no secrets."""
    if settings.openai.base_url and settings.openai.base_url.strip():
        return f"openai-compatible {model} at {safe_url(settings.openai.base_url.strip())}"
    return f"openai {model}"


def azure_location(settings: Settings) -> str:
    """`` at <endpoint>`` when an Azure endpoint is set, else ''; no secrets."""
    endpoint = (settings.azure.endpoint or "").strip()
    return f" at {safe_url(endpoint)}" if endpoint else ""
