"""Configuration: one `Settings` object in groups, built once by the entry point and passed in;
each component takes its group (`Retriever` the `RetrievalSettings`, the server its
`ServerSettings`, ...).

Every field can be set from the environment or a ``.env`` file under its ``CITEFLOW_*`` name
(`SettingsGroup.env_name`); ``.env.example`` documents each one. Nothing in citeflow builds a
`Settings` at import time.

    Settings(llm={"provider": "openai"}, retrieval=RetrievalSettings(top_k=3))
"""

from __future__ import annotations

import difflib
import json
import logging
import os
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any, cast

from dotenv import dotenv_values
from pydantic import BaseModel, SecretStr, ValidationError
from pydantic_settings import SettingsError

from citeflow.settings.group import SettingsGroup
from citeflow.settings.providers import (
    DEFAULT_LOCAL_MODEL_FILE,
    AzureSettings,
    EmbeddingSettings,
    LLMSettings,
    LocalModelSettings,
    OpenAISettings,
    Provider,
)
from citeflow.settings.query import (
    ChunkingSettings,
    CitationModeKind,
    CitationSettings,
    FusionKind,
    GraderKind,
    JudgeKind,
    RetrievalMode,
    RetrievalSettings,
    StoreSettings,
    TracingSettings,
)
from citeflow.settings.server import DocsKind, ServerSettings, parse_api_keys, read_api_keys_file

__all__ = [
    "DEFAULT_LOCAL_MODEL_FILE",
    "AzureSettings",
    "ChunkingSettings",
    "CitationModeKind",
    "CitationSettings",
    "DocsKind",
    "EmbeddingSettings",
    "FusionKind",
    "GraderKind",
    "JudgeKind",
    "LLMSettings",
    "LocalModelSettings",
    "OpenAISettings",
    "Provider",
    "RetrievalMode",
    "RetrievalSettings",
    "ServerSettings",
    "Settings",
    "SettingsGroup",
    "StoreSettings",
    "TracingSettings",
    "env_example",
    "known_variables",
    "load_settings",
    "parse_api_keys",
    "read_api_keys_file",
    "retired_settings",
    "unknown_settings",
    "values_by_variable",
    "variables_set",
]

ENV_FILE = ".env"


class Settings(BaseModel):
    """All of citeflow's settings, one group each. See ``.env.example`` for a commented list.

    A group not given is read from the environment and ``.env`` (``_env_file``: another file,
    or None for none); a group given as a dict is read the same way with the dict's values on
    top; a group given as an instance is taken as it is.
    """

    store: StoreSettings
    chunking: ChunkingSettings
    llm: LLMSettings
    local: LocalModelSettings
    embeddings: EmbeddingSettings
    openai: OpenAISettings
    azure: AzureSettings
    retrieval: RetrievalSettings
    citations: CitationSettings
    tracing: TracingSettings
    server: ServerSettings

    def __init__(
        self, _env_file: str | Path | None = ENV_FILE, **groups: SettingsGroup | Mapping[str, Any]
    ) -> None:
        unknown = set(groups) - set(type(self).model_fields)
        if unknown:
            raise TypeError(f"no settings group named {', '.join(sorted(unknown))}")
        built: dict[str, SettingsGroup] = {}
        for name, group in settings_groups().items():
            given = groups.get(name, {})
            built[name] = (
                given if isinstance(given, SettingsGroup) else read(group, _env_file, given)
            )
        super().__init__(**built)

    def updated(self, **changes: Mapping[str, Any]) -> Settings:
        """A copy with some fields of some groups changed, not validated (like `model_copy`):
        ``settings.updated(llm={"provider": "openai"}, server={"port": 9000})``."""
        update = {
            name: getattr(self, name).model_copy(update=values) for name, values in changes.items()
        }
        return self.model_copy(update=update)


def values_by_variable(settings: Settings) -> dict[str, Any]:
    """Every setting's JSON value by its variable name (``CITEFLOW_TOP_K``: 6)."""
    return {
        group.env_name(field): value
        for name, group in settings_groups().items()
        for field, value in getattr(settings, name).model_dump(mode="json").items()
    }


def settings_groups() -> dict[str, type[SettingsGroup]]:
    """Each group's name in `Settings` and its class, in the order of ``.env.example``."""
    return {
        name: cast(type[SettingsGroup], field.annotation)
        for name, field in Settings.model_fields.items()
    }


def read(
    group: type[SettingsGroup], env_file: str | Path | None, values: Mapping[str, Any]
) -> SettingsGroup:
    """``group`` from the environment and ``env_file``, with ``values`` on top.

    Raises:
        ValidationError: a value is invalid.
        SettingsError: a list or dict value is not JSON; the message names its variable.
    """
    try:
        return group(_env_file=env_file, **values)  # type: ignore[call-arg]
    except SettingsError as exc:
        field = str(exc).split('field "', 1)[-1].split('"', 1)[0]
        name = group.env_name(field) if field in group.model_fields else "a setting"
        raise SettingsError(f"{name}: not valid JSON (lists and dicts are JSON values)") from exc


