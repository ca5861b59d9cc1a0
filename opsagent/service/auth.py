"""Authentication. The webhook takes what Alertmanager's ``http_config`` sends: a bearer token
(``authorization: {credentials: …}``) or basic auth (``basic_auth: {username, password}``). The
read side (incidents, report pages, /metrics) takes its own credentials (a token for scripts and
Prometheus, basic auth so a browser prompts for it) or the webhook's; health probes take none.

Secrets are compared in constant time: both sides are hashed first, so neither the content nor the
length of a guess shows in the time a refusal takes.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from dataclasses import dataclass

from pydantic import SecretStr

from opsagent.errors import ConfigError
from opsagent.settings import Settings


def _same(given: str, expected: str) -> bool:
    return hmac.compare_digest(
        hashlib.sha256(given.encode("utf-8", "surrogatepass")).digest(),
        hashlib.sha256(expected.encode("utf-8", "surrogatepass")).digest(),
    )


@dataclass(frozen=True, repr=False)
class Credentials:
    """What a caller must present. ``open`` means no check at all (an explicit choice)."""

    token: SecretStr | None = None
    username: str | None = None
    password: SecretStr | None = None
    open: bool = False

    @classmethod
    def from_settings(cls, settings: Settings) -> Credentials:
        if (settings.webhook_username is None) != (settings.webhook_password is None):
            raise ConfigError("basic auth needs both OPSAGENT_WEBHOOK_USERNAME and OPSAGENT_WEBHOOK_PASSWORD")
        creds = cls(
            token=settings.webhook_token,
            username=settings.webhook_username,
            password=settings.webhook_password,
            open=settings.allow_unauthenticated,
        )
        if not creds.configured and not creds.open:
            raise ConfigError(
                "the webhook needs credentials: set OPSAGENT_WEBHOOK_TOKEN (bearer) or OPSAGENT_WEBHOOK_USERNAME "
                "and OPSAGENT_WEBHOOK_PASSWORD (basic auth) in the environment, or allow_unauthenticated: true"
            )
        return creds

    @classmethod
    def readers_from_settings(cls, settings: Settings) -> Credentials:
        """Who may read incidents, pages and metrics besides the webhook's caller; ``open`` with
        ``public_reads`` (an authenticating proxy in front)."""
        if (settings.read_username is None) != (settings.read_password is None):
            raise ConfigError("basic auth for readers needs both OPSAGENT_READ_USERNAME and OPSAGENT_READ_PASSWORD")
        return cls(
            token=settings.read_token,
            username=settings.read_username,
            password=settings.read_password,
            open=settings.public_reads,
        )

    @property
    def configured(self) -> bool:
        return self.token is not None or self.password is not None

    @property
    def challenge(self) -> str:
        schemes = []  # Basic first: a browser prompts for the first scheme it supports
        if self.password is not None:
            schemes.append('Basic realm="opsagent"')
        if self.token is not None:
            schemes.append('Bearer realm="opsagent"')
        return ", ".join(schemes) or 'Bearer realm="opsagent"'

    def __repr__(self) -> str:
        return f"Credentials(bearer={self.token is not None}, basic={self.password is not None}, open={self.open})"

    def allows(self, authorization: str | None) -> bool:
        """Whether an ``Authorization`` header value carries the configured credentials."""
        if self.open:
            return True
        if not authorization:
            return False
        scheme, _, value = authorization.strip().partition(" ")
        value = value.strip()
        scheme = scheme.lower()
        if scheme == "bearer" and self.token is not None:
            return _same(value, self.token.get_secret_value())
        if scheme == "basic" and self.password is not None and self.username is not None:
            try:
                user, sep, password = base64.b64decode(value, validate=True).decode("utf-8").partition(":")
            except (binascii.Error, UnicodeDecodeError):
                return False
            # Both halves are always compared: no early exit on a wrong user name.
            user_ok = _same(user, self.username)
            password_ok = _same(password, self.password.get_secret_value())
            return bool(sep) and user_ok & password_ok
        return False
