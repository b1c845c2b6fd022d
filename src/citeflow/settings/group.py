"""What every settings group shares: read from ``CITEFLOW_*`` variables and ``.env``, each field
under one variable name, and old names still accepted with a one-line warning.

A group's variable names are its ``env_prefix`` followed by the field's name
(``CITEFLOW_LLM_`` + ``provider``), or the field's alias where the group's prefix does not fit a
name users already set (``CITEFLOW_RETRIEVAL`` for `RetrievalSettings.mode`).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated, Any, ClassVar, Self, cast

from pydantic import AfterValidator
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

logger = logging.getLogger("citeflow.settings")

#: a path setting: ``~`` is the user's home
UserPath = Annotated[Path, AfterValidator(Path.expanduser)]


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

    #: variable names that were renamed, each with the field it now sets: still read (after the
    #: new name), with one warning line each
    renamed: ClassVar[dict[str, str]] = {}

    @classmethod
    def env_name(cls, field: str) -> str:
        """The variable that sets ``field``, e.g. ``CITEFLOW_LLM_PROVIDER``."""
        alias = cls.model_fields[field].validation_alias
        if isinstance(alias, str):
            return alias.upper()
        return f"{cls.model_config.get('env_prefix', '')}{field}".upper()

    @classmethod
    def defaults(cls, **values: Any) -> Self:
        """The group's defaults with ``values`` changed, without reading the environment (for
        components built without settings, and tests)."""
        return cls.model_validate(values)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        renamed = RenamedVariables(
            settings_cls,
            [s for s in (env_settings, dotenv_settings) if isinstance(s, EnvSettingsSource)],
        )
        return init_settings, env_settings, dotenv_settings, renamed, file_secret_settings


class RenamedVariables(PydanticBaseSettingsSource):
    """The values of a group's renamed variables (`SettingsGroup.renamed`), from the environment
    or ``.env``, each logged once: ``CITEFLOW_OLD is deprecated; use CITEFLOW_NEW``."""

    def __init__(self, settings_cls: type[BaseSettings], sources: list[EnvSettingsSource]) -> None:
        super().__init__(settings_cls)
        self.sources = sources

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        """Unused: `__call__` reads the renamed variables by their old names."""
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        group = cast(type[SettingsGroup], self.settings_cls)
        values: dict[str, Any] = {}
        for old, field in group.renamed.items():
            for source in self.sources:
                raw = source.env_vars.get(old if source.case_sensitive else old.lower())
                if raw is None:
                    continue
                logger.warning("%s is deprecated; use %s", old, group.env_name(field))
                info = group.model_fields[field]
                values[field] = source.prepare_field_value(field, info, raw, False)
                break
        return values
