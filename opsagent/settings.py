"""Configuration: one YAML file plus ``OPSAGENT_*`` environment variables (pydantic-settings).

The file is ``$OPSAGENT_CONFIG`` or ``./opsagent.yaml`` when present; environment variables win over
it. Secrets never live in the file: they come from the environment only.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from adapters.alertmanager.config import AlertmanagerConfig
from adapters.baseconfig import credentials_in_url
from adapters.sourceconfig import SourcesConfig
from opsagent.correlation import CorrelationSettings
from opsagent.errors import ConfigError
from opsagent.fixtures import SignalDef, not_utf8
from opsagent.links import LinkSettings
from opsagent.store.location import STORE_PASSWORD_ENV, StoreLocation, url_problem


def _default_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "opsagent"


def config_file() -> Path | None:
    explicit = os.environ.get("OPSAGENT_CONFIG")
    if explicit:
        return Path(explicit)
    local = Path("opsagent.yaml")
    return local if local.exists() else None


#: The only place the model's API key is read from. Never the config file, never logged.
LLM_API_KEY_ENV = "OPSAGENT_LLM_API_KEY"

_SECRET_KEYS = frozenset({"api_key", "apikey", "key", "token", "api_token", "secret", "password", "authorization"})


class ModelPrice(BaseModel):
    """What a model costs, in US dollars per million tokens."""

    model_config = ConfigDict(extra="forbid")

    input_per_mtok: float = Field(ge=0)
    output_per_mtok: float = Field(ge=0)


class LLMSettings(BaseModel):
    """The LLM reasoner: any OpenAI-compatible chat-completions endpoint. The key: ``OPSAGENT_LLM_API_KEY``."""

    model_config = ConfigDict(extra="forbid")

    base_url: str = Field(default="http://localhost:11434/v1", description="ends before /chat/completions")
    model: str | None = Field(default=None, description="the model name the server knows")
    mode: Literal["auto", "tools", "text"] = Field(
        default="auto", description="tools: native tool calling; text: Thought/Action/Final; auto: tools, else text"
    )
    temperature: float = Field(default=0.0, ge=0, le=2)
    max_tokens: int = Field(default=1024, ge=16, description="completion tokens per call")
    timeout_s: float = Field(default=60.0, gt=0, description="per request")
    retries: int = Field(default=3, ge=0, description="retries on 429, 5xx, timeouts and connection errors")
    backoff_s: float = Field(default=1.0, ge=0, description="first retry delay, doubled each time")
    max_backoff_s: float = Field(default=30.0, ge=0, description="longest wait, Retry-After included")
    context_window: int = Field(default=32_768, ge=1024, description="the model's context, in tokens")
    observation_token_cap: int = Field(default=800, ge=50, description="tokens of one observation in a prompt")
    json_mode: bool = Field(default=False, description="ask for response_format json_object where JSON is wanted")
    prices: dict[str, ModelPrice] = Field(default_factory=dict, description="model name -> price")
    redact_emails: bool = False
    redact_ips: bool = False

    @model_validator(mode="before")
    @classmethod
    def _no_secrets_here(cls, data: Any) -> Any:
        if isinstance(data, dict) and any(str(k).lower() in _SECRET_KEYS for k in data):
            raise ValueError(f"the API key is read only from the environment ({LLM_API_KEY_ENV}), never from here")
        return data

    @field_validator("base_url")
    @classmethod
    def _no_key_in_url(cls, url: str) -> str:
        problem = credentials_in_url(url)
        if problem is not None:
            raise ValueError(f"{problem}: the API key is read only from the environment ({LLM_API_KEY_ENV})")
        return url


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="OPSAGENT_", extra="forbid", env_nested_delimiter="__")

    data_dir: Path = Field(default_factory=_default_data_dir, description="where the SQLite store lives")
    store_url: str | None = Field(
        default=None,
        description="the store: sqlite:///path/opsagent.db, or postgresql://user@host:5432/db shared by several "
        "replicas (default: the SQLite file under data_dir); never a password in it",
    )
    store_password: SecretStr | None = Field(
        default=None, description=f"the PostgreSQL store's password ({STORE_PASSWORD_ENV}, env only)"
    )
    store_pool_size: int = Field(default=10, ge=1, le=200, description="PostgreSQL connections a service process holds")
    playbooks_dir: Path | None = Field(
        default=None, description="playbooks to use instead of the ones opsagent ships (a directory of *.yaml)"
    )
    lessons_top_k: int = Field(default=3, ge=0, description="most relevant lessons retrieved per investigation")
    lessons_recent: int = Field(default=5, ge=0, description="cap on lessons retrieved, most recent included")
    llm: LLMSettings = Field(default_factory=LLMSettings, description="the LLM reasoner (environment: OPSAGENT_LLM__*)")
    llm_api_key: SecretStr | None = Field(
        default=None, description=f"the model's API key ({LLM_API_KEY_ENV}, env only)"
    )

    # The webhook service (`opsagent serve`). Secrets (SecretStr) come from the environment only.
    host: str = Field(default="127.0.0.1", description="address the service listens on")
    port: int = Field(default=8080, ge=0, le=65535, description="port the service listens on")
    workers: int = Field(default=2, ge=1, le=64, description="investigations run at once (worker processes)")
    max_body_bytes: int = Field(default=1_048_576, ge=1024, description="largest webhook body accepted (413 above)")
    body_timeout_s: float = Field(
        default=30.0, gt=0, allow_inf_nan=False, description="a webhook body must arrive within this (408 after)"
    )
    fixtures_dir: Path | None = Field(
        default=None, description="recorded incidents the service investigates alerts against (replay sources)"
    )
    correlation: CorrelationSettings = Field(
        default_factory=CorrelationSettings,
        description="alert storms: connected alerts of several groups as one incident (docs/integrations.md)",
    )
    public_url: str | None = Field(default=None, description="base URL of the service, for links in notifications")
    job_timeout_s: float = Field(default=300.0, gt=0, description="an investigation still running then has failed")
    job_attempts: int = Field(default=3, ge=1, description="tries of one job before it is marked failed")
    job_lease_s: float = Field(default=30.0, gt=0, description="a running job whose owner stops renewing is retaken")
    retention_days: float = Field(
        default=90.0,
        ge=0,
        description="incidents untouched this long are deleted with their notifications, job and report "
        "(0 keeps everything; lessons always stay)",
    )
    webhook_token: SecretStr | None = Field(default=None, description="bearer token Alertmanager sends (env only)")
    webhook_username: str | None = Field(default=None, description="basic-auth user Alertmanager sends")
    webhook_password: SecretStr | None = Field(default=None, description="basic-auth password (env only)")
    allow_unauthenticated: bool = Field(default=False, description="serve the webhook without credentials (tests)")
    read_token: SecretStr | None = Field(
        default=None, description="bearer token for the incidents API, report pages and /metrics (env only)"
    )
    read_username: str | None = Field(default=None, description="basic-auth user for people reading reports")
    read_password: SecretStr | None = Field(default=None, description="basic-auth password for readers (env only)")
    public_reads: bool = Field(
        default=False, description="serve incidents, pages and /metrics without credentials (behind an auth proxy)"
    )
    notify_url: SecretStr | None = Field(
        default=None, description="Slack incoming webhook for investigation summaries (env only: it holds a token)"
    )
    notify_webhook_url: SecretStr | None = Field(
        default=None,
        description="generic JSON webhook (PagerDuty/Opsgenie-style routers) for summaries (env only: holds a token)",
    )
    slack_token: SecretStr | None = Field(
        default=None,
        description="Slack bot token for chat.postMessage (env only): with slack_channel, an incident's messages"
        " share one thread; used instead of notify_url",
    )
    slack_channel: str | None = Field(default=None, description="the Slack channel the bot posts to (with slack_token)")
    notify_attempts: int = Field(
        default=12, ge=1, le=100, description="tries of one notification before it is marked failed"
    )
    notify_backoff_s: float = Field(
        default=2.0, gt=0, allow_inf_nan=False, description="wait after a notification's first failed try, doubled each"
    )
    notify_max_backoff_s: float = Field(
        default=300.0, gt=0, allow_inf_nan=False, description="longest wait between two tries of a notification"
    )

    # Live data sources (`sources:`, see adapters/sourceconfig.py) and the signal catalog overrides
    # they are read with. Their secrets come from OPSAGENT_<KIND>_<NAME>_<SECRET> variables only.
    sources: SourcesConfig = Field(default_factory=SourcesConfig, description="live data sources, by kind")
    signals: dict[str, SignalDef] = Field(
        default_factory=dict, description="signal catalog overrides for this environment (PromQL, $service)"
    )
    alertmanager: AlertmanagerConfig | None = Field(
        default=None, description="where `opsagent alerts` and `investigate --alert` read what is firing"
    )
    links: LinkSettings = Field(
        default_factory=LinkSettings, description="where a report's links out point (Prometheus, Grafana, Alertmanager)"
    )

    @field_validator("store_url")
    @classmethod
    def _store_url(cls, url: str | None) -> str | None:
        problem = url_problem(url) if url else None
        if problem is not None:
            raise ValueError(problem)
        return url

    @model_validator(mode="after")
    def _slack_channel_with_token(self) -> Settings:
        if self.slack_token is not None and not self.slack_channel:
            raise ValueError("slack_token is set without slack_channel: name the channel the bot posts to")
        return self

    @field_validator("public_url")
    @classmethod
    def _no_credentials_in_public_url(cls, url: str | None) -> str | None:
        problem = credentials_in_url(url) if url else None
        if problem is not None:
            raise ValueError(f"{problem}: it is shown in notifications; link to the service without them")
        return url

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
            from_file = YamlConfigSettingsSource(settings_cls, yaml_file=path)
            secrets = sorted(set(from_file.yaml_data) & secret_fields(settings_cls))
            if secrets:
                names = ", ".join(f"OPSAGENT_{name.upper()}" for name in secrets)
                raise ConfigError(f"{path}: secrets are read from the environment only; remove them and set {names}")
            sources.append(from_file)
        return tuple(sources)

    @property
    def database(self) -> Path:
        """The embedded store's file (used when ``store_url`` is not set)."""
        return self.data_dir / "opsagent.db"

    def link_settings(self) -> LinkSettings:
        """``links:``, with the configured Prometheus and Alertmanager where it names none."""
        prometheus = self.sources.prometheus[0].url if self.sources.prometheus else None
        alertmanager = self.alertmanager.url if self.alertmanager is not None else None
        return self.links.model_copy(
            update={
                "prometheus_url": self.links.prometheus_url or prometheus,
                "alertmanager_url": self.links.alertmanager_url or alertmanager,
            }
        )

    @property
    def store(self) -> StoreLocation:
        """Where the store is, with its password (from the environment)."""
        if self.store_url is None:
            return StoreLocation.sqlite(self.database)
        return StoreLocation(url=self.store_url, password=self.store_password, pool_size=self.store_pool_size)


def secret_fields(settings_cls: type[BaseSettings]) -> set[str]:
    """Fields holding secrets: never read from the file, never printed."""
    return {
        name
        for name, info in settings_cls.model_fields.items()
        if info.annotation is not None and SecretStr in getattr(info.annotation, "__args__", (info.annotation,))
    }


def load_settings() -> Settings:
    path = config_file()
    if path is not None and not path.exists():
        raise ConfigError(f"config file {path} (from OPSAGENT_CONFIG) does not exist")
    try:
        return Settings()
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config file {path}: {not_utf8(exc)}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path}: not valid YAML: {exc}") from exc
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise ConfigError(f"invalid configuration ({path or 'environment'}): {problems}") from exc
    except (TypeError, ValueError, AttributeError) as exc:  # YAML, but not a mapping of settings
        raise ConfigError(
            f"config file {path}: expected a mapping of settings, as in docs/configuration.md ({exc})"
        ) from exc
