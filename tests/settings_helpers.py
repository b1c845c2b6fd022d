"""Settings for tests, given by their variables' names: ``settings_of(llm_provider="openai")``
sets ``CITEFLOW_LLM_PROVIDER``, i.e. ``settings.llm.provider``."""

from __future__ import annotations

from typing import Any

from citeflow.settings import Settings, settings_groups


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
