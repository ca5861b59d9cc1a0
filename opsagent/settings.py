"""Configuration: one YAML file plus ``OPSAGENT_*`` environment variables (pydantic-settings).

The file is ``$OPSAGENT_CONFIG`` or ``./opsagent.yaml`` when present; environment variables win over
it. Secrets never live in the file: they come from the environment only.
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import Field, ValidationError
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from opsagent.errors import ConfigError


def _default_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "opsagent"


def config_file() -> Path | None:
    explicit = os.environ.get("OPSAGENT_CONFIG")
    if explicit:
        return Path(explicit)
    local = Path("opsagent.yaml")
    return local if local.exists() else None


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="OPSAGENT_", extra="forbid")

    data_dir: Path = Field(default_factory=_default_data_dir, description="where the SQLite store lives")
    lessons_top_k: int = Field(default=3, ge=0, description="most relevant lessons retrieved per investigation")
    lessons_recent: int = Field(default=5, ge=0, description="cap on lessons retrieved, most recent included")

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        path = config_file()
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        if path is not None:
            sources.append(YamlConfigSettingsSource(settings_cls, yaml_file=path))
        return tuple(sources)

    @property
    def database(self) -> Path:
        return self.data_dir / "opsagent.db"


def load_settings() -> Settings:
    path = config_file()
    if path is not None and not path.exists():
        raise ConfigError(f"config file {path} (from OPSAGENT_CONFIG) does not exist")
    try:
        return Settings()
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise ConfigError(f"invalid configuration ({path or 'environment'}): {problems}") from exc
