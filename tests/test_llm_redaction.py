"""Redaction before anything is sent: each kind of secret, the optional emails and IPs, no false
alarms on the prompts themselves, and planted secrets that never reach a request body."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import respx

from opsagent.llm import FunctionModel, follow_hints
from opsagent.llm.prompts import default_prompts
from opsagent.redaction import redact, redactors, scrub_model
from tests.llm_support import ENDPOINT, incident_copy, investigate, reasoner

JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
OPENAI_KEY = "sk-proj-AbCdEf1234567890GhIjKlMn"
GITHUB_TOKEN = "ghp_aB3dE5fG7hI9jK1lM3nO5pQ7rS9tU1vW3xY5"
AWS_KEY_ID = "AKIAIOSFODNN7EXAMPLE"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
URL_PASSWORD = "Sup3rS3cretPw"
BEARER = "f8Kq2LmN9pR4sT6vX1zB3cD5"
DB_PASSWORD = "hunter2isMyPass9"
PRIVATE_KEY_BODY = "MIIEowIBAAKCAQEAx3P5d0qfGbq2Sd1Zl9Yz8kR2"
GCP_KEY = "AIzaSyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q"
AZURE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq"
SLACK_TOKEN = "xoxb-1234567890-abcdefghijklmnop"


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        (f"Authorization: Bearer {BEARER}", BEARER),
        (f"curl -H 'authorization: basic {BEARER}'", BEARER),
        (f"token {JWT} expired", JWT),
        (f"OPENAI_API_KEY={OPENAI_KEY}", OPENAI_KEY),
        (f"cloning with {GITHUB_TOKEN}", GITHUB_TOKEN),
        (f"slack {SLACK_TOKEN}", SLACK_TOKEN),
        (f"postgres://orders:{URL_PASSWORD}@db.internal:5432/orders", URL_PASSWORD),
        (f"key id {AWS_KEY_ID}", AWS_KEY_ID),
        (f"aws_secret_access_key = {AWS_SECRET}", AWS_SECRET),
        (f"maps key {GCP_KEY}", GCP_KEY),
        (f"DefaultEndpointsProtocol=https;AccountName=x;AccountKey={AZURE_KEY};", AZURE_KEY),
        (f'{{"password": "{DB_PASSWORD}"}}', DB_PASSWORD),
        (f"db_password={DB_PASSWORD}", DB_PASSWORD),
        (f"-----BEGIN RSA PRIVATE KEY-----\n{PRIVATE_KEY_BODY}\n-----END RSA PRIVATE KEY-----", PRIVATE_KEY_BODY),
        (f"-----BEGIN OPENSSH PRIVATE KEY-----\n{PRIVATE_KEY_BODY}", PRIVATE_KEY_BODY),
        # secrets without a digit: after = or :, in headers, and as JSON keys
        ("password=hunterLettersOnlyPw", "hunterLettersOnlyPw"),
        ("login failed token=abcdefGHIJKLmnop user=bob", "abcdefGHIJKLmnop"),
        ("secret: correcthorsebatterystaple", "correcthorsebatterystaple"),
        ("X-Api-Key: hdrLettersOnlyApiKeyValue", "hdrLettersOnlyApiKeyValue"),
        ("request headers: Authorization: Basic dXNlcjpwYXNzd29yZA==", "dXNlcjpwYXNzd29yZA=="),
        ("Cookie: session=lettersOnlySession; theme=dark", "lettersOnlySession"),
        ("Set-Cookie: sid=cookieLettersOnly; Path=/; HttpOnly", "cookieLettersOnly"),
        ('{"client_secret": "lettersOnlyClientSecret", "user": "bob"}', "lettersOnlyClientSecret"),
        ('{"api_key":"lettersOnlyApiKeyValue"}', "lettersOnlyApiKeyValue"),
        ('{"token": "lettersOnlyTokenValue"}', "lettersOnlyTokenValue"),
    ],
)
def test_each_kind_of_secret_is_masked(text: str, secret: str) -> None:
    masked, count = redact(text, redactors())
    assert secret not in masked and count >= 1 and "[REDACTED:" in masked


@pytest.mark.parametrize("value", ["Configured-Secret-0042", "geheimnis-Σ-ΑΣ-wert"])
def test_a_configured_secret_is_masked_in_text_that_no_shape_rule_would_read(value: str) -> None:
    # the chain skips text holding none of its redactors' words: the configured values are words too,
    # in any case (an ASCII one) or always looked for (one whose lower case could differ in place)
    chain = redactors(environ={"OPSAGENT_STORE_PASSWORD": value})
    masked, count = redact(f"connected as {value} to the store", chain)
    assert value not in masked and count == 1
    assert redact("connected as nobody to the store", chain) == ("connected as nobody to the store", 0)


def test_a_secret_named_in_capitals_is_masked() -> None:
    masked, count = redact("PWD: lettersOnlyPwdValue; X-AUTH-TOKEN: abcdEFGHijklMNOP", redactors())
    assert count == 2 and "lettersOnlyPwdValue" not in masked and "abcdEFGHijklMNOP" not in masked


def test_a_dict_keyed_by_a_secret_name_is_masked_whatever_its_value() -> None:
    body = {"password": "hunter", "client_secret": "lettersOnly", "nested": [{"api_key": "abcdefgh"}], "user": "bob"}
    masked = scrub_model(body)
    assert "hunter" not in str(masked) and "lettersOnly" not in str(masked) and "abcdefgh" not in str(masked)
    assert masked["user"] == "bob"


def test_a_word_saying_there_is_no_secret_is_left_alone() -> None:
    text = "password: required; the token is expired; api_key: missing; secret=null"
    assert redact(text, redactors()) == (text, 0)


def test_emails_and_ips_only_when_asked() -> None:
    text = "login by alice@example.com from 10.1.2.3 and fe80:0:0:0:202:b3ff:fe1e:8329"
    assert redact(text, redactors()) == (text, 0)
    masked, count = redact(text, redactors(emails_too=True, ips_too=True))
    assert count == 3 and "alice@" not in masked and "10.1.2.3" not in masked and "fe80" not in masked


def test_ordinary_words_numbers_and_versions_are_left_alone() -> None:
    text = (
        "max_tokens=1024 token_budget: 40000 tokens left; deploy 3.7.2 -> 3.7.3; the password field was empty; "
        "core-pool-size: 32; trace 1aebb62e12fb18988fe9873ea79b0fa9; secret rotation is due"
    )
    assert redact(text, redactors()) == (text, 0)


def test_the_quick_gate_passes_every_text_a_redactor_would_change() -> None:
    # text holding none of the redactors' words skips them: redacting must give what every one gives
    import random

    rng = random.Random(24)
    chain = redactors(environ={"OPSAGENT_LLM_API_KEY": "s3cr3t-Value-42"})
    fragments = [
        "Bearer ",
        JWT,
        "token=",
        "key:",
        "passw",
        OPENAI_KEY,
        GITHUB_TOKEN,
        "s3cr3t-Value-42",
        "x ",
        "://u:p@h",
    ]
    for _ in range(2_000):
        text = "".join(rng.choice(fragments) for _ in range(rng.randint(1, 4)))
        every = text
        for step in chain:
            every = step(every)[0]
        assert redact(text, chain)[0] == every


def test_the_prompts_themselves_trigger_nothing() -> None:
    prompts = default_prompts()
    for name in type(prompts).model_fields:
        assert redact(getattr(prompts, name), redactors(emails_too=True, ips_too=True))[1] == 0, name


PLANTED = [JWT, OPENAI_KEY, GITHUB_TOKEN, AWS_KEY_ID, AWS_SECRET, URL_PASSWORD, DB_PASSWORD, PRIVATE_KEY_BODY]


def test_planted_secrets_never_reach_a_request_body(tmp_path: Path) -> None:
    path = incident_copy(
        tmp_path,
        log_lines=[
            {
                "ts": "2026-03-17T14:07:10.000Z",
                "service": "order-service",
                "level": "ERROR",
                "message": f"payment call failed: Authorization: Bearer {JWT} api_key={OPENAI_KEY}",
            },
            {
                "ts": "2026-03-17T14:08:10.000Z",
                "service": "order-service",
                "level": "ERROR",
                "message": f"s3 upload refused for {AWS_KEY_ID} aws_secret_access_key={AWS_SECRET}",
            },
        ],
        changes=[
            {
                "id": "chg-0badc0de",
                "ts": "2026-03-17T13:59:00Z",
                "service": "order-service",
                "kind": "config",
                "summary": f"rotate db credentials; mirror from https://ci:{URL_PASSWORD}@git.internal/cfg.git",
                "author": "j.kowalski",
                "diff": f"-  password: old\n+  password: {DB_PASSWORD}\n+  tls_key: |\n"
                f"+    -----BEGIN PRIVATE KEY-----\n+    {PRIVATE_KEY_BODY}\n+    -----END PRIVATE KEY-----\n",
            }
        ],
        summary=f"order-service p99 latency 2.25s (runbook token {GITHUB_TOKEN})",
    )
    model = FunctionModel(follow_hints)
    with respx.mock:
        route = respx.post(ENDPOINT).mock(side_effect=model.handle)
        report = investigate(reasoner(), path)
    seen = "\n".join(o.text for o in report.observations) + report.incident.title
    # the toolbox masks what the sources return, the report its alert's text: neither carries one
    assert all(secret not in seen for secret in PLANTED) and "[REDACTED:" in seen
    bodies = [call.request.content.decode() for call in route.calls]
    assert bodies and all(secret not in body for body in bodies for secret in PLANTED)
    unescaped = [json.dumps(json.loads(b)) for b in bodies]
    assert all(secret not in body for body in unescaped for secret in PLANTED)
    assert report.llm is not None and sum(x.redactions for x in report.llm.exchanges) > 0
    transcript = report.llm.model_dump_json()
    assert all(secret not in transcript for secret in PLANTED), "the saved prompts are the redacted ones"
    assert "[REDACTED:" in transcript


def test_credentials_in_the_base_url_are_not_in_the_report() -> None:
    r = reasoner(FunctionModel(follow_hints))
    r.client.base_url = f"https://user:{URL_PASSWORD}@llm.example.com/v1?key={OPENAI_KEY}"
    report = investigate(r)
    assert report.llm is not None and report.llm.base_url == "https://llm.example.com/v1"


def test_no_request_leaves_without_passing_redaction() -> None:
    """Every message the transcript holds went through the redactors: they would mask nothing more."""
    model = FunctionModel(follow_hints)
    report = investigate(reasoner(model))
    assert report.llm is not None
    chain = redactors()
    for exchange in report.llm.exchanges:
        for m in exchange.request:
            assert redact(m.content or "", chain)[1] == 0
