"""Settings for tests, given by their variables' names: ``settings_of(llm_provider="openai")``
sets ``CITEFLOW_LLM_PROVIDER``, i.e. ``settings.llm.provider``."""

from __future__ import annotations

from typing import Any

from citeflow.settings import Settings, settings_groups
from citeflow.testing.openai_server import FakeOpenAIServer


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
