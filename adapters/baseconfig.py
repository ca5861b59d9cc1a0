"""What every configured source has, whatever its kind: a name, timeouts, a rate limit, and for
HTTP ones a URL, authentication, TLS and headers; and the rule that secrets never live in the file.

Each secret comes from the environment as ``OPSAGENT_<KIND>_<NAME>_<SECRET>`` (e.g.
``OPSAGENT_PROMETHEUS_MAIN_TOKEN``, ``OPSAGENT_ELASTICSEARCH_LOGS_API_KEY``, see :func:`secret_env`),
and a secret written in the file is refused with the variable to set instead: a secret-named key,
a credential header (``Authorization``, ``X-Api-Key``…), a URL with user info or a token in its
query. The refusal names the setting and never repeats the value. Each adapter's own settings sit
beside it (``adapters/<adapter>/config.py``); the ``sources:`` section that lists them all is
:mod:`adapters.sourceconfig`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal
from urllib.parse import parse_qsl, urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from opsagent.redaction import CREDENTIAL_NAME

Kind = Literal[
    "prometheus", "elasticsearch", "loki", "git", "change_feed", "jaeger", "tempo", "kubernetes", "alertmanager"
]


Secret = Literal["token", "password", "api_key"]


_SECRET_KEYS = {"token", "password", "api_key", "apikey", "secret", "bearer", "bearer_token", "credentials"}


_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")


def credentials_in_url(url: str) -> str | None:
    """What in a URL is a credential (user info, a token in the query), or None. Never the value."""
    parts = urlsplit(url)
    if "@" in parts.netloc:
        return "holds credentials (user info before @)"
    named = sorted({k for k, _ in parse_qsl(parts.query, keep_blank_values=True) if CREDENTIAL_NAME.search(k)})
    if named:
        return f"holds a credential in its query ({', '.join(named)})"
    return None


def credential_headers(headers: Mapping[str, str]) -> list[str]:
    """The names of headers that carry credentials."""
    return sorted(k for k in headers if CREDENTIAL_NAME.search(k))


def refuse_in_file(what: str, *, kind: str, name: object, secret: Secret, how: str) -> ValueError:
    return ValueError(
        f"{what}: secrets are read from the environment only; remove it from the file, set {how} "
        f"and {secret_env(kind, str(name or 'NAME'), secret)}"
    )


def secret_env(kind: str, name: str, secret: Secret) -> str:
    """The environment variable a secret of a configured source is read from."""
    return f"OPSAGENT_{kind}_{name}_{secret}".upper().replace("-", "_")


class SourceConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: Kind = "prometheus"  # set by each subclass; not read from the file

    name: str = Field(description="unique within its kind; names the source in reports and its secrets")
    timeout_s: float = Field(default=10.0, gt=0, description="per HTTP request (the tool layer has its own per call)")
    rate_limit_per_s: float | None = Field(default=None, gt=0, description="reads a second at most (bursts of as many)")

    @model_validator(mode="before")
    @classmethod
    def _no_secrets(cls, data: Any) -> Any:
        if isinstance(data, Mapping):
            if "kind" in data and data["kind"] != cls.model_fields["kind"].default:
                raise ValueError("kind is given by the section the source is listed under")
            found = sorted(k for k in data if str(k).lower() in _SECRET_KEYS)
            if found:
                name = data.get("name", "NAME")
                kind = cls.model_fields["kind"].default
                secret: Secret = "api_key" if "api_key" in found else "password" if "password" in found else "token"
                raise ValueError(
                    f"{', '.join(found)}: secrets are read from the environment only; remove them from the file "
                    f"and set {secret_env(kind, str(name), secret)}"
                )
        return data

    @field_validator("name")
    @classmethod
    def _plain_name(cls, name: str) -> str:
        if not _NAME.match(name):
            raise ValueError("use letters, digits, - and _ (it becomes part of environment variable names)")
        return name

    def secret(self, secret: Secret, environ: Mapping[str, str]) -> str | None:
        return environ.get(secret_env(self.kind, self.name, secret)) or None


def no_credentials_in(url: str, *, kind: str, name: object) -> str:
    problem = credentials_in_url(url)
    if problem is None:
        return url
    basic = "user info" in problem
    raise refuse_in_file(
        problem,
        kind=kind,
        name=name,
        secret="password" if basic else "token",
        how="auth: basic with username:" if basic else "auth: bearer",
    )


class HttpSourceConfig(SourceConfig):
    url: str
    auth: Literal["none", "bearer", "basic"] = "none"
    username: str | None = Field(default=None, description="for basic auth; the password comes from the environment")
    verify: bool | str = Field(default=True, description="TLS: verify (true), do not (false), or a CA bundle path")
    headers: dict[str, str] = Field(default_factory=dict, description="extra headers, e.g. X-Scope-OrgID (no secrets)")

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str, info: ValidationInfo) -> str:
        if not url.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return no_credentials_in(url, kind=cls.model_fields["kind"].default, name=info.data.get("name")).rstrip("/")

    @field_validator("headers")
    @classmethod
    def _no_credential_headers(cls, headers: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        found = credential_headers(headers)
        if found:
            kind = cls.model_fields["kind"].default
            raise refuse_in_file(
                f"{', '.join(found)} carries a credential",
                kind=kind,
                name=info.data.get("name"),
                secret="token",
                how="auth: bearer",
            )
        return headers

    def credentials(self, environ: Mapping[str, str]) -> tuple[str | None, tuple[str, str] | None]:
        """(bearer token, basic (user, password)) as configured."""
        if self.auth == "bearer":
            return self.secret("token", environ), None
        if self.auth == "basic":
            return None, (self.username or "", self.secret("password", environ) or "")
        return None, None