#: settings that no longer exist, and what to do instead (said once, at load, in one line each)
RETIRED = {
    "CITEFLOW_CITATION_RELEVANCE": "citations are checked for support of their sentence, not "
    "for the question's words; remove it",
    "CITEFLOW_CITATION_SCORE_GAP": "a marker moves to the source that supports its sentence; "
    "remove it",
}


def variables_set(env_file: str | Path | None = None) -> set[str]:
    """The names of the variables set in the environment or in ``env_file``, upper case (as
    the settings read them: case-insensitively)."""
    names = {name.upper() for name in os.environ}
    if env_file is not None and Path(env_file).is_file():
        names |= {name.upper() for name in dotenv_values(env_file)}
    return names


def retired_settings(names: Collection[str] | None = None) -> list[str]:
    """One line per retired ``CITEFLOW_*`` variable that is still set (among ``names``, by
    default the environment's)."""
    names = variables_set() if names is None else names
    return [f"{name} is no longer used: {why}" for name, why in RETIRED.items() if name in names]


PREFIX = "CITEFLOW_"
#: ``CITEFLOW_*`` variables read outside the settings groups (the CLI's log level, the tests')
OTHER_VARIABLES = frozenset({"CITEFLOW_LOG_LEVEL", "CITEFLOW_E2E_REQUIRED"})


def known_variables() -> set[str]:
    """Every ``CITEFLOW_*`` name citeflow reads: each field's, its old names, the retired ones."""
    names = set(RETIRED) | OTHER_VARIABLES
    for group in settings_groups().values():
        for field in group.model_fields:
            names.update((group.env_name(field), *group.old_env_names(field)))
    return names


def unknown_settings(names: Collection[str] | None = None) -> list[str]:
    """One line per ``CITEFLOW_*`` variable set (among ``names``, by default the environment's)
    that citeflow does not read (a typo is otherwise silently ignored), with the closest name it
    does read."""
    names = variables_set() if names is None else names
    known = known_variables()
    lines = []
    suffixes = [k.removeprefix(PREFIX) for k in known]
    for name in sorted(n for n in names if n.startswith(PREFIX) and n not in known):
        # compared without the shared prefix, which would make every name look alike
        close = difflib.get_close_matches(name.removeprefix(PREFIX), suffixes, n=1, cutoff=0.75)
        hint = f"did you mean {PREFIX}{close[0]}?" if close else "see .env.example for them"
        lines.append(f"{name} is not a citeflow setting and is ignored; {hint}")
    return lines


def load_settings(_env_file: str | Path | None = ENV_FILE, **groups: Any) -> Settings:
    """Build the settings from the environment and ``.env`` (``groups`` as for `Settings`); a
    bad value is one clear error; a retired variable still set is logged as a warning, and so
    are a renamed one and one citeflow does not read (one line each).

    Raises:
        ConfigError: a value is invalid, naming its variable.
    """
    from citeflow.errors import ConfigError

    names = variables_set(_env_file)
    for line in retired_settings(names) + unknown_settings(names):
        logging.getLogger(__name__).warning(line)
    try:
        return Settings(_env_file, **groups)
    except ValidationError as exc:
        first = exc.errors()[0]
        what = str(first.get("msg", "invalid value")).removeprefix("Value error, ")
        group = {cls.__name__: cls for cls in settings_groups().values()}.get(exc.title)
        field = next((str(p) for p in first.get("loc", ()) if isinstance(p, str)), "")
        if group is not None and field in group.model_fields:
            field = group.env_name(field)
        # a model-wide check names its settings in its message
        raise ConfigError(f"{field.upper()}: {what}" if field else what) from None
    except SettingsError as exc:
        raise ConfigError(str(exc)) from None


#: defaults that depend on the machine, shown as their usual value
SHOWN_DEFAULTS = {
    "CITEFLOW_DATA_DIR": "~/.local/share/citeflow",
    "CITEFLOW_LOCAL_MODEL_DIR": "~/.cache/citeflow/models",
}


def env_example() -> str:
    """The text of ``.env.example``: every setting by group, its meaning and its default."""
    lines = [
        "# citeflow settings. Every variable is optional: the defaults run fully offline",
        "# (local llama.cpp LLM, local all-MiniLM-L6-v2 embeddings, embedded Qdrant).",
        "# Copy to .env and uncomment what you change. Lists and dicts are JSON.",
        "# Generated by `make env-example` from citeflow.settings.Settings.",
    ]
    for group in settings_groups().values():
        title = (group.__doc__ or group.__name__).splitlines()[0].replace("``", "")
        lines += ["", f"# --- {title}"]
        for name, field in group.model_fields.items():
            env = group.env_name(name)
            default = field.get_default(call_default_factory=True)
            if env in SHOWN_DEFAULTS:
                value = SHOWN_DEFAULTS[env]
            elif default is None or isinstance(default, SecretStr):
                value = ""
            elif isinstance(default, dict | list):
                value = json.dumps(default)
            else:
                value = str(default)
            lines += [f"# {field.description or name}", f"# {env}={value}"]
    return "\n".join(lines) + "\n"
