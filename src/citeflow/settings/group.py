"""What every settings group shares: read from ``CITEFLOW_*`` variables and ``.env``, each field
under one variable name, and old names still accepted with a one-line warning.

A group's variable names are its ``env_prefix`` followed by the field's name
(``CITEFLOW_LLM_`` + ``provider``), or the field's alias where the group's prefix does not fit a
name users already set (``CITEFLOW_RETRIEVAL`` for `RetrievalSettings.mode`). A renamed
variable's old name is the later choice of its field's `AliasChoices`: still read (the
environment before ``.env``, as for every variable; in either, the new name before the old),
with one warning line.
"""

from __future__ import annotations

import logging
from contextvars import ContextVar
from pathlib import Path
from typing import Annotated, Any, Self

from pydantic import AfterValidator, AliasChoices
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

logger = logging.getLogger("citeflow.settings")

#: a path setting: ``~`` is the user's home
UserPath = Annotated[Path, AfterValidator(Path.expanduser)]

#: set while `SettingsGroup.defaults` builds a group: only the values given are read
_DEFAULTS_ONLY: ContextVar[bool] = ContextVar("citeflow_settings_defaults_only", default=False)


class SettingsGroup(BaseSettings):
    """One group of settings (`citeflow.settings.Settings` holds one of each)."""

    model_config = SettingsConfigDict(
        env_prefix="CITEFLOW_",
        env_file=".env",
        env_file_encoding="utf-8",
        extra="ignore",
        validate_default=True,
        validate_by_name=True,
        validate_by_alias=True,
    )

    @classmethod
    def env_name(cls, field: str) -> str:
        """The variable that sets ``field``, e.g. ``CITEFLOW_LLM_PROVIDER``."""
        alias = cls.model_fields[field].validation_alias
        if isinstance(alias, AliasChoices):
            alias = alias.choices[0]
        if isinstance(alias, str):
            return alias.upper()
        return f"{cls.model_config.get('env_prefix', '')}{field}".upper()

    @classmethod
    def old_env_names(cls, field: str) -> tuple[str, ...]:
        """The variables that set ``field`` before it was renamed: still read, with a warning."""
        alias = cls.model_fields[field].validation_alias
        if not isinstance(alias, AliasChoices):
            return ()
        return tuple(str(choice).upper() for choice in alias.choices[1:])

    @classmethod
    def defaults(cls, **values: Any) -> Self:
        """The group's defaults with ``values`` changed, without reading the environment (for
        components built without settings, and tests)."""
        token = _DEFAULTS_ONLY.set(True)
        try:
            return cls(**values)
        finally:
            _DEFAULTS_ONLY.reset(token)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """The usual sources; first, one warning line for each old variable name set in the
        environment or ``.env``: ``CITEFLOW_OLD is deprecated; use CITEFLOW_NEW``. Only the
        values given when `defaults` builds the group."""
        if _DEFAULTS_ONLY.get():
            return (init_settings,)
        found = [
            s.env_vars for s in (env_settings, dotenv_settings) if isinstance(s, EnvSettingsSource)
        ]
        for field in cls.model_fields:
            for old in cls.old_env_names(field):
                if any(old.lower() in env_vars for env_vars in found):
                    logger.warning("%s is deprecated; use %s", old, cls.env_name(field))
        return init_settings, env_settings, dotenv_settings, file_secret_settings
