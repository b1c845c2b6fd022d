"""Settings for tests, given by their variables' names: ``settings_of(llm_provider="openai")``
sets ``CITEFLOW_LLM_PROVIDER``, i.e. ``settings.llm.provider``."""

from __future__ import annotations

from typing import Any

from citeflow.settings import Settings, settings_groups
from citeflow.testing.openai_server import FakeOpenAIServer, RecordedRequest

#: the key, API Management key and API version of `azure_settings`
AZURE_KEY = "azure-key-abcdef"
APIM_KEY = "apim-subscription-key-42"
API_VERSION = "2024-06-01"


def settings_of(**variables: Any) -> Settings:
    """Settings from ``variables`` only, named as their variables without ``CITEFLOW_``
    (``top_k``): no .env, no CITEFLOW_* variables (conftest clears those)."""
    where = {
        group.env_name(field).removeprefix("CITEFLOW_").lower(): (name, field)
        for name, group in settings_groups().items()
        for field in group.model_fields
    }
    groups: dict[str, dict[str, Any]] = {}
    for variable, value in variables.items():
        name, field = where[variable]
        groups.setdefault(name, {})[field] = value
    return Settings(_env_file=None, **groups)


def llm_settings(server: FakeOpenAIServer, provider: str = "openai", **variables: Any) -> Settings:
    """`settings_of` ``variables``, the LLM being model ``chat-model`` of ``provider`` (openai,
    or azure at API version 2024-10-21 unless ``azure_api_version`` says another) on the fake
    OpenAI server ``server``, with key ``k``."""
    if provider == "openai":
        variables.update(openai_base_url=server.openai_base_url, openai_api_key="k")
    else:
        variables.update(azure_endpoint=server.azure_endpoint, azure_api_key="k")
        variables.setdefault("azure_api_version", "2024-10-21")
    return settings_of(llm_provider=provider, llm_model="chat-model", **variables)


def azure_settings(server: FakeOpenAIServer, **variables: Any) -> Settings:
    """`settings_of` ``variables``, the LLM (deployment ``chat-deployment``) and the embedder
    (``embed-deployment``) being Azure OpenAI's on the fake OpenAI server ``server`` behind API
    Management, with `AZURE_KEY`, `APIM_KEY` and `API_VERSION`."""
    base: dict[str, Any] = {
        "llm_provider": "azure",
        "embed_provider": "azure",
        "llm_model": "chat-deployment",
        "azure_embed_deployment": "embed-deployment",
        "azure_endpoint": server.azure_endpoint,
        "azure_api_key": AZURE_KEY,
        "azure_api_version": API_VERSION,
        "azure_headers": {"Ocp-Apim-Subscription-Key": APIM_KEY},
    }
    return settings_of(**{**base, **variables})


def assert_azure_request(request: RecordedRequest, path: str) -> None:
    """``request`` went to Azure's ``path`` with the API version, key and API Management key of
    `azure_settings`."""
    assert request.path == path
    assert request.query["api-version"] == API_VERSION
    assert request.headers["api-key"] == AZURE_KEY
    assert request.headers["ocp-apim-subscription-key"] == APIM_KEY
