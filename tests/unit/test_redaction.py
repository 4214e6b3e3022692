"""Redaction: URL passwords, secret parameters and registered secrets become ``***``."""

from __future__ import annotations

import logging

import pytest
from pydantic import SecretStr

from flowpark import redaction
from flowpark.redaction import MASK, RedactingFormatter, redact, redact_url, register_secrets
from flowpark.samples.settings import SampleSettings, callback_credential
from flowpark.settings import Settings


@pytest.fixture(autouse=True)
def _fresh_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(redaction, "_secrets", set())


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://app:s3cr%40t@db:5432/fp", f"postgresql://app:{MASK}@db:5432/fp"),
        (
            "postgresql+psycopg://postgres:pw@127.0.0.1/x?sslmode=require",
            f"postgresql+psycopg://postgres:{MASK}@127.0.0.1/x?sslmode=require",
        ),
        ("postgresql://app@db/fp", "postgresql://app@db/fp"),
        ("sqlite:///flowpark.db", "sqlite:///flowpark.db"),
        ("https://api.example/hook?token=abc123&x=1", f"https://api.example/hook?token={MASK}&x=1"),
        ("host=db password=hunter22 user=app", f"host=db password={MASK} user=app"),
        # libpq's passphrase of the client's SSL key
        (
            "postgresql://app@db/fp?sslmode=verify-full&sslpassword=k3y-pass",
            f"postgresql://app@db/fp?sslmode=verify-full&sslpassword={MASK}",
        ),
        # '#' and '?' end the authority: the '@' after them is no userinfo's
        ("https://example.test:8443#@frag", "https://example.test:8443#@frag"),
        ("https://example.test:8443/#@frag", "https://example.test:8443/#@frag"),
        ("https://example.test:8443?next=a@b", "https://example.test:8443?next=a@b"),
        ("https://a#b:c@example.test/", "https://a#b:c@example.test/"),
        ("https://u:pw@example.test/p#@x", f"https://u:{MASK}@example.test/p#@x"),
        ("postgresql://app:pa#ss@db/fp", f"postgresql://app:{MASK}@db/fp"),
    ],
)
def test_urls_lose_their_passwords(url: str, shown: str) -> None:
    assert redact_url(url) == shown


@pytest.mark.parametrize(
    ("line", "shown"),
    [
        (
            "cannot reach postgresql://db/fp?password=pw1: connection refused",
            f"cannot reach postgresql://db/fp?password={MASK}: connection refused",
        ),
        ("store postgresql://db/fp?password=pw1:", f"store postgresql://db/fp?password={MASK}:"),
        ("(postgresql://db/fp?password=pw1), then", f"(postgresql://db/fp?password={MASK}), then"),
        (
            "postgresql://db/fp?password=p:w@1&sslmode=x",
            f"postgresql://db/fp?password={MASK}&sslmode=x",
        ),
        ("dsn password=a:b: refused", f"dsn password={MASK}: refused"),
    ],
)
def test_a_secret_parameter_keeps_the_punctuation_after_it(line: str, shown: str) -> None:
    assert redact(line) == shown


def test_registered_secrets_are_masked_in_any_text_and_log_line() -> None:
    register_secrets(["tok-1234567", None, "", "abc"])  # "abc": too short to mask in text
    assert redact("Bearer tok-1234567 for abc") == f"Bearer {MASK} for abc"
    record = logging.LogRecord(
        "t", logging.ERROR, __file__, 1, "token %s at %s", ("tok-1234567", "x://u:p@h"), None
    )
    try:
        raise ValueError("boom with tok-1234567")
    except ValueError:
        import sys

        record.exc_info = sys.exc_info()
    line = RedactingFormatter("%(message)s").format(record)
    assert "tok-1234567" not in line and "x://u:***@h" in line and "boom with ***" in line


def test_settings_name_their_secrets_but_not_the_public_default_token() -> None:
    settings = Settings(
        database_url="postgresql://app:pw-1234@db/fp",
        api_tokens="ops:tok-abcdef:read,dev-token",
        console_secret=SecretStr("console-secret-1"),
    )
    assert settings.secret_values() == {"pw-1234", "tok-abcdef", "console-secret-1"}
    plain = Settings(database_url="sqlite:///x.db", api_tokens="dev-token")
    assert plain.secret_values() == set()


def test_the_callback_token_is_for_signals_only_and_none_of_the_api_tokens() -> None:
    settings = Settings(api_tokens="ops:tok-abcdef:read+start+signal+operate")
    credential = callback_credential(settings, SampleSettings())
    assert credential.scopes == {"signal"} and credential.value not in settings.tokens
    # every process sharing the API tokens derives the same one
    again = callback_credential(Settings(api_tokens=settings.api_tokens), SampleSettings())
    assert again == credential
    other = callback_credential(Settings(api_tokens="tok-other"), SampleSettings())
    assert other.value != credential.value
